// Run logging: scalar metrics to CSV (long format) and JSONL under CleanRL's names
// (charts/episodic_return, charts/best_speedup, losses/td_loss, losses/q_values, charts/epsilon,
// charts/SPS ...), and a progress bar with rate and ETA on stderr.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace perfdojo::agents {

/// Appends metric records to OUT/metrics.csv (step,wall_s,name,value,kernel) and
/// OUT/metrics.jsonl (one object per record group).
class MetricsWriter {
 public:
  /// Opens (appending when `append`, e.g. on resume) the two files in `out_dir`; "" or an error.
  std::string open(const std::string& out_dir, bool append);
  ~MetricsWriter();
  /// Writes one group of scalars at `step`; `kernel` tags per-kernel records ("" for none).
  void write(int64_t step, double wall_s,
             const std::vector<std::pair<std::string, double>>& scalars,
             const std::string& kernel = "");
  void flush();

 private:
  std::FILE* csv_ = nullptr;
  std::FILE* jsonl_ = nullptr;
};

/// A one-line progress bar redrawn in place on a terminal; silent when stderr is not one (logs
/// then get the periodic lines only).
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled);
  /// Redraws at most every 0.25 s: fraction done, elapsed, ETA, and `status`.
  void update(double fraction, double elapsed_s, const std::string& status);
  /// Clears the bar so a normal line can be printed.
  void clear();
  /// Prints a line above the bar.
  void println(const std::string& line);

 private:
  bool enabled_;
  bool drawn_ = false;
  double last_ = -1;
};

/// "m:ss" or "h:mm:ss".
std::string format_duration(double seconds);

}  // namespace perfdojo::agents
