// The deterministic attention backward (kernels/attention/attention_backward_cuda.cu): first against the CPU
// reference on small shapes (largest error against the largest gradient, beside what rounding the
// reference itself to BF16 costs) and over repeated runs (bit-identical), then timed with CUDA
// events at the proxies' attention shapes (forward output and log-sum-exp random but plausible).
//
//   cmake --build build --target dev && build/ufp4_dev_attention_backward

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dev/cuda/dev_harness.cuh"
#include "kernels/attention/attention_backward.h"
#include "kernels/numerics/float_bits.h"

using namespace ufp4;

namespace {

uint16_t to_bf16(float x) { return f32_to_bf16_bits(x); }
float from_bf16(uint16_t h) { return bf16_bits_to_f32(h); }

struct Dev {
  uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float* lse;
  void* ws;
};

// Dense [B, h, S, 64] strides; model_layout: [B, h, S, 64] views of [B, S, h, 64] memory, as the model's
// fused RoPE writes q, k and v.
AttnStrides dense(int64_t h, int64_t S, bool model_layout = false) {
  return model_layout ? AttnStrides{h * S * 64, 64, h * 64} : AttnStrides{h * S * 64, S * 64, 64};
}

AttentionBackwardIO make_io(int64_t B, int64_t H, int64_t KV, int64_t S, const Dev& d, bool model_layout = false) {
  AttentionBackwardIO io;
  io.batch = B, io.heads = H, io.kv_heads = KV, io.seq = S, io.scale = 0.125f;
  io.q = d.q, io.k = d.k, io.v = d.v, io.o = d.o, io.dout = d.dout, io.lse = d.lse, io.dq = d.dq, io.dk = d.dk, io.dv = d.dv;
  io.q_st = io.o_st = io.dout_st = io.dq_st = dense(H, S, model_layout);
  io.k_st = io.v_st = io.dk_st = io.dv_st = dense(KV, S, model_layout);
  return io;
}

Dev alloc(int64_t B, int64_t H, int64_t KV, int64_t S) {
  Dev d{};
  const size_t nq = B * H * S * 64, nk = B * KV * S * 64;
  for (uint16_t** p : {&d.q, &d.o, &d.dout, &d.dq}) CHECK_CUDA(cudaMalloc(p, nq * 2));
  for (uint16_t** p : {&d.k, &d.v, &d.dk, &d.dv}) CHECK_CUDA(cudaMalloc(p, nk * 2));
  CHECK_CUDA(cudaMalloc(&d.lse, B * H * S * 4));
  AttentionBackwardIO io = make_io(B, H, KV, S, d);
  CHECK_CUDA(cudaMalloc(&d.ws, attention_backward_workspace_bytes(io)));
  return d;
}

void release(Dev& d) {
  for (void* p : {static_cast<void*>(d.q), static_cast<void*>(d.k), static_cast<void*>(d.v), static_cast<void*>(d.o),
                  static_cast<void*>(d.dout), static_cast<void*>(d.dq), static_cast<void*>(d.dk), static_cast<void*>(d.dv),
                  static_cast<void*>(d.lse), d.ws})
    CHECK_CUDA(cudaFree(p));
}

std::vector<uint16_t> download(const uint16_t* p, size_t n) {
  std::vector<uint16_t> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

bool check(int64_t B, int64_t H, int64_t KV, int64_t S) {
  std::mt19937 rng(static_cast<uint32_t>(B * 1000003 + H * 1009 + KV * 101 + S));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t nq = B * H * S * 64, nk = B * KV * S * 64;
  auto draw = [&](size_t n, float sd) {
    std::vector<float> x(n);
    for (auto& e : x) e = from_bf16(to_bf16(sd * nd(rng)));
    return x;
  };
  std::vector<float> q = draw(nq, 1.5f), k = draw(nk, 1.5f), v = draw(nk, 1.0f), dout = draw(nq, 1.0f), o(nq), lse(B * H * S);
  reference_attention_forward(B, H, KV, S, 0.125f, q.data(), k.data(), v.data(), o.data(), lse.data());
  for (auto& e : o) e = from_bf16(to_bf16(e));  // the forward's BF16 output
  std::vector<float> rq(nq), rk(nk), rv(nk);
  reference_attention_backward(B, H, KV, S, 0.125f, q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(), rq.data(), rk.data(),
                               rv.data());
  Dev d = alloc(B, H, KV, S);
  auto up = [](uint16_t* dst, const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = to_bf16(x[i]);
    CHECK_CUDA(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  };
  up(d.q, q), up(d.k, k), up(d.v, v), up(d.o, o), up(d.dout, dout);
  CHECK_CUDA(cudaMemcpy(d.lse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
  AttentionBackwardIO io = make_io(B, H, KV, S, d);
  io.workspace = d.ws;
  if (!attention_backward_cuda_applies(io)) {
    std::printf("shape %lld %lld %lld %lld: not applicable\n", (long long)B, (long long)H, (long long)KV, (long long)S);
    return false;
  }
  cuda_attention_backward(io, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto gq = download(d.dq, nq), gk = download(d.dk, nk), gv = download(d.dv, nk);
  bool same = true;
  for (int rep = 0; rep < 5; ++rep) {
    cuda_attention_backward(io, nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    same = same && download(d.dq, nq) == gq && download(d.dk, nk) == gk && download(d.dv, nk) == gv;
  }
  bool ok = same;
  std::printf("shape B %lld H %lld KV %lld S %lld: reruns %s\n", (long long)B, (long long)H, (long long)KV, (long long)S,
              same ? "bit-identical" : "DIFFER");
  const char* names[3] = {"dq", "dk", "dv"};
  const std::vector<uint16_t>* got[3] = {&gq, &gk, &gv};
  const std::vector<float>* ref[3] = {&rq, &rk, &rv};
  for (int w = 0; w < 3; ++w) {
    double amax = 0, err = 0, rnd = 0;
    for (size_t i = 0; i < ref[w]->size(); ++i) {
      const double r = (*ref[w])[i];
      amax = std::max(amax, std::fabs(r));
      err = std::max(err, std::fabs(from_bf16((*got[w])[i]) - r));
      rnd = std::max(rnd, std::fabs(from_bf16(to_bf16(static_cast<float>(r))) - r));
      if (!std::isfinite(from_bf16((*got[w])[i]))) err = INFINITY;
    }
    const bool good = err <= 0.02 * amax;
    ok = ok && good;
    std::printf("  %s: max |ref| %.4g, max error %.4g (%.2e of max), BF16 rounding of the reference %.4g %s\n", names[w], amax, err, err / amax,
                rnd, good ? "" : "TOO LARGE");
  }
  release(d);
  return ok;
}

void timing(const char* name, int64_t B, int64_t H, int64_t KV, int64_t S, int mode = 0, bool model_layout = false) {
  Dev d = alloc(B, H, KV, S);
  const size_t nq = B * H * S * 64, nk = B * KV * S * 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](uint16_t* dst, size_t n) {
    std::vector<uint16_t> h(n);
    for (auto& e : h) e = to_bf16(nd(rng));
    CHECK_CUDA(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
  };
  fill(d.q, nq), fill(d.k, nk), fill(d.v, nk), fill(d.o, nq), fill(d.dout, nq);
  std::vector<float> lse(B * H * S);
  for (size_t r = 0; r < lse.size(); ++r) lse[r] = std::log(static_cast<float>(r % S + 1)) + 0.5f;
  CHECK_CUDA(cudaMemcpy(d.lse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
  AttentionBackwardIO io = make_io(B, H, KV, S, d, model_layout);
  io.workspace = d.ws;
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < 25; ++it) {
    CHECK_CUDA(cudaEventRecord(e0));
    cuda_attention_backward_mode(io, nullptr, mode);
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    if (it >= 5) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double flops = 5.0 * 2.0 * B * H * 64.0 * S * S / 2.0;
  std::printf("mode %d %-10s B %lld H %lld KV %lld S %lld%s: %.3f ms (%.0f TFLOP/s causal)\n", mode, name, (long long)B, (long long)H,
              (long long)KV, (long long)S, model_layout ? " (model layout)" : "", med, flops / (med * 1e-3) / 1e12);
  release(d);
}

}  // namespace

int main() {
  cudaDeviceProp p;
  CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  std::printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
  bool ok = true;
  ok = check(1, 1, 1, 64) && ok;
  ok = check(1, 2, 1, 128) && ok;
  ok = check(2, 6, 2, 256) && ok;
  ok = check(1, 4, 4, 512) && ok;
  ok = check(2, 3, 1, 384) && ok;
  timing("dense-20m", 16, 4, 2, 1024);
  timing("dense-35m", 16, 6, 2, 1024);
  timing("moe-81m", 16, 6, 2, 2048);
  timing("dense-113m", 16, 12, 4, 2048);
  for (int mode = 2; mode < 5; ++mode) timing("dense-113m", 16, 12, 4, 2048, mode);
  // On Hopper: the mma.sync kernel (mode 8 + probe) beside the warpgroup-MMA one.
  timing("moe-81m", 16, 6, 2, 2048, 8);
  for (int mode : {8, 11}) timing("dense-113m", 16, 12, 4, 2048, mode);
  // q, k, v, O and dO on [B, S, heads, 64] memory, as the model hands them over.
  for (int mode : {0, 3}) timing("dense-113m", 16, 12, 4, 2048, mode, true);
  timing("moe-81m", 16, 6, 2, 2048, 0, true);
  std::printf("%s\n", ok ? "all checks passed" : "CHECKS FAILED");
  return ok ? 0 : 1;
}
