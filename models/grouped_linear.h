// The experts' linears of one MoE layer as one module: weight [E, N, K], expert e's [N, K] matrix in
// slice e, applied to the expert-sorted rows of a Routing (rows of expert e's segment use slice e).
// Each expert keeps its own LayerQuant (name "<prefix>.experts.<e>.<linear>", its own layer id), so
// its SR keys, RHT signs, layer policy, telemetry and capture are those of a per-expert QuantLinear.
//
// On CUDA with LibTorch >= 2.8 a GEMM runs grouped, one at::_grouped_mm for all experts on BF16
// operands with the segment ends read on the device (no host synchronisation); each quantized operand
// is quantized for all experts in one segmented quantization (models/quant_ops.h), equal bit for bit
// to the per-expert operands. WGRAD's blocks and RHT segments run along tokens, so its operands are
// copied into a layout where each expert's rows start on a whole group (wgrad_rows).
// The rest runs expert by expert through the same quant_fprop / quant_dgrad / quant_wgrad as
// QuantLinear, on the host copy of the segment ends: CPU, older LibTorch, telemetry and capture steps
// (their records are per expert), FP32 GEMMs, rotated-only operands, weights whose experts would
// share a block.
#pragma once
#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "models/moe_routing.h"
#include "models/quant_ops.h"
#include "models/quant_linear.h"

namespace ufp4 {

// True when this build can run grouped GEMMs (at::_grouped_mm) on CUDA tensors.
bool grouped_mm_available();

// A grouped layout of token rows: expert e's segment ends at ends[e]; its operand is the first lens[e]
// rows of the segment (kernels/moe/quantize_segments.h). src[i]: the source row of padded row i, -1 for padding.
struct GroupedRows {
  torch::Tensor ends, lens, src;  // int32 [E], int32 [E], int64 [rows]
  int64_t rows = 0;
};

// WGRAD's padded layout of routing ends [E] (int32) over `rows` expert-sorted rows: each expert's rows
// start on a multiple of `align`, lens = its rows rounded up to a multiple of rht (0: its rows), src the
// source row of each padded row or -1 (kernels/moe/padded_segments.h). On the device in one launch (E up to
// 1024), elsewhere a LibTorch composition of the same integers.
GroupedRows padded_segment_rows(const torch::Tensor& ends, int64_t rows, int64_t align, int64_t rht);

class GroupedLinearImpl : public torch::nn::Module {
 public:
  // Expert e's layer id is first_layer_id + e * id_stride (the ids per-expert QuantLinears would get).
  // first_expert: the layer holds experts first_expert .. first_expert + experts - 1 of its MoE layer (expert
  // parallelism: a rank's share), named and keyed by those global indices.
  GroupedLinearImpl(int64_t experts, int64_t in_features, int64_t out_features, const std::string& prefix, const std::string& linear,
                    const std::shared_ptr<QuantContext>& ctx, int64_t first_layer_id, int64_t id_stride, int layer_index, int n_layers,
                    int64_t first_expert = 0);
  // LibTorch's Linear initialisation of slice e; the caller orders the draws across experts and linears.
  void init_expert(int64_t e);
  // x [A, K] in the expert-sorted layout of r -> [A, N]; rows past the last segment end are 0.
  torch::Tensor forward(const torch::Tensor& x, const Routing& r);
  // forward(x.index_select(0, gather), r) without forming those rows (gather = dispatch_rows(r): the
  // MoE's dispatch), where the segmented pair kernel quantizes FPROP's and WGRAD's operands reading x
  // through gather and DGRAD runs grouped (reads_gathered); the bits of dispatching first. Its backward
  // returns x's gradient: each token's rows summed (dispatch_backward; fused_dispatch as dispatch_tokens').
  torch::Tensor forward_gathered(const torch::Tensor& x, const Routing& r, const torch::Tensor& gather, bool fused_dispatch);
  bool reads_gathered(const torch::Tensor& x) const;
  // Whether GEMM g of this step would run grouped on x (else expert by expert).
  bool runs_grouped(const torch::Tensor& x, Gemm g) const;
  // Whether FPROP and DGRAD, the weight's GEMMs, run grouped this step on the GPU's BF16 activations:
  // then the weight's operands may come from the forward's batch (models/weight_operands.h).
  bool weight_gemms_run_grouped() const;

