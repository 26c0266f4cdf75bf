# Run at build time by perfdojo_discover_tests (PerfdojoDoctest.cmake): lists the test cases of
# TEST_EXECUTABLE with their suites and writes CTEST_FILE, one add_test() per test case.
# Inputs: TEST_TARGET, TEST_EXECUTABLE, TEST_WORKING_DIR, CTEST_FILE.
execute_process(
  COMMAND "${TEST_EXECUTABLE}" --list-test-cases --reporters=xml --no-version=true
  OUTPUT_VARIABLE output
  RESULT_VARIABLE result
  WORKING_DIRECTORY "${TEST_WORKING_DIR}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "listing the test cases of ${TEST_EXECUTABLE} failed (${result}):\n${output}")
endif()

# Entities end in ';', CMake's list separator: turn them into placeholders first (quotes, '<' and
# '>' stay placeholders until a name is read out, so the attribute patterns below hold).
string(REPLACE "&quot;" "@PD_QUOT@" output "${output}")
string(REPLACE "&apos;" "'" output "${output}")
string(REPLACE "&lt;" "@PD_LT@" output "${output}")
string(REPLACE "&gt;" "@PD_GT@" output "${output}")
string(REPLACE "&amp;" "&" output "${output}")
# A ';' in a test case name would split CMake's lists: it becomes a placeholder here, ',' in the
# CTest test's name and doctest's one-character wildcard '?' in its filter.
string(REPLACE ";" "@PD_SEMI@" output "${output}")
# CMake lists do not split inside square brackets, which test names use ("x[{0}]").
string(REPLACE "[" "@PD_LB@" output "${output}")
string(REPLACE "]" "@PD_RB@" output "${output}")

function(xml_unescape var text)
  string(REPLACE "@PD_QUOT@" "\"" text "${text}")
  string(REPLACE "@PD_LT@" "<" text "${text}")
  string(REPLACE "@PD_GT@" ">" text "${text}")
  string(REPLACE "@PD_LB@" "[" text "${text}")
  string(REPLACE "@PD_RB@" "]" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

# Quotes a CMake argument as a bracket argument.
function(bracket var text)
  set(${var} "[==[${text}]==]" PARENT_SCOPE)
endfunction()

string(REGEX MATCHALL "<TestCase( [a-z_]+=\"[^\"]*\")*/>" cases "${output}")
set(script "")
set(count 0)
bracket(exe "${TEST_EXECUTABLE}")
bracket(wd "${TEST_WORKING_DIR}")
foreach(tc IN LISTS cases)
  if(NOT tc MATCHES " name=\"([^\"]*)\"")
    message(FATAL_ERROR "${TEST_TARGET}: cannot read a test case from: ${tc}")
  endif()
  xml_unescape(name "${CMAKE_MATCH_1}")
  set(suite "")
  if(tc MATCHES " testsuite=\"([^\"]*)\"")
    xml_unescape(suite "${CMAKE_MATCH_1}")
  endif()
  string(STRIP "${suite}" suite)
  if(suite STREQUAL "")
    set(labels unit)
  else()
    string(REGEX REPLACE "[ \t]+" ";" labels "${suite}")
  endif()
  list(APPEND labels "${TEST_TARGET}")
  # doctest splits filters at commas; a backslash escapes one (and itself).
  string(REPLACE "\\" "\\\\" filter "${name}")
  string(REPLACE "," "\\," filter "${filter}")
  string(REPLACE "@PD_SEMI@" "?" filter "${filter}")
  string(REPLACE "@PD_SEMI@" "," name "${name}")
  bracket(test "${TEST_TARGET}: ${name}")
  bracket(arg "--test-case=${filter}")
  # Where no earlier run left CTest its measured times (a fresh build), the labels say which
  # tests are long, so that `ctest -j` starts them first instead of ending on one core with the
  # slowest: nvcc (cuda), qemu (cross), then slow and hw.
  set(cost 1)
  foreach(pair IN ITEMS "hw=5" "slow=20" "cross=50" "cuda=100")  # the highest that applies
    string(REPLACE "=" ";" pair "${pair}")
    list(GET pair 0 label)
    list(FIND labels "${label}" at)
    if(at GREATER -1)
      list(GET pair 1 cost)
    endif()
  endforeach()
  string(JOIN ";" labels_text ${labels})
  bracket(labels_arg "${labels_text}")
  # OPENBLAS_NUM_THREADS=1: CTest runs one test per core already, and LibTorch's small GEMMs
  # (the agents' tests) on OpenBLAS's own threads spent about half their CPU time in
  # sched_yield spinning beside the other job.
  string(APPEND script
    "add_test(${test} ${exe} ${arg} --case-sensitive=true)\n"
    "set_tests_properties(${test} PROPERTIES WORKING_DIRECTORY ${wd} "
    "SKIP_RETURN_CODE 77 COST ${cost} LABELS ${labels_arg} "
    "ENVIRONMENT OPENBLAS_NUM_THREADS=1)\n")
  math(EXPR count "${count} + 1")
endforeach()
if(NOT output MATCHES "<OverallResultsTestCases unskipped=\"([0-9]+)\"")
  message(FATAL_ERROR "${TEST_TARGET}: no test case count in:\n${output}")
endif()
if(count EQUAL 0 OR NOT count EQUAL CMAKE_MATCH_1)
  message(FATAL_ERROR "${TEST_TARGET}: read ${count} test cases of ${CMAKE_MATCH_1} from:\n${output}")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
