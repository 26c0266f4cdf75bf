// Honest skips for the doctest suites.
//
// PERFDOJO_SKIP(reason) ends the current test case as skipped: it records the skip, prints
// "SKIPPED: <reason>" and returns. A test case that skips after a failed check still fails.
// The one test main (tests/support/doctest_main.cpp) then exits with kSkipExitCode when the run
// skipped something and nothing failed; CTest registers that code as SKIP_RETURN_CODE, so the
// test shows as "Skipped" there and in scripts/test's summary line, never as passed.
//
// Use it only for what this machine lacks (an instruction set, a compiler, idle cores), never to
// step around a failure.
#pragma once

#include <doctest/doctest.h>

namespace perfdojo::testing {

/// Exit status of a test run that skipped something and failed nothing (the automake
/// convention, which CTest's SKIP_RETURN_CODE is set to).
inline constexpr int kSkipExitCode = 77;

/// How many times this process ended a test case with PERFDOJO_SKIP.
inline int& skip_count() {
  static int n = 0;
  return n;
}

}  // namespace perfdojo::testing

/// Ends the current test case as skipped; `reason` is streamed like MESSAGE's argument.
/// Usable only directly in a TEST_CASE body (it returns from the enclosing function).
#define PERFDOJO_SKIP(reason)            \
  do {                                   \
    ++::perfdojo::testing::skip_count(); \
    MESSAGE("SKIPPED: " << reason);      \
    return;                              \
  } while (false)
