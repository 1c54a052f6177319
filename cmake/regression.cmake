# CTest entry `regression`: checks the CI runs that the fixture `ci-train` trained (cmake/ci_train.cmake)
# against results/reference/ci/ with `ufp4 check`.
execute_process(COMMAND ${UFP4} check ${SRC}/build/ci/runs --reference ${SRC}/results/reference/ci WORKING_DIRECTORY ${SRC} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "regression: loss curves moved (see the FAIL lines above); if intended, regenerate the references (results/reference/ci/README.md)")
endif()
