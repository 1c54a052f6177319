# CTest entry `regression`: retrains experiments/ci/*.toml (CPU, tiny) and checks them against
# results/reference/ci/ with `ufp4 check`. Runs from the source tree so the manifests' relative paths hold.
file(GLOB manifests ${SRC}/experiments/ci/*.toml)
file(REMOVE_RECURSE ${SRC}/build/ci/runs)
execute_process(COMMAND ${UFP4} -q run --force ${manifests} WORKING_DIRECTORY ${SRC} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "regression: training the CI runs failed (exit ${rc})")
endif()
execute_process(COMMAND ${UFP4} check ${SRC}/build/ci/runs --reference ${SRC}/results/reference/ci WORKING_DIRECTORY ${SRC} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "regression: loss curves moved (see the FAIL lines above); if intended, regenerate the references (results/reference/ci/README.md)")
endif()
