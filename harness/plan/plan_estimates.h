// What runs and models will cost, before they run: `ufp4 plan`. A manifest's runs as `ufp4 run` plans
// them (run id, tokens, epochs, FLOPs, the time at the speed committed runs measured, whether results
// exist and why a run is reused or trained); a model's parameters, FLOPs and memory, and on N GPUs its
// memory a GPU (replicated or ZeRO-1; the expert-parallel layout of a MoE) and time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace ufp4 {

// The plan's memory a GPU for `gpus` data-parallel ranks of micro-batch `micro_batch` (estimate_memory's
// terms, laid out as DataParallel holds them): FP32 weights, their BF16 copy, FP32 gradients and
// activations whole on every rank; the AdamW moments whole (replicated) or split `gpus` ways with the
// reduce-scattered gradient shard beside them (sharded, ZeRO-1). One GPU: estimate_memory's total.
double data_parallel_memory_gb(const ModelConfig& c, int64_t micro_batch, int gpus, bool sharded);
// GB a GPU when a MoE model's routed experts are split over `ep` of the `gpus` ranks (ufp4 run --ep):
// every other parameter whole on each rank with its AdamW moments and gradient shard split over all
// ranks (ZeRO-1), the experts' over the gpus / ep ranks that hold the same experts; FP32 and BF16
// weights, FP32 gradients, one micro-batch of activations. At ep 1: data_parallel_memory_gb (sharded).
double expert_parallel_memory_gb(const ModelConfig& c, int64_t micro_batch, int gpus, int ep);
// GB a GPU that a 4-bit recipe adds to those: each quantized linear keeps its weight's columnwise BF16
// operand for DGRAD from the forward to the backward (models/quant_linear.cpp), 2 bytes a quantized weight
// of the rank, the routed experts' split `ep` ways. Not counted: activation operands a recipe keeps beside
// the BF16 activations (on 4 H200s moe-7.9b at EP 2 x DP 2 measured 10.6 GB over bf16, this term 7.7).
double four_bit_operand_gb(const ModelConfig& c, int ep);

// `plan MANIFEST...`, printed. `device_name`: estimate for this device ("" for this machine's).
void print_run_plans(const std::vector<std::string>& manifests, const std::string& device_name);
// `plan --model NAME...|all [--gpus N]`, printed. Throws ufp4::Error listing the names when none is given.
void print_model_plans(std::vector<std::string> models, int64_t seq, int64_t micro_batch, int gpus, double tokens, const std::string& device_name);

}  // namespace ufp4
