// Expert parallelism's part of a run's files (models/moe.h: each rank of an expert group holds only
// its routed experts). A checkpoint's shared file, written by rank 0, holds rank 0's experts; each
// expert rank's experts go to a file of its own beside it, written by that rank of the first
// replica and read by that rank of every replica. The results' weight hash is the one a process
// holding every expert would compute: each expert weight gathered over the group in rank order.
#pragma once
#include <string>

#include "harness/dist/communicator.h"
#include "harness/train/checkpoint.h"
#include "models/transformer.h"

namespace ufp4 {

// stamp.what: "experts shard"; the file also names its expert rank and group size, checked on load.
void save_expert_shard(const std::string& path, Transformer& model, const Communicator& experts, const ArchiveStamp& stamp);
void load_expert_shard(const std::string& path, Transformer& model, const Communicator& experts, const torch::Device& device,
                       const ArchiveStamp& stamp);

// SHA-256 of the FP32 master weights, parameter by parameter in registration order, with names. With
// `experts` (collective over it: every rank of the group calls it) each routed expert weight is the
// group's, gathered in rank order, as one process holds it. `hash` false: the gathers only (a rank whose
// results nobody writes joins the collectives without copying tens of GB to the host), "" returned.
std::string weights_sha256(Transformer& model, Communicator* experts = nullptr, bool hash = true);

}  // namespace ufp4
