// Training windows of seq_len + 1 tokens from token shards, in a seeded order that visits every
// window once per epoch; the cursor (epoch, index) is part of the checkpoint.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ufp4 {

class TokenStream {
 public:
  struct Cursor {
    int64_t epoch = 0, index = 0;
  };
  TokenStream(const std::vector<std::string>& shards, int64_t seq_len, uint64_t seed, bool shuffle = true);
  torch::Tensor next(int64_t batch);  // [batch, seq_len + 1] int64
  // Moves past `windows` windows without reading them: a data-parallel rank skips the other ranks'
  // parts of a step, so every rank's cursor stays the one a single process would have.
  void skip(int64_t windows);
  int64_t windows() const { return n_windows_; }
  int64_t tokens() const { return static_cast<int64_t>(tokens_.size()); }
  // Throws Error naming the shard and position of the first token id >= vocab (the model's embedding
  // would fail on it with LibTorch's "index out of range").
  void check_vocab(int64_t vocab, const std::string& model) const;
  Cursor cursor;

 private:
  std::vector<std::pair<std::string, int64_t>> shard_starts_;  // each shard and its first token's index
  int64_t window_at(int64_t epoch, int64_t index);
  std::vector<uint16_t> tokens_;
  std::vector<int64_t> order_;
  int64_t seq_, n_windows_, order_epoch_ = -1;
  uint64_t seed_;
  bool shuffle_;
};

}  // namespace ufp4
