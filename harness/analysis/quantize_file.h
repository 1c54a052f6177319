// `ufp4 quantize`'s work: the quantizer run on an array read from .npy, HDF5 or a synthetic
// generator, its fidelity measured (SQNR, NMSE, alpha, bucket ratio; Eq. 2 for every bin) and the
// dequantized values (.npy, in the input's shape) or everything (.h5: dequantized values, codes,
// scales, amax) written.
#pragma once
#include <torch/torch.h>

#include <string>

#include "kernels/quantize/quant_spec.h"
#include "models/quant_ops.h"

namespace ufp4 {

struct QuantizeFileOptions {
  // .npy (float16/32/64), .h5/.hdf5 (with `dataset`) or synthetic:KIND:ROWSxCOLS[:SEED]
  std::string in, dataset = "x";
  // .npy (dequantized values, input shape), .h5/.hdf5 (also codes, scales, amax) or "-" for none
  std::string out;
  QuantSpec spec;             // validated
  QuantizeOptions quantize;   // columnwise, the dequantized values' dtype, unfused RHT
  torch::Device device = torch::kCPU;
  torch::ScalarType input_dtype = torch::kFloat32;  // the input is cast to it before quantizing
  bool stats = false;            // print SQNR, NMSE, alpha and bucket ratio against the (rotated) input
  bool bins = false;             // print Eq. 2 for every bin, measured (rowwise only)
  bool allow_nonfinite = false;  // quantize NaN and infinite inputs instead of refusing them
};

// Throws ufp4::Error naming the option (--in, --out, --bins) for inputs and outputs it cannot take.
void quantize_file(const QuantizeFileOptions& opt);

}  // namespace ufp4
