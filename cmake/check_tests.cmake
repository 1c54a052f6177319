# Test files and their tags, checked on every build (target ufp4_test_tags): each TEST_CASE in
# tests/test_<group>[_<part>].cpp names its tags on its own line and carries [<group>], the group CTest
# runs it in (entry <group>, or unit); so a test's file says where it runs, and a tag where to find it.
#   cmake -DSRC=<repository> -P cmake/check_tests.cmake
file(GLOB files RELATIVE ${SRC} ${SRC}/tests/test_*.cpp)
set(problems "")
foreach(f ${files})
  string(REGEX REPLACE "^tests/test_([a-z0-9]+).*\\.cpp$" "\\1" group "${f}")
  file(STRINGS ${SRC}/${f} cases REGEX "^TEST_CASE\\(")
  foreach(line ${cases})
    if(NOT line MATCHES "\", *\"(\\[[^\"]*)\"\\)")
      string(APPEND problems "${f}: a TEST_CASE without its tags on its line: ${line}\n")
      continue()
    endif()
    set(tags "${CMAKE_MATCH_1}")
    if(NOT tags MATCHES "\\[${group}\\]")
      string(APPEND problems "${f}: tags ${tags} lack [${group}]: ${line}\n")
    endif()
  endforeach()
endforeach()
if(NOT problems STREQUAL "")
  message(FATAL_ERROR "ufp4: test tags do not match their files (cmake/check_tests.cmake):\n${problems}")
endif()
