# CTest fixture `ci-train` (FIXTURES_SETUP ci_runs): trains the CI-scale runs once per test run, for the
# entries that read them (regression, campaign, analysis): experiments/ci/*.toml (three recipes x seeds
# 1-3) into build/ci/runs and the analysis capture (experiments/analysis/ci.toml) into build/ci/analysis.
# Runs from the source tree so the manifests' relative paths hold.
file(GLOB manifests ${SRC}/experiments/ci/*.toml)
file(REMOVE_RECURSE ${SRC}/build/ci/runs ${SRC}/build/ci/analysis)
execute_process(COMMAND ${UFP4} -q run --force ${manifests} ${SRC}/experiments/analysis/ci.toml WORKING_DIRECTORY ${SRC} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ci-train: training the CI runs failed (exit ${rc})")
endif()
