// The dev programs' shared harness: the CUDA error check (print the call's file, line and error, and exit 1),
// the median time of a launch, and the variants programs' main over shapes.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#define CHECK_CUDA(x)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

// The median over `reps` runs of launch() (after one untimed), in ms by CUDA events on the default stream.
template <typename F>
float median_ms(F&& launch, int reps) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> ms;
  launch();
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    launch();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The variants programs' main: the GPU's name, then run(rows, cols) on each shape of the command line (pairs
// "rows cols ...", else `shapes`), each returning its mismatches; exit 1 when any output differed.
template <typename Run>
int run_shapes(int argc, char** argv, std::vector<std::pair<int64_t, int64_t>> shapes, Run&& run) {
  if (argc > 2) {
    shapes.clear();
    for (int i = 1; i + 1 < argc; i += 2) shapes.emplace_back(std::atoll(argv[i]), std::atoll(argv[i + 1]));
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s\n", prop.name);
  int bad = 0;
  for (auto [rows, cols] : shapes) bad += run(rows, cols);
  std::printf("%s\n", bad ? "MISMATCHES" : "all bit-identical");
  return bad ? 1 : 0;
}
