# Build-time: writes version_info.h with the git commit (and +dirty), rewriting it only on change.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  # A copy without .git (e.g. shipped to a GPU node): the caller may say which commit it is.
  if(DEFINED ENV{UFP4_GIT_COMMIT})
    set(commit "$ENV{UFP4_GIT_COMMIT}")
  else()
    set(commit "unknown")
  endif()
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(commit "${commit}+dirty")
  endif()
endif()
set(content "#pragma once\n#define UFP4_VERSION_STRING \"${VERSION}\"\n#define UFP4_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUT} "${content}")
endif()
