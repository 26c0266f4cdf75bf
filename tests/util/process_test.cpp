// The one process helper (util/process.h): exit status, captured output, timeouts that kill the
// whole process group, and programs that cannot start.
#include "util/process.h"

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>

using namespace perfdojo;

TEST_CASE("process: the exit status and both output streams come back") {
  auto r = util::run_process({"sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(r.started);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 3);
  CHECK_FALSE(r.ok());
  CHECK(r.output == "out\nerr\n");

  r = util::run_process({"true"});
  CHECK(r.ok());
  CHECK(r.output.empty());

  // argv is passed as it is: no shell, no word splitting.
  r = util::run_process({"printf", "%s|", "a b", "'c'", "$HOME"});
  CHECK(r.ok());
  CHECK(r.output == "a b|'c'|$HOME|");

  // More output than a pipe holds is read while the program writes it.
  r = util::run_process({"sh", "-c", "head -c 1000000 /dev/zero"});
  CHECK(r.ok());
  CHECK(r.output.size() == 1000000);

  // stdin is /dev/null: a program reading it ends.
  r = util::run_process({"cat"}, {.timeout_s = 10});
  CHECK(r.ok());
}

TEST_CASE("process: killed by a signal, or never started") {
  auto r = util::run_process({"sh", "-c", "kill -TERM $$"});
  CHECK(r.started);
  CHECK(r.exit_code == 128 + SIGTERM);

  r = util::run_process({"/no/such/program"});
  CHECK_FALSE(r.started);
  CHECK(r.exit_code == -1);
  CHECK(r.output.find("cannot run /no/such/program") == 0);

  r = util::run_process({});
  CHECK_FALSE(r.started);

  CHECK(util::find_executable("sh").find("/sh") != std::string::npos);
  CHECK(util::find_executable("no-such-program-perfdojo").empty());
  CHECK(util::find_executable("/").empty());  // a directory is not a program
}

TEST_CASE("process: a timeout kills the program and what it started") {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  // The child sleeps while holding the pipe open; the timeout must not wait for it.
  auto r = util::run_process({"sh", "-c", "echo started; sleep 30 & sleep 30"}, {.timeout_s = 0.3});
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(r.timed_out);
  CHECK_FALSE(r.ok());
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK(r.output.find("started\n") == 0);
  CHECK(r.output.find("(killed after") != std::string::npos);
  CHECK(s < 5);

  // A program that closes its output and keeps running is bounded too.
  t0 = Clock::now();
  r = util::run_process({"sh", "-c", "exec >/dev/null 2>&1; sleep 30"}, {.timeout_s = 0.3});
  s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(r.timed_out);
  CHECK(s < 5);

  // In time: no kill.
  r = util::run_process({"sh", "-c", "sleep 0.05; echo done"}, {.timeout_s = 10});
  CHECK(r.ok());
  CHECK(r.output == "done\n");
}
