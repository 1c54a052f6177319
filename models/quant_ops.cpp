#include "models/quant_ops.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "kernels/numerics/float_bits.h"
#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_pair.h"
#include "kernels/moe/padded_segments.h"
#include "kernels/moe/quantize_segments.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include "kernels/quantize/quantize_cuda.h"
#endif

namespace ufp4 {

namespace {

void check_input(const torch::Tensor& x) {
  if (!x.defined()) throw Error("quantize: undefined tensor");
  if (x.dim() != 2) throw Error("quantize: expected a 2-D tensor, got " + std::to_string(x.dim()) + "-D");
  dtype_of(x, "quantize input");
  check_kernel_device(x, "quantize");
}

// The references read no device memory: a spec whose SR offset lives there is the GPU's only.
void check_host_offset(const KernelSpec& ks) {
  if (ks.offset_add) throw Error("quantize: the stochastic-rounding offset is in device memory (a CUDA-graph step); CPU tensors cannot use it");
}

void run(const KernelSpec& ks, QuantizeIO& io, const torch::Tensor& like) {
  if (like.is_cuda()) {
#ifdef UFP4_WITH_CUDA
    cuda_quantize(ks, io, at::cuda::getCurrentCUDAStream(like.device().index()).stream());
#endif
  } else {
    check_host_offset(ks);
    cpu_quantize(ks, io);
  }
}

}  // namespace

DType dtype_of(const torch::Tensor& t, const char* what) {
  if (t.scalar_type() == torch::kFloat32) return DType::kF32;
  if (t.scalar_type() == torch::kBFloat16) return DType::kBF16;
  throw Error(std::string(what) + ": dtype " + std::string(c10::toString(t.scalar_type())) +
              " is not supported (allowed: float32, bfloat16)");
}

void check_kernel_device(const torch::Tensor& t, const char* what) {
  if (t.is_cuda()) {
#ifndef UFP4_WITH_CUDA
    throw Error(std::string(what) + ": CUDA tensor given but this build has no CUDA kernels");
#endif
  } else if (!t.device().is_cpu()) {
    throw Error(std::string(what) + ": tensors must be on CPU or CUDA");
  }
}

// "auto" (CUDA when this build and the machine have it), "cpu" or "cuda".
torch::Device pick_device(const std::string& d, const std::string& what) {
  bool have_cuda = false;
#ifdef UFP4_WITH_CUDA
  have_cuda = cuda_available();
#endif
  if (d == "cpu") return torch::kCPU;
  if (d == "cuda") {
    if (!have_cuda) throw Error(what + ": cuda requested but no CUDA device is available to this build (allowed: auto, cpu, cuda)");
    return torch::kCUDA;
  }
  if (d == "auto") return have_cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  throw Error(what + ": '" + d + "' is not allowed (allowed: auto, cpu, cuda)");
}

QuantizedTensor quantize(const torch::Tensor& x_in, const QuantSpec& spec, const QuantizeOptions& opt) {
  check_input(x_in);
  if (opt.out_dtype != torch::kFloat32 && opt.out_dtype != torch::kBFloat16)
    throw Error("quantize: output dtype must be float32 or bfloat16");
  torch::Tensor x = x_in.contiguous();
  if (opt.unfused && spec.rht) {
    // Unfused path: rotated tensor materialized in memory, then a plain quantization.
    torch::Tensor rotated = rht(x, spec, opt.columnwise, opt.unfused_dtype);
    QuantSpec plain = spec;
    plain.rht = 0;
    QuantizeOptions o2 = opt;
    o2.unfused = false;
    o2.columnwise = false;
    return quantize(rotated, plain, o2);
  }
  const KernelSpec ks = make_kernel_spec(spec);
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t R = opt.columnwise ? cols : rows, L = opt.columnwise ? rows : cols;
  const int64_t nblk = (L + spec.block - 1) / spec.block;
  auto f32 = x.options().dtype(torch::kFloat32);
  QuantizedTensor q;
  q.dequant = torch::empty({R, L}, x.options().dtype(opt.out_dtype));
  // The tensor amax costs a pass over the input: only nvfp4 scaling needs it (and callers that ask for codes see it).
  const bool want_tensor_amax = spec.scale == ScaleKind::kNvfp4 || opt.want_codes;
  if (want_tensor_amax) q.tensor_amax = torch::empty({1}, f32);
  if (opt.want_codes) {
    q.codes = torch::empty({R, (L + 1) / 2}, x.options().dtype(torch::kUInt8));
    q.scales = torch::empty({R, nblk}, f32);
    q.amax = torch::empty({R, nblk}, f32);
    q.scale_bits = torch::empty({R, nblk}, x.options().dtype(torch::kUInt8));
  }
  const int64_t ws_floats = quantize_workspace_floats(ks, rows, cols);
  torch::Tensor ws = ws_floats ? torch::empty({ws_floats}, f32) : torch::Tensor();

  QuantizeIO io;
  io.in = x.data_ptr();
  io.in_dtype = dtype_of(x, "quantize input");
  io.rows = rows;
  io.cols = cols;
  io.columnwise = opt.columnwise;
  io.dequant = q.dequant.data_ptr();
  io.out_dtype = opt.out_dtype == torch::kBFloat16 ? DType::kBF16 : DType::kF32;
  if (opt.want_codes) {
    io.codes = q.codes.data_ptr<uint8_t>();
    io.scales = q.scales.data_ptr<float>();
    io.amax = q.amax.data_ptr<float>();
    io.scale_bits = q.scale_bits.data_ptr<uint8_t>();
  }
  if (want_tensor_amax) io.tensor_amax = q.tensor_amax.data_ptr<float>();
  if (ws_floats) io.workspace = ws.data_ptr<float>();
  run(ks, io, x);
  return q;
}

namespace {

PairIO pair_io(const torch::Tensor& x) {
  PairIO io;
  io.in = x.data_ptr();
  io.in_dtype = dtype_of(x, "quantize input");
  io.rows = x.size(0);
  io.cols = x.size(1);
  return io;
}

}  // namespace

bool quantize_pair_fused(const torch::Tensor& x, const QuantSpec& row, const QuantSpec& col) {
  if (!x.is_cuda() || x.dim() != 2 || !x.is_contiguous()) return false;
  if (x.scalar_type() != torch::kFloat32 && x.scalar_type() != torch::kBFloat16) return false;
  PairIO io = pair_io(x);
  io.row_out = io.col_out = const_cast<void*>(io.in);  // alignment only: the allocator's buffers are 256-byte aligned
  return pair_path_applies(make_kernel_spec(row), make_kernel_spec(col), io);
}

std::pair<torch::Tensor, torch::Tensor> quantize_pair(const torch::Tensor& x_in, const QuantSpec& row, const QuantSpec& col) {
  check_input(x_in);
  torch::Tensor x = x_in.contiguous();
  if (!quantize_pair_fused(x, row, col)) {
    QuantizeOptions o;
    o.out_dtype = torch::kBFloat16;
    o.want_codes = false;
    torch::Tensor r = quantize(x, row, o).dequant;
    o.columnwise = true;
    return {r, quantize(x, col, o).dequant};
  }
  torch::Tensor r = torch::empty({x.size(0), x.size(1)}, x.options().dtype(torch::kBFloat16));
  torch::Tensor c = torch::empty({x.size(1), x.size(0)}, x.options().dtype(torch::kBFloat16));
#ifdef UFP4_WITH_CUDA
  PairIO io = pair_io(x);
  io.row_out = r.data_ptr();
  io.col_out = c.data_ptr();
  cuda_quantize_pair(make_kernel_spec(row), make_kernel_spec(col), io, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
#endif
  return {r, c};
}

namespace {

// The batched kernel's task for w (its outputs unset): the matrices of [N, K] or [E, N, K].
PairTask pair_task(const torch::Tensor& w) {
  PairTask t;
  t.in = w.data_ptr();
  t.rows = static_cast<int32_t>(w.size(-2));
  t.cols = static_cast<int32_t>(w.size(-1));
  t.batch = w.dim() == 3 ? static_cast<int32_t>(w.size(0)) : 1;
  return t;
}

}  // namespace

bool quantize_pair_batch_fused(const torch::Tensor& w, const QuantSpec& row, const QuantSpec& col) {
  if (!w.defined() || !w.is_cuda() || w.scalar_type() != torch::kFloat32 || !w.is_contiguous() || (w.dim() != 2 && w.dim() != 3)) return false;
  if (w.size(-2) > INT32_MAX || w.size(-1) > INT32_MAX || (w.dim() == 3 && (w.size(0) < 1 || w.size(0) > INT32_MAX))) return false;
  PairTask t = pair_task(w);
  t.row_out = t.col_out = const_cast<void*>(t.in);  // alignment only: the allocator's buffers are 256-byte aligned
  return pair_batch_applies(make_kernel_spec(row), make_kernel_spec(col), t);
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> quantize_pair_batch(const std::vector<torch::Tensor>& weights, const QuantSpec& row,
                                                                         const QuantSpec& col) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  std::vector<PairTask> tasks;
  for (const torch::Tensor& w : weights) {
    if (!quantize_pair_batch_fused(w, row, col)) throw Error("quantize pair batch: the batched kernel does not cover a weight of " + std::to_string(w.numel()) + " elements");
    std::vector<int64_t> col_shape = w.sizes().vec();
    std::swap(col_shape[col_shape.size() - 1], col_shape[col_shape.size() - 2]);
    torch::Tensor r = torch::empty(w.sizes(), w.options().dtype(torch::kBFloat16));
    torch::Tensor c = torch::empty(col_shape, w.options().dtype(torch::kBFloat16));
    PairTask t = pair_task(w);
    t.row_out = r.data_ptr();
    t.col_out = c.data_ptr();
    tasks.push_back(t);
    out.emplace_back(r, c);
  }
#ifdef UFP4_WITH_CUDA
  if (!tasks.empty())
    cuda_quantize_pair_batch(make_kernel_spec(row), make_kernel_spec(col), tasks.data(), static_cast<int>(tasks.size()),
                             at::cuda::getCurrentCUDAStream(weights.front().device().index()).stream());
#endif
  return out;
}

torch::Tensor segment_key_table(const SegmentKeys& keys, torch::Device device) {
  const int64_t G = static_cast<int64_t>(keys.seeds.size());
  if (static_cast<int64_t>(keys.rht_seeds.size()) != G) throw Error("quantize segments: as many SR as RHT seeds are needed");
  torch::Tensor table = torch::empty({3 * G}, torch::kInt64);
  int64_t* tp = table.data_ptr<int64_t>();
  for (int64_t g = 0; g < G; ++g) {
    tp[g] = static_cast<int64_t>(keys.seeds[g]);
    uint32_t signs[4];
    rht_sign_bits(keys.rht_seeds[g], signs);
    std::memcpy(tp + G + 2 * g, signs, sizeof(signs));
  }
  if (device.is_cuda()) table = table.pin_memory().to(device, /*non_blocking=*/true);
  return table;
}

torch::Tensor quantize_segments(const torch::Tensor& x, const QuantSpec& spec, const SegmentKeys& keys, const torch::Tensor& ends,
                                const torch::Tensor& lens, bool columnwise, torch::ScalarType out_dtype, const torch::Tensor& src) {
  return quantize_segments(x, spec, segment_key_table(keys, x.device()), ends, lens, columnwise, out_dtype, src);
}

torch::Tensor gather_rows(const torch::Tensor& t, const torch::Tensor& src) {
  // No rows to read (an expert-parallel rank routed none): every row of the layout is padding.
  if (t.size(0) == 0) return torch::zeros({src.size(0), t.size(1)}, t.options());
  return t.index_select(0, src.clamp_min(0)).masked_fill_((src < 0).unsqueeze(1), 0);
}

namespace {

// The segmented io of x for one operand (device pointers; keys from a segment_key_table).
SegmentedQuantizeIO segments_io(const torch::Tensor& x, bool columnwise, const torch::Tensor& out, const torch::Tensor& keys,
                                const torch::Tensor& ends, const torch::Tensor& lens) {
  SegmentedQuantizeIO io;
  io.in = x.data_ptr();
  io.in_dtype = dtype_of(x, "quantize input");
  io.rows = out.size(0);
  io.cols = x.size(1);
  io.columnwise = columnwise;
  io.dequant = out.data_ptr();
  io.out_dtype = dtype_of(out, "quantize output");
  io.segments = ends.numel();
  io.ends = ends.data_ptr<int32_t>();
  io.lens = lens.defined() ? lens.data_ptr<int32_t>() : nullptr;
  io.seeds = reinterpret_cast<const uint64_t*>(keys.data_ptr<int64_t>());
  io.rht_signs = reinterpret_cast<const uint32_t*>(keys.data_ptr<int64_t>() + ends.numel());
  return io;
}

}  // namespace

torch::Tensor quantize_segments(const torch::Tensor& x_in, const QuantSpec& spec, const torch::Tensor& key_table, const torch::Tensor& ends,
                                const torch::Tensor& lens, bool columnwise, torch::ScalarType out_dtype, const torch::Tensor& src) {
  check_input(x_in);
  if (out_dtype != torch::kFloat32 && out_dtype != torch::kBFloat16) throw Error("quantize segments: output dtype must be float32 or bfloat16");
  const int64_t G = ends.numel();
  if (key_table.scalar_type() != torch::kInt64 || key_table.numel() != 3 * G || key_table.device() != x_in.device())
    throw Error("quantize segments: the key table must hold the keys of " + std::to_string(G) + " segments on the input's device");
  auto check_index = [&](const torch::Tensor& t, const char* what) {
    if (t.scalar_type() != torch::kInt32 || t.dim() != 1 || t.numel() != G || t.device() != x_in.device() || !t.is_contiguous())
      throw Error(std::string("quantize segments: ") + what + " must be a contiguous int32 [segments] tensor on the input's device");
  };
  check_index(ends, "ends");
  if (lens.defined()) check_index(lens, "lens");
  if (src.defined() && (src.scalar_type() != torch::kInt64 || src.dim() != 1 || src.device() != x_in.device() || !src.is_contiguous()))
    throw Error("quantize segments: src must be a contiguous int64 [rows] tensor on the input's device");
  torch::Tensor x = x_in.contiguous();
  const KernelSpec ks = make_kernel_spec(spec);
  const int64_t rows = src.defined() ? src.size(0) : x.size(0);
  torch::Tensor out = torch::empty({rows, x.size(1)}, x.options().dtype(out_dtype));
  // No rows to read (a rank of expert parallelism whose experts were routed none): the layout's rows, if
  // any, are padding, which quantizes to zero.
  if (rows == 0 || x.size(0) == 0) return out.zero_();
  auto f32 = x.options().dtype(torch::kFloat32);
  torch::Tensor tensor_amax = spec.scale == ScaleKind::kNvfp4 ? torch::empty({G}, f32) : torch::Tensor();
  const int64_t ws_floats = quantize_workspace_floats(ks, rows, x.size(1));
  torch::Tensor ws = torch::empty({ws_floats}, f32);
  SegmentedQuantizeIO io = segments_io(x, columnwise, out, key_table, ends, lens);
  if (src.defined()) {
    io.src_rows = src.data_ptr<int64_t>();
    io.in_rows = x.size(0);
  }
  if (tensor_amax.defined()) io.tensor_amax = tensor_amax.data_ptr<float>();
  io.workspace = ws.data_ptr<float>();
  if (x.is_cuda()) {
#ifdef UFP4_WITH_CUDA
    if (src.defined() && !segments_take_src(ks, io)) {  // this kernel reads the layout only: gather it
      x = gather_rows(x, src);
      io.in = x.data_ptr();
      io.src_rows = nullptr;
    }
    cuda_quantize_segments(ks, io, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
#endif
  } else {
    check_host_offset(ks);
    reference_quantize_segments(ks, io);
  }
  return out;
}


bool quantize_segments_pair_fused(const torch::Tensor& x, const QuantSpec& row, const QuantSpec& col, int64_t segments) {
  if (!x.is_cuda() || x.dim() != 2 || !x.is_contiguous() || x.scalar_type() != torch::kBFloat16 || segments <= 0) return false;
  SegmentedPairIO p;
  for (SegmentedQuantizeIO* io : {&p.row, &p.col}) {
    io->in = io->dequant = x.data_ptr();  // alignment only: the allocator's buffers are 256-byte aligned
    io->in_dtype = io->out_dtype = DType::kBF16;
    io->rows = io->in_rows = x.size(0);
    io->cols = x.size(1);
    io->segments = segments;
  }
  p.row.in_rows = 0;
  p.col.columnwise = true;
  static const int64_t any_row = 0;
  p.col.src_rows = &any_row;  // the layout is gathered
  return segments_pair_applies(make_kernel_spec(row), make_kernel_spec(col), p);
}

torch::Tensor padded_read_rows(const torch::Tensor& src, const torch::Tensor& gather) {
  if (src.scalar_type() != torch::kInt64 || gather.scalar_type() != torch::kInt64 || src.dim() != 1 || gather.dim() != 1 || src.device() != gather.device())
    throw Error("padded read rows: src and gather must be int64 [rows] tensors on one device");
#ifdef UFP4_WITH_CUDA
  if (src.is_cuda()) {
    const torch::Tensor s = src.contiguous(), g = gather.contiguous();
    torch::Tensor read = torch::empty_like(s);
    PaddedReadRowsIO io;
    io.rows = s.size(0), io.gathered = g.size(0), io.src = s.data_ptr<int64_t>(), io.gather = g.data_ptr<int64_t>(), io.read = read.data_ptr<int64_t>();
    cuda_padded_read_rows(io, at::cuda::getCurrentCUDAStream(s.device().index()).stream());
    return read;
  }
#endif
  return torch::cat({torch::full({1}, -1, gather.options()), gather}).index_select(0, src + 1);
}

std::pair<torch::Tensor, torch::Tensor> quantize_segments_pair(const torch::Tensor& x_in, const QuantSpec& row, const torch::Tensor& row_keys,
                                                               const torch::Tensor& row_ends, const QuantSpec& col, const torch::Tensor& col_keys,
                                                               const torch::Tensor& col_ends, const torch::Tensor& col_lens, const torch::Tensor& src,
                                                               const torch::Tensor& gather) {
  check_input(x_in);
  torch::Tensor x = x_in.contiguous();
  if (gather.defined() && (gather.scalar_type() != torch::kInt64 || gather.dim() != 1 || gather.device() != x.device() || !gather.is_contiguous()))
    throw Error("quantize segments pair: gather must be a contiguous int64 [rows] tensor on the input's device");
  const int64_t rows = gather.defined() ? gather.size(0) : x.size(0);
  if (rows == 0 || !src.defined() || src.numel() < rows || row_ends.numel() != col_ends.numel() || !quantize_segments_pair_fused(x, row, col, row_ends.numel())) {
    if (gather.defined()) x = x.index_select(0, gather);
    return {quantize_segments(x, row, row_keys, row_ends, torch::Tensor(), false, torch::kBFloat16),
            quantize_segments(x, col, col_keys, col_ends, col_lens, true, torch::kBFloat16, src)};
  }
  const int64_t G = row_ends.numel();
  for (const torch::Tensor* t : {&row_ends, &col_ends, &col_lens})
    if (t->defined() && (t->scalar_type() != torch::kInt32 || t->numel() != G || t->device() != x.device() || !t->is_contiguous()))
      throw Error("quantize segments pair: ends and lens must be contiguous int32 [segments] tensors on the input's device");
  for (const torch::Tensor* t : {&row_keys, &col_keys})
    if (t->scalar_type() != torch::kInt64 || t->numel() != 3 * G || t->device() != x.device())
      throw Error("quantize segments pair: the key tables must hold the keys of " + std::to_string(G) + " segments on the input's device");
  if (src.scalar_type() != torch::kInt64 || src.dim() != 1 || src.device() != x.device() || !src.is_contiguous())
    throw Error("quantize segments pair: src must be a contiguous int64 [rows] tensor on the input's device");
  torch::Tensor r = torch::empty({rows, x.size(1)}, x.options());
  torch::Tensor c = torch::empty({src.size(0), x.size(1)}, x.options());
  // A gathered input: each layout row's input row, gather[src] (-1 kept).
  const torch::Tensor read = gather.defined() ? padded_read_rows(src, gather) : torch::Tensor();
#ifdef UFP4_WITH_CUDA
  SegmentedPairIO p;
  p.row = segments_io(x, false, r, row_keys, row_ends, torch::Tensor());
  p.col = segments_io(x, true, c, col_keys, col_ends, col_lens);
  p.col.src_rows = src.data_ptr<int64_t>();
  p.col.in_rows = x.size(0);
  if (read.defined()) p.col.read_rows = read.data_ptr<int64_t>();
  cuda_quantize_segments_pair(make_kernel_spec(row), make_kernel_spec(col), p, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
#endif
  return {r, c};
}

torch::Tensor rht(const torch::Tensor& x_in, const QuantSpec& spec, bool columnwise, torch::ScalarType out_dtype, bool inverse) {
  check_input(x_in);
  QuantSpec s = spec;
  if (!s.rht) throw Error("rht: size must be 16, 32, 64 or 128");
  const KernelSpec ks = make_kernel_spec(s);
  torch::Tensor x = x_in.contiguous();
  if (x.is_cuda()) {
#ifdef UFP4_WITH_CUDA
    if (!inverse) {
      const int64_t rows = x.size(0), cols = x.size(1);
      torch::Tensor out = torch::empty(columnwise ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols},
                                       x.options().dtype(out_dtype));
      cuda_rht(ks, x.data_ptr(), dtype_of(x, "rht input"), out.data_ptr(), dtype_of(out, "rht output"), rows, cols, columnwise,
               at::cuda::getCurrentCUDAStream(x.device().index()).stream());
      return out;
    }
#endif
    return rht(x.cpu(), spec, columnwise, out_dtype, inverse).to(x.device());
  }
  torch::Tensor t = (columnwise ? x.t() : x).to(torch::kFloat32).contiguous().clone();
  if (t.size(1) % s.rht != 0)
    throw Error("rht: size " + std::to_string(s.rht) + " must divide the transformed dimension (" + std::to_string(t.size(1)) + ")");
  reference_rht_rows(t.data_ptr<float>(), t.size(0), t.size(1), ks, inverse);
  if (out_dtype == torch::kBFloat16) {
    // Same RNE conversion as the kernels (torch's own is RNE too, but NaN payloads may differ).
    torch::Tensor o = torch::empty_like(t, t.options().dtype(torch::kBFloat16));
    const float* src = t.data_ptr<float>();
    auto* dst = reinterpret_cast<uint16_t*>(o.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = f32_to_bf16_bits(src[i]);
    return o;
  }
  return t;
}

torch::Tensor decode_packed(const torch::Tensor& codes_in, const torch::Tensor& scales_in, const QuantSpec& spec, int64_t cols) {
  torch::Tensor codes = codes_in.cpu().contiguous(), scales = scales_in.cpu().to(torch::kFloat32).contiguous();
  const int64_t R = codes.size(0), nblk = scales.size(1);
  if (codes.size(1) != (cols + 1) / 2 || nblk != (cols + spec.block - 1) / spec.block)
    throw Error("decode: codes/scales shapes do not match " + std::to_string(cols) + " columns and block " + std::to_string(spec.block));
  torch::Tensor out = torch::empty({R, cols}, torch::kFloat32);
  const uint8_t* c = codes.data_ptr<uint8_t>();
  const float* s = scales.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      uint8_t byte = c[r * codes.size(1) + j / 2];
      uint8_t code = (j & 1) ? (byte >> 4) : (byte & 0xf);
      float sc = s[r * nblk + j / spec.block];
      float v = spec.grid.decode(code);
      o[r * cols + j] = v * sc;
    }
  return out;
}

}  // namespace ufp4
