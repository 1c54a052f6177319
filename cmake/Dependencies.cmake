# Finds every dependency; a missing one stops configure with one line naming the package.
function(ufp4_require found what debian_package)
  if(NOT ${found})
    message(FATAL_ERROR "ufp4: ${what} not found: install the Debian/Ubuntu package '${debian_package}' (or run `make setup`)")
  endif()
endfunction()

find_package(Torch QUIET)
ufp4_require(Torch_FOUND "LibTorch" "libtorch-dev (CPU) or point CMAKE_PREFIX_PATH at torch.utils.cmake_prefix_path")

find_package(HDF5 QUIET COMPONENTS C)
ufp4_require(HDF5_FOUND "HDF5 C library" "libhdf5-dev")

find_package(Boost 1.74 QUIET CONFIG COMPONENTS program_options)
ufp4_require(Boost_FOUND "Boost.Program_options" "libboost-program-options-dev (offline GPU nodes: make gpu-deps, then make gpu)")

find_path(UFP4_TOMLPP_INCLUDE NAMES toml++/toml.hpp toml++/toml.h)
ufp4_require(UFP4_TOMLPP_INCLUDE "toml++" "libtomlplusplus-dev")

find_package(Catch2 QUIET)
ufp4_require(Catch2_FOUND "Catch2" "catch2")

find_package(benchmark QUIET)
ufp4_require(benchmark_FOUND "Google Benchmark" "libbenchmark-dev")

find_package(Eigen3 QUIET NO_MODULE)
ufp4_require(Eigen3_FOUND "Eigen3" "libeigen3-dev")

find_path(UFP4_SENTENCEPIECE_INCLUDE sentencepiece_processor.h)
find_library(UFP4_SENTENCEPIECE_LIB sentencepiece)
find_library(UFP4_SENTENCEPIECE_TRAIN_LIB sentencepiece_train)
ufp4_require(UFP4_SENTENCEPIECE_LIB "SentencePiece" "libsentencepiece-dev")
ufp4_require(UFP4_SENTENCEPIECE_TRAIN_LIB "SentencePiece trainer" "libsentencepiece-dev")

# Optional: Ceres for fits (Eigen's Levenberg-Marquardt otherwise), gnuplot for report plots.
find_package(Ceres QUIET)
find_program(UFP4_GNUPLOT gnuplot)
if(NOT UFP4_GNUPLOT)
  message(STATUS "ufp4: gnuplot not found: reports will have no plots (install 'gnuplot-nox')")
endif()
