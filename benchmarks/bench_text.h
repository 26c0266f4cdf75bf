// Text helpers the benchmark programs share: list options, the progress bar, figures in tables.
#pragma once

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace perfdojo::bench {

/// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

/// One line of progress on stderr: bar, rate and ETA of an optimiser run.
inline void draw_bar(const std::string& kernel, double fraction, int evals, double speedup,
                     double elapsed) {
  const int width = 24;
  int filled = std::clamp(static_cast<int>(fraction * width), 0, width);
  double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
  std::fprintf(stderr, "\r%-12s [%s%s] %3.0f%% %8d evals %6.0f/s ETA %4.0fs best x%.2f  ",
               kernel.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), fraction * 100, evals,
               elapsed > 0 ? evals / elapsed : 0, eta, speedup);
  std::fflush(stderr);
}

/// Seconds as milliseconds with three decimals, "-" when not measured.
inline std::string ms(double s) {
  if (!(s > 0)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", s * 1e3);
  return b;
}

/// "1.23x", "-" when either side is not measured.
inline std::string ratio(double num, double den) {
  if (!(num > 0) || !(den > 0)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", num / den);
  return b;
}

}  // namespace perfdojo::bench
