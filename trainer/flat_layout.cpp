#include "trainer/flat_layout.h"

#include <algorithm>
#include <stdexcept>

namespace fptrain::trainer {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

FlatLayout::FlatLayout(const std::vector<std::pair<std::string, std::vector<int64_t>>>& params, int64_t alignment,
                       int64_t shards)
    : alignment_(alignment), shards_(shards) {
  if (alignment < 1 || shards < 1)
    throw std::invalid_argument("FlatLayout: alignment and shards must be >= 1 (got " + std::to_string(alignment) +
                                ", " + std::to_string(shards) + ")");
  int64_t offset = 0;
  for (const auto& [name, shape] : params) {
    FlatSegment s;
    s.name = name;
    s.shape = shape;
    s.numel = 1;
    for (int64_t d : shape) {
      if (d < 0) throw std::invalid_argument("FlatLayout: parameter '" + name + "' has a negative dimension");
      s.numel *= d;
    }
    s.offset = offset;
    offset += round_up(s.numel, alignment);
    numel_ += s.numel;
    segments_.push_back(std::move(s));
  }
  // At least one shard's worth of alignment, so that even an empty layout has a buffer.
  total_ = std::max(round_up(offset, alignment * shards), alignment * shards);
}

std::vector<ShardPiece> FlatLayout::shard_pieces(int64_t r) const {
  if (r < 0 || r >= shards_)
    throw std::out_of_range("FlatLayout::shard_pieces: shard " + std::to_string(r) + " of " + std::to_string(shards_));
  const int64_t begin = shard_begin(r), end = begin + shard_size();
  std::vector<ShardPiece> out;
  // Segments are sorted by offset: start at the last one beginning at or before `begin`.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), begin,
                             [](int64_t v, const FlatSegment& s) { return v < s.offset; });
  size_t i = it == segments_.begin() ? 0 : static_cast<size_t>(it - segments_.begin()) - 1;
  for (; i < segments_.size() && segments_[i].offset < end; ++i) {
    const FlatSegment& s = segments_[i];
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;  // the shard starts in this segment's padding, or the segment is empty
    out.push_back({i, lo - s.offset, lo, hi - lo});
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

}  // namespace fptrain::trainer
