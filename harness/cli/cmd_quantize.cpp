// `ufp4 quantize`: run the quantizer on a dataset from .npy or HDF5 and write the dequantized
// values (.npy, in the input's shape) or everything (.h5: dequantized values, codes, scales, amax);
// the work is harness/analysis/quantize_file.h's.
#include "common/error.h"
#include "harness/analysis/quantize_file.h"
#include "harness/cli/cli.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {

torch::ScalarType parse_dtype(const std::string& key, const std::string& v) {
  if (v == "f32" || v == "float32") return torch::kFloat32;
  if (v == "bf16" || v == "bfloat16") return torch::kBFloat16;
  throw Error(key + ": '" + v + "' is not allowed (allowed: f32, bf16)");
}

}  // namespace

int cmd_quantize(const std::vector<std::string>& args) {
  std::string grid, scale, rounding, device, in_dtype, out_dtype;
  double max_fpx = 0;
  int block = 16, rht = 0;
  uint64_t seed = 0, offset = 0, rht_seed = 0;
  QuantizeFileOptions opt;
  po::options_description d("options");
  d.add_options()
      ("in", po::value(&opt.in)->required(), "input: .npy (float16/32/64), .h5/.hdf5 (with --dataset) or synthetic:KIND:ROWSxCOLS[:SEED]")
      ("dataset", po::value(&opt.dataset)->default_value("x"), "HDF5 dataset to read")
      ("out", po::value(&opt.out)->required(), "output: .npy (dequantized values, input shape) or .h5 (also codes, scales, amax)")
      ("grid", po::value(&grid)->default_value("e2m1"), (Grid::builtin_list() + ", or magnitudes \"0,0.5,1,...\"").c_str())
      ("max-fpx", po::value(&max_fpx)->default_value(0), "cap of the e2m1 grid: 2, 3, 4 or 6 (0 = 6)")
      ("block", po::value(&block)->default_value(16), "block size: 16, 32, 64, 128")
      ("block-2d", po::bool_switch(), "16x16 tiles (weights) instead of 1xB blocks")
      ("scale", po::value(&scale)->default_value("fp32"), "fp32 (amax/gmax), nvfp4 (E4M3 + FP32 tensor scale), mx (E8M0), unit (1)")
      ("rounding", po::value(&rounding)->default_value("rtne"), "rtne or sr")
      ("seed", po::value(&seed)->default_value(0), "stochastic-rounding seed")
      ("offset", po::value(&offset)->default_value(0), "stochastic-rounding offset (e.g. the step)")
      ("rht", po::value(&rht)->default_value(0), "random Hadamard transform size: 0 (off), 16, 32, 64, 128")
      ("rht-seed", po::value(&rht_seed)->default_value(0), "seed of the RHT sign vector")
      ("columnwise", po::bool_switch(), "quantize along dim 0 (blocks down the columns)")
      ("unfused", po::bool_switch(), "RHT into a temporary tensor, then quantize (the unfused path)")
      ("device", po::value(&device)->default_value("auto"), "auto, cpu or cuda")
      ("input-dtype", po::value(&in_dtype)->default_value("f32"), "cast the input to f32 or bf16 before quantizing")
      ("out-dtype", po::value(&out_dtype)->default_value("f32"), "dequantized values in f32 or bf16 (stored as float32)")
      ("stats", po::bool_switch(), "print SQNR, NMSE, alpha and bucket ratio against the (rotated) input")
      ("bins", po::bool_switch(), "print Eq. 2 for every bin, measured: each level's share, mean error and parts of b_G and alpha - 1 (rowwise, 1xB)")
      ("allow-nonfinite", po::bool_switch(), "quantize NaN and infinite inputs (their blocks as kernels/quantize/quantize.h specifies) instead of refusing them");
  auto vm = parse_command("quantize", "--in X --out Y [options]", d, args);
  if (!vm) return 0;

  QuantSpec& spec = opt.spec;
  spec.grid = Grid::parse(grid, max_fpx);
  spec.block = block;
  spec.block_2d = (*vm)["block-2d"].as<bool>();
  spec.scale = parse_scale_kind(scale);
  spec.rounding = parse_rounding(rounding);
  spec.seed = seed;
  spec.offset = offset;
  spec.rht = rht;
  spec.rht_seed = rht_seed;
  spec.validate();
  opt.quantize.columnwise = (*vm)["columnwise"].as<bool>();
  opt.device = pick_device(device);
  opt.input_dtype = parse_dtype("--input-dtype", in_dtype);
  opt.quantize.out_dtype = parse_dtype("--out-dtype", out_dtype);
  opt.quantize.unfused = (*vm)["unfused"].as<bool>();
  opt.stats = (*vm)["stats"].as<bool>();
  opt.bins = (*vm)["bins"].as<bool>();
  opt.allow_nonfinite = (*vm)["allow-nonfinite"].as<bool>();
  quantize_file(opt);
  return 0;
}

}  // namespace ufp4
