#include "harness/train/token_stream.h"

#include "common/error.h"
#include "harness/data/data.h"
#include "kernels/numerics/philox.h"

namespace ufp4 {

TokenStream::TokenStream(const std::vector<std::string>& shards, int64_t seq_len, uint64_t seed, bool shuffle)
    : seq_(seq_len), seed_(seed), shuffle_(shuffle) {
  for (const auto& s : shards) {
    shard_starts_.emplace_back(s, static_cast<int64_t>(tokens_.size()));
    std::vector<uint16_t> t = read_shard(s);
    tokens_.insert(tokens_.end(), t.begin(), t.end());
  }
  n_windows_ = tokens_.size() > 1 ? static_cast<int64_t>((tokens_.size() - 1) / seq_len) : 0;
  if (n_windows_ == 0)
    throw Error("data: " + std::to_string(tokens_.size()) + " tokens hold no window of " + std::to_string(seq_len + 1) + " tokens");
}

void TokenStream::check_vocab(int64_t vocab, const std::string& model) const {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i] < vocab) continue;
    size_t s = 0;
    while (s + 1 < shard_starts_.size() && shard_starts_[s + 1].second <= static_cast<int64_t>(i)) ++s;
    throw Error(shard_starts_[s].first + ": token id " + std::to_string(tokens_[i]) + " at token " + std::to_string(static_cast<int64_t>(i) - shard_starts_[s].second) +
                " is outside model " + model + "'s vocabulary (allowed: 0 to " + std::to_string(vocab - 1) +
                "): prepare the data with a vocabulary the model has, or choose a model with more embeddings");
  }
}

int64_t TokenStream::window_at(int64_t epoch, int64_t index) {
  if (!shuffle_) return index;
  if (order_epoch_ != epoch) {  // Fisher-Yates with Philox(seed, epoch): the same order on every machine
    order_.resize(static_cast<size_t>(n_windows_));
    for (int64_t i = 0; i < n_windows_; ++i) order_[i] = i;
    for (int64_t i = n_windows_ - 1; i > 0; --i) {
      uint64_t r = philox_bits(seed_, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
      int64_t j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
      std::swap(order_[i], order_[j]);
    }
    order_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(index)];
}

void TokenStream::skip(int64_t windows) {
  cursor.index += windows;
  cursor.epoch += cursor.index / n_windows_;
  cursor.index %= n_windows_;
}

torch::Tensor TokenStream::next(int64_t batch) {
  torch::Tensor out = torch::empty({batch, seq_ + 1}, torch::kInt64);
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    if (cursor.index >= n_windows_) { cursor.index = 0; ++cursor.epoch; }
    const int64_t w = window_at(cursor.epoch, cursor.index++);
    const uint16_t* src = tokens_.data() + w * seq_;
    for (int64_t t = 0; t <= seq_; ++t) o[b * (seq_ + 1) + t] = src[t];
  }
  return out;
}

}  // namespace ufp4
