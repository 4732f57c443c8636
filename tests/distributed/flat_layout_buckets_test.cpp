// FlatLayout with gradient buckets (bucket_elements > 0), as data parallelism
// lays out the flat buffers: every promise of optim/flat_layout.h checked for
// many parameter lists, shard counts, alignments, bucket sizes and gradient groups.
#include "optim/flat_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace fptrain::optim {
namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Parameter lists of different character: a model-like one, odd sizes that are
// no multiple of anything, one parameter, many tiny ones, and a random one.
std::vector<Shapes> parameter_lists() {
  std::vector<Shapes> out;
  out.push_back({{"embed", {320, 64}},  {"q", {64, 64}},    {"k", {32, 64}},  {"v", {32, 64}},
                 {"o", {64, 64}},       {"norm1", {64}},    {"gate", {128, 64}}, {"up", {128, 64}},
                 {"down", {64, 128}},   {"norm2", {64}},    {"head", {320, 64}}});
  out.push_back({{"a", {37, 5}}, {"b", {129}}, {"c", {3, 7, 11}}, {"d", {1}}, {"e", {300}}, {"f", {2, 2}}});
  out.push_back({{"only", {1000}}});
  Shapes tiny;
  for (int i = 0; i < 40; ++i) tiny.push_back({"t" + std::to_string(i), {1 + i % 3}});
  out.push_back(tiny);
  std::mt19937 rng(7);
  Shapes random;
  for (int i = 0; i < 25; ++i) {
    std::vector<int64_t> shape;
    for (int d = 0, dims = 1 + static_cast<int>(rng() % 3); d < dims; ++d) shape.push_back(1 + rng() % 40);
    random.push_back({"r" + std::to_string(i), shape});
  }
  out.push_back(random);
  return out;
}

// Gradient groups for `n` parameters: none, every parameter its own op, and random runs.
std::vector<std::vector<int64_t>> groupings(size_t n) {
  std::vector<int64_t> own(n), runs(n);
  std::iota(own.begin(), own.end(), 0);
  std::mt19937 rng(static_cast<unsigned>(n));
  for (size_t i = 1; i < n; ++i) runs[i] = runs[i - 1] + static_cast<int64_t>(rng() % 2);
  return {{}, own, runs};
}

std::string where(size_t list, int64_t alignment, int64_t shards, int64_t bucket, size_t grouping) {
  return "list " + std::to_string(list) + ", alignment " + std::to_string(alignment) + ", shards " +
         std::to_string(shards) + ", bucket_elements " + std::to_string(bucket) + ", grouping " +
         std::to_string(grouping);
}

