// Catch2 v2 / v3 compatibility: include this instead of the Catch2 headers.
#pragma once
#if defined(UFP4_CATCH3)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif

#include "tests/helpers.h"
// [cuda] tests start with this: without a GPU they skip (Catch2 v3); under v2 the runner has filtered
// them out already (tests/main.cpp), so this guards only a test run some other way.
#if defined(UFP4_CATCH3)
#define UFP4_NEED_GPU() \
  do { if (!::ufp4::test::gpu_available()) SKIP("no CUDA device"); } while (0)
#else
#define UFP4_NEED_GPU() \
  do { if (!::ufp4::test::gpu_available()) { WARN("no CUDA device: skipped"); return; } } while (0)
#endif
