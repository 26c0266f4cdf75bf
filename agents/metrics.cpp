#include "agents/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "util/json.h"

namespace perfdojo::agents {

std::string MetricsWriter::open(const std::string& out_dir, bool append) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return "cannot create " + out_dir + ": " + ec.message();
  std::string csv = out_dir + "/metrics.csv", jsonl = out_dir + "/metrics.jsonl";
  bool fresh = !append || !std::filesystem::exists(csv);
  csv_ = std::fopen(csv.c_str(), fresh ? "w" : "a");
  jsonl_ = std::fopen(jsonl.c_str(), fresh ? "w" : "a");
  if (!csv_ || !jsonl_) return "cannot write metrics in " + out_dir;
  if (fresh) std::fputs("step,wall_s,name,value,kernel\n", csv_);
  return "";
}

MetricsWriter::~MetricsWriter() {
  if (csv_) std::fclose(csv_);
  if (jsonl_) std::fclose(jsonl_);
}

void MetricsWriter::write(int64_t step, double wall_s,
                          const std::vector<std::pair<std::string, double>>& scalars,
                          const std::string& kernel) {
  if (!csv_) return;
  util::JsonObject o;
  o.add("step", step).add("wall_s", wall_s);
  if (!kernel.empty()) o.add("kernel", kernel);
  for (const auto& [name, value] : scalars) {
    std::fprintf(csv_, "%lld,%.3f,%s,%s,%s\n", static_cast<long long>(step), wall_s, name.c_str(),
                 util::json_number(value).c_str(), kernel.c_str());
    o.add(name, value);
  }
  std::fprintf(jsonl_, "%s\n", o.str().c_str());
}

void MetricsWriter::flush() {
  if (csv_) std::fflush(csv_);
  if (jsonl_) std::fflush(jsonl_);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  long t = std::lround(s);
  char b[32];
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(b, sizeof b, "%ld:%02ld", t / 60, t % 60);
  return b;
}

ProgressBar::ProgressBar(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}

void ProgressBar::update(double fraction, double elapsed_s, const std::string& status) {
  if (!enabled_ || (last_ >= 0 && elapsed_s - last_ < 0.25)) return;
  last_ = elapsed_s;
  fraction = std::clamp(fraction, 0.0, 1.0);
  constexpr int kWidth = 24;
  int filled = static_cast<int>(fraction * kWidth);
  std::string bar(filled, '#');
  bar += std::string(kWidth - filled, '-');
  double eta = fraction > 1e-6 ? elapsed_s * (1 - fraction) / fraction : 0;
  std::fprintf(stderr, "\r\033[K[%s] %3d%% %s eta %s | %s", bar.c_str(),
               static_cast<int>(fraction * 100), format_duration(elapsed_s).c_str(),
               format_duration(eta).c_str(), status.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (enabled_ && drawn_) {
    std::fputs("\r\033[K", stderr);
    drawn_ = false;
    last_ = -1;
  }
}

void ProgressBar::println(const std::string& line) {
  clear();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace perfdojo::agents
