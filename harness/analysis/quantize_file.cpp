#include "harness/analysis/quantize_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <vector>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/analysis/analysis.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"

namespace ufp4 {

namespace {

bool is_h5(const std::string& p) { return ends_with(p, ".h5") || ends_with(p, ".hdf5"); }

std::vector<int64_t> shape_of(const torch::Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); }

// "synthetic:KIND:ROWSxCOLS[:SEED]" with KIND gaussian, laplace, student3 or outliers (Gaussian with
// 1% of entries scaled by 30, like the outlier-heavy linear_fc2 inputs of the paper).
ArrayF32 synthetic_input(const std::string& spec) {
  std::vector<std::string> f;
  std::stringstream ss(spec);
  std::string tok;
  while (std::getline(ss, tok, ':')) f.push_back(tok);
  const std::string allowed = "(allowed: synthetic:gaussian|laplace|student3|outliers:ROWSxCOLS[:SEED])";
  if (f.size() < 3 || f[2].find('x') == std::string::npos) throw Error("--in: '" + spec + "' " + allowed);
  int64_t rows = 0, cols = 0;
  try {
    rows = std::stoll(f[2].substr(0, f[2].find('x')));
    cols = std::stoll(f[2].substr(f[2].find('x') + 1));
  } catch (const std::exception&) {
    throw Error("--in: bad shape '" + f[2] + "' " + allowed);
  }
  if (rows <= 0 || cols <= 0) throw Error("--in: bad shape '" + f[2] + "' " + allowed);
  torch::manual_seed(f.size() > 3 ? std::stoull(f[3]) : 0);
  torch::Tensor x;
  if (f[1] == "gaussian") x = torch::randn({rows, cols});
  else if (f[1] == "laplace") x = -torch::sign(torch::rand({rows, cols}) - 0.5) * torch::log1p(-2 * (torch::rand({rows, cols}) - 0.5).abs());
  else if (f[1] == "student3") x = torch::randn({rows, cols}) / torch::sqrt((torch::randn({rows, cols, 3}).pow(2)).sum(2) / 3);
  else if (f[1] == "outliers") x = torch::randn({rows, cols}) * torch::where(torch::rand({rows, cols}) < 0.01, torch::full({1}, 30.0f), torch::ones({1}));
  else throw Error("--in: unknown synthetic kind '" + f[1] + "' " + allowed);
  ArrayF32 a;
  a.shape = {rows, cols};
  x = x.contiguous();
  a.data.assign(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  return a;
}

ArrayF32 read_input(const QuantizeFileOptions& opt) {
  const std::string& in = opt.in;
  ArrayF32 a;
  if (in.rfind("synthetic:", 0) == 0) a = synthetic_input(in);
  else if (is_h5(in)) a = read_h5_f32(in, opt.dataset);
  else if (ends_with(in, ".npy")) a = read_npy(in);
  else throw Error("--in: '" + in + "' must end in .npy, .h5 or .hdf5, or be synthetic:KIND:ROWSxCOLS");
  if (a.shape.empty() || a.numel() == 0) throw Error("--in: " + in + " holds an empty or scalar array");
  return a;
}

void refuse_nonfinite(const ArrayF32& a, const std::string& in) {
  size_t nan = 0, inf = 0, first = a.data.size();
  for (size_t i = 0; i < a.data.size(); ++i)
    if (!std::isfinite(a.data[i])) {
      (std::isnan(a.data[i]) ? nan : inf) += 1;
      first = std::min(first, i);
    }
  if (nan + inf > 0)
    throw Error("--in: " + in + " holds " + std::to_string(nan) + " NaN and " + std::to_string(inf) + " infinite values (the first at index " +
                std::to_string(first) + "; allowed: finite values, or --allow-nonfinite to quantize them as kernels/quantize/quantize.h specifies)");
}

// One line of fidelity statistics against the (rotated) input: SQNR and NMSE (Eq. 7), alpha (Eq. 3)
// and the effective bucket ratio (Eq. 6, K = 8 magnitude buckets including zero).
std::string stats_line(const torch::Tensor& target, const QuantizedTensor& q, const QuantSpec& spec) {
  torch::Tensor t = target.to(torch::kFloat64).cpu(), d = q.dequant.to(torch::kFloat64).cpu();
  const double energy = t.pow(2).sum().item<double>();
  const double nmse = (d - t).pow(2).sum().item<double>() / energy;
  const double alpha = (d * t).sum().item<double>() / energy;
  char buf[256];
  std::string beff = "n/a";
  if (spec.grid.symmetric()) {
    torch::Tensor c = q.codes.cpu();
    torch::Tensor mags = torch::cat({c.bitwise_and(7), c.bitwise_right_shift(4).bitwise_and(7)}).flatten().to(torch::kInt64);
    const int64_t L = q.dequant.size(1);
    if (L % 2) mags = torch::cat({c.bitwise_and(7).flatten(), c.bitwise_right_shift(4).bitwise_and(7).slice(1, 0, L / 2).flatten()}).to(torch::kInt64);
    torch::Tensor p = torch::bincount(mags, {}, 8).to(torch::kFloat64) / static_cast<double>(mags.numel());
    const double h = -(p * torch::log(p + 1e-12)).sum().item<double>();
    std::snprintf(buf, sizeof buf, "%.3f", std::exp(h) / 8);
    beff = buf;
  }
  std::snprintf(buf, sizeof buf, "SQNR %.2f dB | NMSE %.3e | alpha %.5f | B_eff %s", -10 * std::log10(nmse), nmse, alpha, beff.c_str());
  return buf;
}

// The per-bin table of decompose_bias, and whether its contributions sum to the measured totals.
void print_bins(const BiasDecomposition& d) {
  std::printf("%-10s %10s %13s %11s %15s %19s\n", "level", "share", "mean error", "Eq. 2", "part of b_G", "part of alpha - 1");
  for (const auto& b : d.bins) {
    char level[32];
    std::snprintf(level, sizeof level, b.block_max ? "block max" : "%g", b.level);
    std::printf("%-10s %10.5f %13.5f %11s %15.6f %19.6f\n", level, b.share, b.mean_error, std::isnan(b.eq2) ? "-" : b.block_max ? "0 (exact)" : std::to_string(b.eq2).substr(0, 7).c_str(),
                b.bias_contribution, b.alpha_contribution);
  }
  std::printf("b_G %.6f (the parts sum to %.6f); alpha %.6f, alpha - 1 %+.6f (the parts sum to %+.6f); %lld elements, grid %s\n", d.bias, d.bias_sum,
              d.alpha, d.alpha - 1, d.alpha_sum, static_cast<long long>(d.elements), d.grid.c_str());
}

void write_h5(const QuantizeFileOptions& opt, const ArrayF32& y, const QuantizedTensor& q) {
  const QuantSpec& spec = opt.spec;
  H5Writer w(opt.out);
  w.write_f32("dequant", y.data.data(), y.shape);
  if (q.codes.defined()) {
    torch::Tensor codes = q.codes.cpu(), scales = q.scales.cpu(), amax = q.amax.cpu(), bits = q.scale_bits.cpu();
    w.write_u8("codes", codes.data_ptr<uint8_t>(), shape_of(codes));
    w.write_f32("scales", scales.data_ptr<float>(), shape_of(scales));
    w.write_f32("amax", amax.data_ptr<float>(), shape_of(amax));
    w.write_u8("scale_bits", bits.data_ptr<uint8_t>(), shape_of(bits));
  }
  torch::Tensor ta = q.tensor_amax.cpu();
  w.write_f32("tensor_amax", ta.data_ptr<float>(), {1});
  w.attr("grid", spec.grid.name());
  w.attr("grid_levels", spec.grid.describe());
  w.attr("block", static_cast<int64_t>(spec.block));
  w.attr("block_2d", static_cast<int64_t>(spec.block_2d));
  w.attr("scale", to_string(spec.scale));
  w.attr("rounding", to_string(spec.rounding));
  w.attr("seed", static_cast<int64_t>(spec.seed));
  w.attr("offset", static_cast<int64_t>(spec.offset));
  w.attr("rht", static_cast<int64_t>(spec.rht));
  w.attr("rht_seed", static_cast<int64_t>(spec.rht_seed));
  w.attr("layout", std::string(opt.quantize.columnwise ? "columnwise (codes/scales are [cols, rows])" : "rowwise"));
  w.attr("input", opt.in);
  write_provenance(w);
  w.commit();
}

// The dequantized values in the input's shape, as .npy or with everything in HDF5.
void write_output(const QuantizeFileOptions& opt, const ArrayF32& a, const QuantizedTensor& q) {
  const bool columnwise = opt.quantize.columnwise;
  torch::Tensor deq = (columnwise ? q.dequant.t() : q.dequant).to(torch::kFloat32).cpu().contiguous();

  ArrayF32 y;
  y.shape = a.shape;
  y.data.assign(deq.data_ptr<float>(), deq.data_ptr<float>() + deq.numel());
  if (ends_with(opt.out, ".npy")) write_npy(opt.out, y);
  else write_h5(opt, y, q);
}

}  // namespace

void quantize_file(const QuantizeFileOptions& opt) {
  const std::string &in = opt.in, &out = opt.out;
  const QuantSpec& spec = opt.spec;
  const bool columnwise = opt.quantize.columnwise;
  const torch::Device& dev = opt.device;
  if (out != "-" && !ends_with(out, ".npy") && !is_h5(out)) throw Error("--out: '" + out + "' must end in .npy, .h5 or .hdf5 (or be - for none)");

  ArrayF32 a = read_input(opt);
  if (!opt.allow_nonfinite) refuse_nonfinite(a, in);
  const int64_t cols = a.shape.back(), rows = a.numel() / cols;
  torch::Tensor x = torch::from_blob(a.data.data(), {rows, cols}, torch::kFloat32).to(dev).to(opt.input_dtype);

  log_info("quantize " + in + " [" + std::to_string(rows) + "x" + std::to_string(cols) + "] " + spec.describe() +
           (columnwise ? " columnwise" : " rowwise") + " on " + (dev.is_cuda() ? "cuda" : "cpu"));
  QuantizedTensor q = quantize(x, spec, opt.quantize);
  if (opt.stats) {
    torch::Tensor target = spec.rht ? ufp4::rht(x, spec, columnwise) : (columnwise ? x.t() : x);
    std::cout << spec.describe() << (columnwise ? " col" : " row") << " | " << stats_line(target, q, spec) << std::endl;
  }
  if (opt.bins) {
    if (columnwise) throw Error("--bins: measures rowwise blocks (allowed: without --columnwise)");
    print_bins(decompose_bias(x, spec));
  }
  if (out == "-") return;
  write_output(opt, a, q);
  log_info("wrote " + out);
}

}  // namespace ufp4
