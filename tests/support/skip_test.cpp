// The skip mechanism itself (tests/support/skip.h, doctest_main.cpp). The test case below does
// what PERFDOJO_SELFTEST asks; tests/cmake/check_skip_status.cmake runs it each way and checks
// the exit status CTest sees: 77 (skipped) only when it skipped and nothing failed.
#include "support/skip.h"

#include <cstdlib>
#include <string>

TEST_CASE("PERFDOJO_SKIP ends a test case as skipped, and a failure before it still fails") {
  const char* env = std::getenv("PERFDOJO_SELFTEST");
  const std::string mode = env ? env : "";
  if (mode == "skip") PERFDOJO_SKIP("PERFDOJO_SELFTEST=skip asked for it");
  if (mode == "fail-then-skip") {
    CHECK_MESSAGE(false, "PERFDOJO_SELFTEST=fail-then-skip asked for a failure");
    PERFDOJO_SKIP("after a failure, which must still fail the test");
  }
  CHECK(perfdojo::testing::skip_count() == 0);
}
