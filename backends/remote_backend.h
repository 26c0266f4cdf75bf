// Measurements taken elsewhere: a measurement farm (docs/ray.md) is a child process that speaks
// JSON lines on its stdin and stdout and measures on workers of its own (Ray actors, one per
// machine, or `perfdojo measure-worker` itself). The search stays here; only the timing moves.
//
// The farm protocol, one JSON object a line each way:
//   farm -> us, once at the start:  {"ready": true, "workers": K, ...}
//   us -> farm:  {"id": N, "op": "measure" | "compare", "backend": B, "hashes": [H...],
//                 "programs": [IR text...], "options": {MeasureOptions}}
//   farm -> us:  {"id": N, "ok": true, "results": [Measurement...], "worker": W}
//              | {"id": N, "ok": false, "error": MESSAGE}
// "measure" carries one program; "compare" up to Backend::kMaxCompared, timed interleaved on one
// worker. Replies may come in any order. A farm that dies, stops answering or sends a line that is
// not such an object is stopped, and the backend measures locally from then on (and says so).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "backends/backend.h"
#include "util/json.h"

namespace perfdojo::backends {

/// A Measurement as the farm protocol writes it (one JSON object).
std::string measurement_json(const Measurement& m);
/// Reads a Measurement written by measurement_json; an error names the field that is wrong.
std::optional<std::string> parse_measurement(const util::json::Value& v, Measurement* out);
/// MeasureOptions as the farm protocol writes them, and back (absent fields keep defaults).
std::string options_json(const MeasureOptions& o);
std::optional<std::string> parse_options(const util::json::Value& v, MeasureOptions* out);

/// A running farm process. Thread-safe: one request batch at a time.
class Farm {
 public:
  /// Starts `argv` (stdin and stdout piped, stderr inherited, its own process group) and waits
  /// up to `start_timeout_s` for its ready line. Returns the error when it cannot start or its
  /// first line is not a ready line.
  static std::variant<std::shared_ptr<Farm>, std::string> start(
      const std::vector<std::string>& argv, double start_timeout_s);
  ~Farm();
  Farm(const Farm&) = delete;
  Farm& operator=(const Farm&) = delete;

  /// One request: "measure" (one program) or "compare" (several, interleaved).
  struct Request {
    std::string op;
    std::string backend;
    std::vector<const ir::Program*> programs;
    MeasureOptions options;
  };
  /// Sends `requests` together and waits for every reply until `timeout_s`. One entry per
  /// request: its measurements (one per program), or nullopt when the farm failed as a whole
  /// (died, timed out, garbled a line; see error()). A request the farm refused carries the
  /// farm's error in each of its measurements.
  std::vector<std::optional<std::vector<Measurement>>> call(const std::vector<Request>& requests,
                                                            double timeout_s);
  /// Workers that measure at once (the ready line's "workers").
  int workers() const { return workers_; }
  /// The ready line, as the farm sent it (what it measures on).
  const std::string& ready_line() const { return ready_; }
  /// Why the farm was given up ("" while it works).
  std::string error() const;

 private:
  Farm() = default;
  // Stops the process (EOF on its stdin; when not `graceful`, SIGTERM to its group at once) and
  // kills it if it is still there after a grace period; error() says why.
  void fail(const std::string& why, bool graceful = false);
  std::optional<std::string> read_line(double deadline_s, std::string* line);
  mutable std::mutex mu_;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;  // the farm's stdin (we write) and stdout (we read)
  std::string buffer_, ready_, error_;
  int workers_ = 1;
  int64_t next_id_ = 1;
};

/// `perfdojo optimize --workers SPEC` as a command line: "ray://HOST:PORT" (Ray Client) or
/// "ray:HOST:PORT" / "ray:auto" (a driver on a cluster node) start the Ray farm
/// (`$PERFDOJO_FARM_PYTHON -m perfdojo_ray.farm --address ...`, python3 by default); "local"
/// starts `perfdojo measure-worker` (`self_exe`). Error text for anything else.
std::variant<std::vector<std::string>, std::string> farm_command(const std::string& spec,
                                                                 const std::string& self_exe);

/// A backend that sends measure() and compare() to a farm and everything else to `local` (the
/// same architecture here: capabilities, availability, name). When the farm fails it warns once
/// on stderr and measures with `local` from then on.
class RemoteBackend : public Backend {
 public:
  RemoteBackend(std::unique_ptr<Backend> local, std::shared_ptr<Farm> farm);
  std::string name() const override { return local_->name(); }
  Availability available() const override { return local_->available(); }
  Capabilities capabilities() const override { return local_->capabilities(); }
  bool deterministic() const override { return local_->deterministic(); }
  Measurement measure(const ir::Program& p, const MeasureOptions& options) override;
  std::vector<Measurement> measure_each(const std::vector<const ir::Program*>& programs,
                                        const MeasureOptions& options) override;
  std::vector<Measurement> compare(const std::vector<const ir::Program*>& programs,
                                   const MeasureOptions& options) override;
  int concurrency() const override;
  std::unique_ptr<Backend> clone() const override;
  /// Whether measurements still go to the farm (false after it failed).
  bool remote() const;

 private:
  // The farm's answers, or nullopt after it failed (then the caller measures locally).
  std::optional<std::vector<std::vector<Measurement>>> send(std::vector<Farm::Request> requests);
  std::unique_ptr<Backend> local_;
  std::shared_ptr<Farm> farm_;
};

}  // namespace perfdojo::backends
