// Where every parameter lives in the optimizer's flat buffers. Free of LibTorch.
//
// The trainer keeps each role of the model's parameters in ONE contiguous buffer
// (weights and gradients in the model dtype; fp32 master weights, exp_avg and
// exp_avg_sq), all with this layout, the parameters in model order
// (models::parameter_layout):
//
//   segment i   [offset_i, offset_i + numel_i)    offset_i a multiple of `alignment`
//   bucket b    consecutive whole segments (at least `bucket_elements` of them, in
//               elements, unless the parameters run out), its size rounded up to a
//               multiple of alignment × shards: the unit gradients are reduced in
//               while the backward runs (one bucket when bucket_elements is 0).
//               With gradient groups (the backward op that produces each
//               parameter's gradient), a bucket already holding at least half of
//               bucket_elements also closes where the group changes, so a large
//               one waits for no later op's gradients while tiny parameters
//               (norms) still join their neighbours
//   padding     the elements between segments and at the end of each bucket: zero
//               in every buffer, always (so they need no special case in any kernel)
//   total       the sum of the buckets
//   shard r     slice r of every bucket: [offset_b + r·s_b, offset_b + (r+1)·s_b)
//               with s_b = size_b / shards, itself a multiple of `alignment`
//
// A data-parallel rank r keeps optimizer state for shard r only, as one local
// buffer of shard_size() elements: the slices in bucket order (shard_ranges).
// Reduce-scatter of bucket b leaves the sum of slice r in rank r's own slice of
// the gradient buffer (in place), and all-gather of bucket b fills the weight
// buffer from every rank's slice: both are plain ranges of the flat buffers.
// A slice may begin or end inside a parameter. shard_pieces(r) lists what shard r
// holds: for every parameter it overlaps, the elements [segment_offset,
// segment_offset + numel) of that parameter (flattened, row-major) at flat
// [flat_offset, ...) and local [local_offset, ...). Over r = 0..shards-1 the
// pieces cover every parameter element exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fptrain::optim {

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
  int64_t local_offset = 0;    // the same element in the shard's local buffer
};

struct FlatBucket {
  int64_t offset = 0;  // first element in the flat buffers
  int64_t size = 0;    // elements, padding included: a multiple of alignment × shards
  size_t first_segment = 0, end_segment = 0;  // the segments [first, end) it holds
};

// Shard r's slice of one bucket.
struct ShardRange {
  size_t bucket = 0;
  int64_t flat_offset = 0;   // in the flat buffers
  int64_t local_offset = 0;  // in the shard's local buffer
  int64_t numel = 0;
};

class FlatLayout {
 public:
  // 128 elements: 256 bytes in bf16, 512 in fp32, so every parameter view starts
  // on a boundary that vector loads, TMA and cuBLAS like.
  static constexpr int64_t kDefaultAlignment = 128;

  // `params`: (name, shape) in the order they are laid out. alignment >= 1,
  // shards >= 1, bucket_elements >= 0 (0: one bucket). `gradient_groups`: empty,
  // or one id per parameter, equal for neighbours whose gradients one backward op
  // produces (models::backward_op_groups).
  explicit FlatLayout(const std::vector<std::pair<std::string, std::vector<int64_t>>>& params,
                      int64_t alignment = kDefaultAlignment, int64_t shards = 1, int64_t bucket_elements = 0,
                      const std::vector<int64_t>& gradient_groups = {});

  const std::vector<FlatSegment>& segments() const { return segments_; }
  int64_t alignment() const { return alignment_; }
  int64_t shards() const { return shards_; }
  int64_t total() const { return total_; }             // elements in each flat buffer, padding included
  int64_t numel() const { return numel_; }             // parameter elements (no padding)
  int64_t shard_size() const { return total_ / shards_; }  // elements of one shard (its local buffer)
  const std::vector<FlatBucket>& buckets() const { return buckets_; }
  size_t bucket_of_segment(size_t i) const { return segment_bucket_.at(i); }
  // Shard r's slice of every bucket, in flat order.
  std::vector<ShardRange> shard_ranges(int64_t r) const;
  // What shard r holds, in flat order.
  std::vector<ShardPiece> shard_pieces(int64_t r) const;
  // The segment holding flat element `i`, or -1 for a padding element.
  int64_t segment_at(int64_t i) const;

 private:
  std::vector<FlatSegment> segments_;
  std::vector<FlatBucket> buckets_;
  std::vector<size_t> segment_bucket_;
  int64_t alignment_ = kDefaultAlignment;
  int64_t shards_ = 1;
  int64_t total_ = 0;
  int64_t numel_ = 0;
};

}  // namespace fptrain::optim