// Checks one layout against its contract; returns through gtest.
void check_layout(const Shapes& params, int64_t alignment, int64_t shards, int64_t bucket_elements,
                  const std::vector<int64_t>& groups, const std::string& ctx) {
  const FlatLayout l(params, alignment, shards, bucket_elements, groups);
  SCOPED_TRACE(ctx);
  // Where the op changes before segment i, a bucket holding `span` of at least half closes.
  const bool grouped = !groups.empty() && bucket_elements > 0;
  auto closes_before = [&](size_t i, int64_t span) {
    return grouped && i > 0 && groups[i] != groups[i - 1] && 2 * span >= bucket_elements;
  };
  ASSERT_EQ(l.segments().size(), params.size());
  ASSERT_FALSE(l.buckets().empty());
  EXPECT_EQ(l.alignment(), alignment);
  EXPECT_EQ(l.shards(), shards);

  // Segments: in order, aligned, whole parameters, not overlapping.
  int64_t numel = 0, end = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const FlatSegment& s = l.segments()[i];
    EXPECT_EQ(s.name, params[i].first);
    EXPECT_EQ(s.shape, params[i].second);
    EXPECT_EQ(s.numel, std::accumulate(s.shape.begin(), s.shape.end(), int64_t{1}, std::multiplies<>()));
    EXPECT_EQ(s.offset % alignment, 0) << s.name;
    EXPECT_GE(s.offset, end) << s.name;
    end = s.offset + s.numel;
    numel += s.numel;
  }
  EXPECT_EQ(l.numel(), numel);

  // Buckets: consecutive, together the whole buffer, each a multiple of
  // alignment x shards, each holding whole consecutive segments.
  int64_t offset = 0;
  size_t next_segment = 0;
  for (size_t b = 0; b < l.buckets().size(); ++b) {
    const FlatBucket& k = l.buckets()[b];
    EXPECT_EQ(k.offset, offset) << "bucket " << b;
    EXPECT_GT(k.size, 0) << "bucket " << b;
    EXPECT_EQ(k.size % (alignment * shards), 0) << "bucket " << b;
    EXPECT_EQ(k.first_segment, next_segment) << "bucket " << b;
    EXPECT_GT(k.end_segment, k.first_segment) << "bucket " << b << " holds no parameter";
    // The segments' aligned spans, in elements: at least bucket_elements, and
    // the bucket closes with the segment that reaches it; with groups also where
    // the op changes once it holds half, and nowhere else.
    int64_t span = 0, span_before_last = 0;
    for (size_t i = k.first_segment; i < k.end_segment; ++i) {
      const FlatSegment& s = l.segments()[i];
      EXPECT_EQ(l.bucket_of_segment(i), b) << s.name;
      EXPECT_GE(s.offset, k.offset) << s.name;
      EXPECT_LE(s.offset + s.numel, k.offset + k.size) << s.name << " crosses the end of bucket " << b;
      EXPECT_FALSE(i > k.first_segment && closes_before(i, span)) << "bucket " << b << " should have closed before "
                                                                   << s.name << ", where the op changes";
      span_before_last = span;
      span += round_up(s.numel, alignment);
    }
    if (bucket_elements == 0) {
      EXPECT_EQ(l.buckets().size(), 1u) << "bucket_elements 0 means one bucket";
    } else {
      if (b + 1 < l.buckets().size()) {
        EXPECT_TRUE(span >= bucket_elements || closes_before(k.end_segment, span)) << "bucket " << b << " closed early";
      }
      EXPECT_LT(span_before_last, bucket_elements) << "bucket " << b << " should have closed a segment earlier";
    }
    EXPECT_LT(k.size - span, alignment * shards) << "bucket " << b << " has more padding than rounding needs";
    offset += k.size;
    next_segment = k.end_segment;
  }
  EXPECT_EQ(next_segment, params.size());
  EXPECT_EQ(l.total(), offset);
  EXPECT_EQ(l.total() % shards, 0);
  EXPECT_EQ(l.shard_size() * shards, l.total());

  // Shard ranges: slice r of every bucket, a multiple of the alignment; the local
  // offsets run through [0, shard_size) in bucket order.
  std::vector<int> covered_flat(static_cast<size_t>(l.total()), 0);
  for (int64_t r = 0; r < shards; ++r) {
    const auto ranges = l.shard_ranges(r);
    ASSERT_EQ(ranges.size(), l.buckets().size()) << "shard " << r;
    int64_t local = 0;
    for (size_t b = 0; b < ranges.size(); ++b) {
      const ShardRange& g = ranges[b];
      const FlatBucket& k = l.buckets()[b];
      EXPECT_EQ(g.bucket, b);
      EXPECT_EQ(g.numel, k.size / shards);
      EXPECT_EQ(g.numel % alignment, 0);
      EXPECT_EQ(g.flat_offset, k.offset + r * g.numel);
      EXPECT_EQ(g.local_offset, local);
      local += g.numel;
      for (int64_t f = g.flat_offset; f < g.flat_offset + g.numel; ++f) ++covered_flat[static_cast<size_t>(f)];
    }
    EXPECT_EQ(local, l.shard_size()) << "shard " << r;
  }
  for (int64_t f = 0; f < l.total(); ++f)
    ASSERT_EQ(covered_flat[static_cast<size_t>(f)], 1) << "flat element " << f << " in " << covered_flat[f] << " shards";

  // Shard pieces: over all shards every parameter element exactly once; inside a
  // shard in flat order, inside its ranges, and local offsets without overlap.
  std::vector<std::vector<int>> seen(params.size());
  for (size_t i = 0; i < params.size(); ++i) seen[i].assign(static_cast<size_t>(l.segments()[i].numel), 0);
  for (int64_t r = 0; r < shards; ++r) {
    const auto ranges = l.shard_ranges(r);
    std::vector<int> local_used(static_cast<size_t>(l.shard_size()), 0);
    int64_t prev_flat_end = -1;
    for (const ShardPiece& p : l.shard_pieces(r)) {
      ASSERT_LT(p.segment, params.size());
      const FlatSegment& s = l.segments()[p.segment];
      ASSERT_GT(p.numel, 0) << s.name;
      ASSERT_GE(p.segment_offset, 0) << s.name;
      ASSERT_LE(p.segment_offset + p.numel, s.numel) << s.name;
      EXPECT_EQ(p.flat_offset, s.offset + p.segment_offset) << s.name;
      EXPECT_GE(p.flat_offset, prev_flat_end) << s.name << ": pieces out of flat order";
      prev_flat_end = p.flat_offset + p.numel;
      // The range of shard r holding the piece maps flat to local offsets.
      const ShardRange* home = nullptr;
      for (const ShardRange& g : ranges)
        if (p.flat_offset >= g.flat_offset && p.flat_offset + p.numel <= g.flat_offset + g.numel) home = &g;
      ASSERT_NE(home, nullptr) << s.name << " piece at " << p.flat_offset << " is outside shard " << r;
      EXPECT_EQ(p.local_offset, home->local_offset + (p.flat_offset - home->flat_offset)) << s.name;
      ASSERT_GE(p.local_offset, 0);
      ASSERT_LE(p.local_offset + p.numel, l.shard_size());
      for (int64_t k = 0; k < p.numel; ++k) {
        ++seen[p.segment][static_cast<size_t>(p.segment_offset + k)];
        EXPECT_EQ(local_used[static_cast<size_t>(p.local_offset + k)]++, 0) << "local element reused in shard " << r;
      }
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    for (size_t k = 0; k < seen[i].size(); ++k)
      ASSERT_EQ(seen[i][k], 1) << params[i].first << " element " << k << " is held " << seen[i][k] << " times";

  // segment_at agrees with the segments; everything else is padding.
  for (int64_t f = 0; f < l.total(); ++f) {
    const int64_t s = l.segment_at(f);
    if (s < 0) continue;
    const FlatSegment& seg = l.segments()[static_cast<size_t>(s)];
    ASSERT_TRUE(f >= seg.offset && f < seg.offset + seg.numel) << "segment_at(" << f << ")";
  }
}

TEST(FlatLayoutBuckets, EveryLayoutKeepsItsPromises) {
  const auto lists = parameter_lists();
  for (size_t li = 0; li < lists.size(); ++li)
    for (int64_t alignment : {1, 4, 128})
      for (int64_t shards : {1, 2, 3, 4, 8})
        for (int64_t bucket : {0, 1, 100, 777, 5000, 1 << 20}) {
          const auto groups = groupings(lists[li].size());
          for (size_t g = 0; g < groups.size(); ++g)
            check_layout(lists[li], alignment, shards, bucket, groups[g], where(li, alignment, shards, bucket, g));
        }
}

TEST(FlatLayoutBuckets, BucketSizeDecidesTheBucketCount) {
  const Shapes model = parameter_lists()[0];
  // No bucket size, or one above the whole model: one bucket.
  EXPECT_EQ(FlatLayout(model, 128, 2, 0).buckets().size(), 1u);
  EXPECT_EQ(FlatLayout(model, 128, 2, 1 << 30).buckets().size(), 1u);
  // One element: every parameter its own bucket.
  EXPECT_EQ(FlatLayout(model, 128, 2, 1).buckets().size(), model.size());
  // In between: more than one, fewer than the parameters; smaller buckets never fewer.
  size_t previous = 0;
  for (int64_t bucket : {1 << 20, 40000, 20000, 8192, 4096, 1}) {
    const size_t n = FlatLayout(model, 128, 2, bucket).buckets().size();
    EXPECT_GE(n, previous) << bucket;
    previous = n;
  }
  const size_t mid = FlatLayout(model, 128, 2, 8192).buckets().size();
  EXPECT_GT(mid, 1u);
  EXPECT_LT(mid, model.size());
}

TEST(FlatLayoutBuckets, SegmentsFallIntoTheSameBucketsForEveryShardCount) {
  // Only the padding at each bucket's end depends on the shard count, so ranks
  // of any world size reduce the same parameters together.
  const Shapes model = parameter_lists()[0];
  for (int64_t bucket : {1, 4096, 8192, 40000}) {
    const FlatLayout one(model, 128, 1, bucket);
    for (int64_t shards : {2, 3, 8}) {
      const FlatLayout many(model, 128, shards, bucket);
      ASSERT_EQ(many.buckets().size(), one.buckets().size()) << bucket << " " << shards;
      for (size_t b = 0; b < one.buckets().size(); ++b) {
        EXPECT_EQ(many.buckets()[b].first_segment, one.buckets()[b].first_segment);
        EXPECT_EQ(many.buckets()[b].end_segment, one.buckets()[b].end_segment);
      }
    }
  }
}

TEST(FlatLayoutBuckets, ShardRangesRejectAShardOutsideTheLayout) {
  const FlatLayout l(parameter_lists()[1], 4, 3, 100);
  EXPECT_THROW(l.shard_ranges(3), std::out_of_range);
  EXPECT_THROW(l.shard_ranges(-1), std::out_of_range);
  EXPECT_THROW(FlatLayout(parameter_lists()[1], 4, 3, -1), std::invalid_argument);
}

}  // namespace
}  // namespace fptrain::optim
