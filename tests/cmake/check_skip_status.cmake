# cmake -D EXE=<support_test> -P check_skip_status.cmake: the exit statuses the skip mechanism
# promises (tests/support/skip.h): a pass is 0, a skip 77, a failure before a skip 1, and a
# filter that matches no test case 1.
set(name "PERFDOJO_SKIP ends a test case as skipped\\, and a failure before it still fails")
foreach(want_mode IN ITEMS "0:" "77:skip" "1:fail-then-skip" "1:nomatch")
  string(REPLACE ":" ";" parts "${want_mode}")
  list(GET parts 0 want)
  list(LENGTH parts n)
  set(mode "")
  if(n GREATER 1)
    list(GET parts 1 mode)
  endif()
  set(filter "--test-case=${name}")
  if(mode STREQUAL "nomatch")
    set(filter "--test-case=no test case has this name")
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PERFDOJO_SELFTEST=${mode}" "${EXE}" "${filter}"
    RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT got EQUAL want)
    message(FATAL_ERROR "PERFDOJO_SELFTEST=${mode}: exit status ${got}, expected ${want}\n${out}")
  endif()
  message(STATUS "PERFDOJO_SELFTEST=${mode}: exit status ${got} as expected")
endforeach()