  // Operand `slot` of GEMM g for every expert in the segmented layout of (ends, lens), quantized with
  // each expert's keys and dequantized to the per-expert path's dtype; t itself where the recipe leaves it.
  // src (optional): the layout's rows are gather_rows(t, src) (GroupedRows::src), t read in place where it can.
  torch::Tensor grouped_operand(const torch::Tensor& t, Gemm g, int slot, int64_t step, bool columnwise, const torch::Tensor& ends,
                                const torch::Tensor& lens, const torch::Tensor& src = torch::Tensor()) const;
  // Whether operand (row_g, row_slot) rowwise and (col_g, col_slot) columnwise of t come from one read
  // (grouped_operand_pair's pair kernel): both quantized, on the segmented pair kernel's specs.
  bool pairs_operands(const torch::Tensor& t, Gemm row_g, int row_slot, Gemm col_g, int col_slot, int64_t step) const;
  // Those two operands, both quantized, as BF16 (the grouped GEMMs' operands): grouped_operand(t, row_g,
  // row_slot, step, false, ends) and grouped_operand(t, col_g, col_slot, step, true, rows.ends, rows.lens,
  // rows.src) on CUDA, bit for bit, from one read of t where it can.
  // gather (optional): t's rows gather[0], gather[1], ... are the layout's rows (quantize_segments_pair).
  std::pair<torch::Tensor, torch::Tensor> grouped_operand_pair(const torch::Tensor& t, Gemm row_g, int row_slot, Gemm col_g, int col_slot,
                                                               int64_t step, const torch::Tensor& ends, const GroupedRows& rows,
                                                               const torch::Tensor& gather = torch::Tensor()) const;
  // WGRAD's layout for routing ends over `rows` rows: each expert's rows start on a multiple of the
  // largest of 16, the RHT size and the quantized operands' blocks; lens = the rows rounded up to the
  // RHT size (the per-expert path's zero rows). Computed on the device.
  GroupedRows wgrad_rows(const torch::Tensor& ends, int64_t rows) const;
  // The last wgrad_rows() result, shared by the linears of one MoE layer (MoeImpl): fc2's backward
  // computes the layout, fc1's (same routing ends, same alignment) reuses it instead of some 30 small
  // launches. Held with its ends tensor, so no other tensor can take that tensor's identity meanwhile.
  struct WgradRowsCache {
    torch::Tensor ends;
    int64_t rows = 0, align = 0, rht = 0;
    GroupedRows value;
  };
  std::shared_ptr<WgradRowsCache> wgrad_rows_cache = std::make_shared<WgradRowsCache>();
  // Each expert's SR and RHT seeds for operand `slot` of GEMM g at `step`.
  SegmentKeys expert_keys(Gemm g, int slot, int64_t step) const;

  torch::Tensor weight;
  std::vector<std::shared_ptr<LayerQuant>> layers;
  bool allow_grouped = true;  // false: always expert by expert (the equivalence tests' reference)
  bool allow_gathered = true; // false: reads_gathered() is false (the caller dispatches first; the tests compare)

 private:
  struct KeyTable {
    uint64_t seed = 0, rht_seed = 0;  // expert 0's keys when the table was made
    torch::Tensor table;              // segment_key_table() of all experts
  };
  mutable std::array<KeyTable, 6> key_tables_;  // per (GEMM, operand slot)
  // Operand `slot` of GEMM g's spec (expert 0's) and the device table of every expert's keys.
  std::pair<QuantSpec, torch::Tensor> operand_keys(Gemm g, int slot, int64_t step, torch::Device device) const;
};
TORCH_MODULE(GroupedLinear);

}  // namespace ufp4
