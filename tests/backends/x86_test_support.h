// Shared helpers of the x86 backend tests: programs from text, transformed programs, quick
// measuring options.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "support/scaled_kernels.h"
#include "transforms/registry.h"

namespace perfdojo::testing {

/// A checked program from text; fails the test when the text is invalid.
inline ir::Program program_of(const std::string& text) {
  auto r = ir::load_program(text, "<test>");
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

/// A scaled suite kernel; fails the test when it does not load.
inline ir::Program scaled(const std::string& name) {
  auto r = load_scaled_kernel(name);
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

/// `p` after the actions (one per line, trace syntax); fails the test when one is refused.
inline ir::Program transformed(const ir::Program& p, const std::string& trace,
                               const std::string& target = "x86_avx512") {
  auto t = transforms::parse_trace(trace);
  REQUIRE_MESSAGE(t.ok(), t.error_text());
  auto r = transforms::replay(p, t.value(), *transforms::target_by_name(target));
  REQUIRE_MESSAGE(r.ok(), r.error_text());
  return r.value();
}

/// Options that verify and time briefly: the tests check results, not speed.
inline backends::MeasureOptions quick(uint64_t seed = 0) {
  backends::MeasureOptions o;
  o.seed = seed;
  o.time_budget_s = 0.002;
  o.min_reps = 1;
  o.max_reps = 3;
  o.timeout_s = 20;
  return o;
}

}  // namespace perfdojo::testing
