// The one main of every C++ test binary.
//
// Exit status: doctest's own when something failed (or for --help, --list-test-cases, ...);
// otherwise kSkipExitCode when a test case ended with PERFDOJO_SKIP, else 0. A run in which no
// test case matched the filters fails: CTest runs one test case per process by its name, and a
// name that stopped matching must not read as a pass.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "support/skip.h"

namespace {

unsigned g_test_cases_run = 0;

// Only counts what ran: doctest's own reporters still print everything.
struct RunCounter : doctest::IReporter {
  explicit RunCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    g_test_cases_run = s.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("perfdojo_run_counter", 1, RunCounter);

}  // namespace

int main(int argc, char** argv) {
  // Internal assertions on (PERFDOJO_EXPECT_LEGAL: apply_X reached without a passing check
  // throws), unless the caller chose otherwise.
  setenv("PERFDOJO_INTERNAL_CHECKS", "1", 0);
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit() || status != 0) return status;
  if (g_test_cases_run == 0) {
    std::fprintf(stderr, "[perfdojo] no test case matched the filters\n");
    return 1;
  }
  return perfdojo::testing::skip_count() > 0 ? perfdojo::testing::kSkipExitCode : 0;
}
