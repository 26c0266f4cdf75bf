// The cost model's fixed parameters: what it assumes of any core beyond the machine profile's
// figures (cache line, call cost), and its tuning constants. Issue width, ports and the
// out-of-order window are the profile's (MachineProfile), with x86 defaults.
#pragma once

namespace perfdojo::backends::cost_detail {

constexpr double kLineBytes = 64;
constexpr double kCallUops = 20;  // a libm or libmvec exp/log/tanh call
// A line fetched for one element of a large stride costs this many streamed lines: the
// prefetchers do not run ahead of it and a latency-bound loop waits for each.
constexpr double kScatteredLineCost = 2;
// The parts of a nest's time below its slowest one overlap with it only partly.
constexpr double kRestShare = 0.3;
constexpr double kRegisterElements = 64;  // a temporary this small can live in registers
// Fraction of a cache that holds a working set before conflicts and other data evict it.
constexpr double kCacheShare[3] = {0.75, 0.7, 0.6};
// A loop's start and exit (setup, the exit branch), in cycles per execution of the loop.
constexpr double kLoopEntryCycles = 1;

}  // namespace perfdojo::backends::cost_detail
