// Where every parameter lives in the optimizer's flat buffers. Free of LibTorch.
//
// The trainer keeps each role of the model's parameters in ONE contiguous buffer
// (weights and gradients in the model dtype; fp32 master weights, exp_avg and
// exp_avg_sq), all with this layout, the parameters in model order
// (models::parameter_layout):
//
//   segment i   [offset_i, offset_i + numel_i)    offset_i a multiple of `alignment`
//   padding     the elements between segments and after the last one: zero in every
//               buffer, always (so they need no special case in any kernel)
//   total       the aligned segments, rounded up to a multiple of alignment × shards
//   shard r     [r·S, (r+1)·S) with S = total / shards, itself a multiple of `alignment`
//
// A shard is a plain range of the flat buffers: it may begin or end inside a
// parameter. shard_pieces(r) lists what it holds: for every parameter it
// overlaps, the elements [segment_offset, segment_offset + numel) of that
// parameter (flattened, row-major) at flat [flat_offset, flat_offset + numel).
// Over r = 0..shards-1 the pieces cover every parameter element exactly once.
// A data-parallel rank r keeps optimizer state for its shard only, reduce-scatters
// the gradient buffer into it and all-gathers the weight buffer from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fptrain::trainer {

struct FlatSegment {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // first element in the flat buffers
  int64_t numel = 0;
};

struct ShardPiece {
  size_t segment = 0;          // index into FlatLayout::segments()
  int64_t segment_offset = 0;  // first element of the piece inside the parameter
  int64_t flat_offset = 0;     // the same element in the flat buffers
  int64_t numel = 0;
};

class FlatLayout {
 public:
  // 128 elements: 256 bytes in bf16, 512 in fp32, so every parameter view starts
  // on a boundary that vector loads, TMA and cuBLAS like.
  static constexpr int64_t kDefaultAlignment = 128;

  // `params`: (name, shape) in the order they are laid out. alignment >= 1, shards >= 1.
  explicit FlatLayout(const std::vector<std::pair<std::string, std::vector<int64_t>>>& params,
                      int64_t alignment = kDefaultAlignment, int64_t shards = 1);

  const std::vector<FlatSegment>& segments() const { return segments_; }
  int64_t alignment() const { return alignment_; }
  int64_t shards() const { return shards_; }
  int64_t total() const { return total_; }             // elements in each flat buffer, padding included
  int64_t numel() const { return numel_; }             // parameter elements (no padding)
  int64_t shard_size() const { return total_ / shards_; }
  int64_t shard_begin(int64_t r) const { return r * shard_size(); }

  // What shard r holds, in flat order.
  std::vector<ShardPiece> shard_pieces(int64_t r) const;
  // The segment holding flat element `i`, or -1 for a padding element.
  int64_t segment_at(int64_t i) const;

 private:
  std::vector<FlatSegment> segments_;
  int64_t alignment_ = kDefaultAlignment;
  int64_t shards_ = 1;
  int64_t total_ = 0;
  int64_t numel_ = 0;
};

}  // namespace fptrain::trainer
