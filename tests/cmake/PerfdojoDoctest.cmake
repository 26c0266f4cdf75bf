# perfdojo_discover_tests(TARGET): registers every doctest TEST_CASE of TARGET as its own CTest
# test, named "<TARGET>: <test case>", once TARGET is built (the list is read from the binary).
#
# Properties of each test:
#   LABELS            the test case's doctest TEST_SUITE names (space-separated words, e.g.
#                     "golden", "hw slow"), "unit" when it has none, and TARGET itself
#   SKIP_RETURN_CODE  77: the test main's status when the case ended with PERFDOJO_SKIP
#                     (tests/support/skip.h), so CTest reports it as skipped, not passed
#
# Why not doctest.cmake's doctest_discover_tests: its ADD_LABELS starts the binary once per test
# case, does not escape commas in that call (a name with a comma gets its neighbours' suites),
# and writes an invalid set_tests_properties() for a test case without a suite.
set(_PERFDOJO_DISCOVER_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/PerfdojoDoctestAddTests.cmake")

function(perfdojo_discover_tests target)
  set(ctest_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_tests.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    BYPRODUCTS "${ctest_file}"
    COMMAND "${CMAKE_COMMAND}"
            -D "TEST_TARGET=${target}"
            -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>"
            -D "TEST_WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}"
            -D "CTEST_FILE=${ctest_file}"
            -P "${_PERFDOJO_DISCOVER_SCRIPT}"
    VERBATIM)
  file(WRITE "${include_file}"
    "if(EXISTS \"${ctest_file}\")\n"
    "  include(\"${ctest_file}\")\n"
    "else()\n"
    "  add_test(\"${target}_NOT_BUILT\" \"${target}_NOT_BUILT\")\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
