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
