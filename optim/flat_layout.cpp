#include "optim/flat_layout.h"

#include <algorithm>
#include <stdexcept>

namespace fptrain::optim {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

FlatSegment segment_of(const std::string& name, const std::vector<int64_t>& shape, int64_t offset) {
  FlatSegment s;
  s.name = name;
  s.shape = shape;
  s.numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("FlatLayout: parameter '" + name + "' has a negative dimension");
    s.numel *= d;
  }
  s.offset = offset;
  return s;
}

}  // namespace

FlatLayout::FlatLayout(const std::vector<std::pair<std::string, std::vector<int64_t>>>& params, int64_t alignment,
                       int64_t shards, int64_t bucket_elements, const std::vector<int64_t>& gradient_groups)
    : alignment_(alignment), shards_(shards) {
  if (alignment < 1 || shards < 1 || bucket_elements < 0)
    throw std::invalid_argument("FlatLayout: alignment and shards must be >= 1 and bucket_elements >= 0 (got " +
                                std::to_string(alignment) + ", " + std::to_string(shards) + ", " +
                                std::to_string(bucket_elements) + ")");
  if (!gradient_groups.empty() && gradient_groups.size() != params.size())
    throw std::invalid_argument("FlatLayout: " + std::to_string(gradient_groups.size()) + " gradient groups for " +
                                std::to_string(params.size()) + " parameters");
  const int64_t unit = alignment * shards;
  FlatBucket bucket;  // the one being filled
  int64_t offset = 0;
  auto close_bucket = [&] {
    // At least one unit, so that even an empty layout has a buffer.
    bucket.size = std::max(round_up(offset - bucket.offset, unit), unit);
    bucket.end_segment = segments_.size();
    offset = bucket.offset + bucket.size;
    buckets_.push_back(bucket);
    bucket = FlatBucket{};
    bucket.offset = offset;
    bucket.first_segment = segments_.size();
  };
  // Where the backward op changes, a bucket half full or more waits no longer.
  auto op_changes_past_half = [&](size_t i) {
    const int64_t held = offset - bucket.offset;
    return bucket_elements > 0 && !gradient_groups.empty() && i > 0 &&
           gradient_groups[i] != gradient_groups[i - 1] && 2 * held >= bucket_elements;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    if (op_changes_past_half(i)) close_bucket();
    FlatSegment s = segment_of(params[i].first, params[i].second, offset);
    offset += round_up(s.numel, alignment);
    numel_ += s.numel;
    segments_.push_back(std::move(s));
    segment_bucket_.push_back(buckets_.size());
    if (bucket_elements > 0 && offset - bucket.offset >= bucket_elements) close_bucket();
  }
  if (buckets_.empty() || bucket.first_segment < segments_.size()) close_bucket();
  total_ = offset;
}

std::vector<ShardRange> FlatLayout::shard_ranges(int64_t r) const {
  if (r < 0 || r >= shards_)
    throw std::out_of_range("FlatLayout::shard_ranges: shard " + std::to_string(r) + " of " + std::to_string(shards_));
  std::vector<ShardRange> out;
  int64_t local = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const int64_t n = buckets_[b].size / shards_;
    out.push_back({b, buckets_[b].offset + r * n, local, n});
    local += n;
  }
  return out;
}

std::vector<ShardPiece> FlatLayout::shard_pieces(int64_t r) const {
  std::vector<ShardPiece> out;
  for (const ShardRange& range : shard_ranges(r)) {
    const int64_t begin = range.flat_offset, end = begin + range.numel;
    const FlatBucket& b = buckets_[range.bucket];
    for (size_t i = b.first_segment; i < b.end_segment && segments_[i].offset < end; ++i) {
      const FlatSegment& s = segments_[i];
      const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
      if (lo >= hi) continue;  // outside the slice, or the segment is empty
      out.push_back({i, lo - s.offset, lo, hi - lo, range.local_offset + (lo - begin)});
    }
  }
  return out;
}

int64_t FlatLayout::segment_at(int64_t i) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), i,
                             [](int64_t v, const FlatSegment& s) { return v < s.offset; });
  if (it == segments_.begin()) return -1;
  --it;
  return i < it->offset + it->numel ? static_cast<int64_t>(it - segments_.begin()) : -1;
}

}  // namespace fptrain::optim
