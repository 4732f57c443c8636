// Lazy gradient storage (optim/flat_gradients.h) on the CPU: the norm of a buffer
// cut into pieces is the one-buffer norm bit for bit; lazy buckets train as one
// resident buffer bit for bit (clipping, accumulation, fp32 sums, 8-bit moments,
// split masters, a bucket no backward reaches), and buckets closed between backward
// ops as buckets closed by size; kept segments (gradient sinks) and
// hand-set gradients; the storage is freed after the step; a bucket dropped for its shard.
#include "tests/trainer/lazy_gradients_util.h"

#include "models/grad_sink_linear.h"
#include "models/grad_sinks.h"
#include "models/linear_cross_entropy.h"

#include <c10/core/GradMode.h>
#include <c10/util/intrusive_ptr.h>
#include <gtest/gtest.h>

namespace fptrain::optim {
namespace {

using testing::expect_cut_norm_is_whole_norm;
using testing::random_buffer;

TEST(TrainLazyGradients, NormOfACutBufferIsTheOneBufferNorm) {
  testing::expect_norms_of_cut_buffers(at::Device(at::kCPU));
  // On the CPU the cut may fall anywhere (the lanes follow the logical index).
  const at::Tensor whole = random_buffer(3 * 16384 + 5, at::kBFloat16, at::Device(at::kCPU));
  expect_cut_norm_is_whole_norm(whole, at::Tensor(), {5, 17, 16390, 40001}, {});
}

TEST(TrainLazyGradients, LazyBucketsTrainAsOneResidentBuffer) {
  testing::expect_lazy_trains_as_resident(at::Device(at::kCPU));
}

// One process's buckets closed between backward ops (DataParallelSpec::gradient_groups) leave
// every segment where it was, so they train as buckets closed by size alone, bit for bit.
TEST(TrainLazyGradients, BucketsClosedBetweenOpsTrainAsBucketsBySize) {
  const std::vector<int64_t> own_ops = {0, 1, 2, 3, 4, 5};
  OptimizerSection bf16, eight_bit, fp32_sums;
  eight_bit.moments = Moments::k8bit;
  fp32_sums.fp32_grad_accumulation = true;
  for (const OptimizerSection& o : {bf16, eight_bit, fp32_sums}) {
    for (bool odd_only : {false, true}) {
      const auto by_ops = testing::train(at::kBFloat16, at::Device(at::kCPU), o, 512, 3, 2, odd_only, own_ops);
      const auto by_size = testing::train(at::kBFloat16, at::Device(at::kCPU), o, 512, 3, 2, odd_only);
      for (size_t s = 0; s < by_ops.weights.size(); ++s) {
        EXPECT_EQ(by_ops.norms[s], by_size.norms[s]) << "step " << s;
        EXPECT_TRUE(by_ops.weights[s].equal(by_size.weights[s])) << "step " << s;
      }
    }
  }
  testing::TinyModel m(at::kBFloat16, at::Device(at::kCPU));
  DataParallelSpec dp;
  dp.bucket_elements = 512;
  const size_t by_size = AdamW(m.names, m.params, OptimizerSection{}, FlatLayout::kDefaultAlignment, dp)
                             .flat().layout().buckets().size();
  dp.gradient_groups = own_ops;
  testing::TinyModel m2(at::kBFloat16, at::Device(at::kCPU));
  const size_t by_ops = AdamW(m2.names, m2.params, OptimizerSection{}, FlatLayout::kDefaultAlignment, dp)
                            .flat().layout().buckets().size();
  EXPECT_EQ(by_size, 3u);  // [embed a] [b c d] [e]
  EXPECT_EQ(by_ops, 5u);   // [embed] [a] [b] [c d] [e]: the runs above did differ
}

TEST(TrainLazyGradients, ABucketNoBackwardReachesActsAsZerosAndHoldsNoMemory) {
  testing::TinyModel m(at::kBFloat16, at::Device(at::kCPU));
  DataParallelSpec dp;
  dp.bucket_elements = 256;
  AdamW opt(m.names, m.params, OptimizerSection{}, FlatLayout::kDefaultAlignment, dp);
  const FlatGradients& g = opt.flat().gradients();
  ASSERT_EQ(opt.flat().layout().buckets().size(), 5u);  // "e" alone in the last
  EXPECT_EQ(g.allocated_bytes(), 0) << "no gradient memory before the first backward";
  m.loss(1).backward();  // "e" gets no gradient
  EXPECT_FALSE(g.bucket(4).defined());
  EXPECT_FALSE(m.params[5].grad().defined());
  for (size_t b = 0; b < 4; ++b) EXPECT_TRUE(g.bucket(b).defined()) << b;
  EXPECT_EQ(g.allocated_bytes(), g.bytes() - 384 * 2);
  EXPECT_EQ(g.gathered().narrow(0, opt.flat().layout().buckets()[4].offset, 384).count_nonzero().item<int64_t>(), 0);
}

TEST(TrainLazyGradients, StorageIsFreedAfterTheStep) {
  testing::TinyModel m(at::kBFloat16, at::Device(at::kCPU));
  DataParallelSpec dp;
  dp.bucket_elements = 256;
  AdamW opt(m.names, m.params, OptimizerSection{}, FlatLayout::kDefaultAlignment, dp);
  const FlatGradients& g = opt.flat().gradients();
  m.loss(0).backward();
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> storages;
  for (size_t b = 0; b < 5; ++b) storages.emplace_back(g.bucket(b).storage().getWeakStorageImpl());
  for (const at::Tensor& p : m.params) EXPECT_TRUE(p.grad().defined());
  opt.grad_norm(1.0);
  opt.step(1e-3);
  EXPECT_EQ(g.allocated_bytes(), 0);
  for (size_t b = 0; b < 5; ++b) EXPECT_FALSE(g.bucket(b).defined()) << b;
  for (const at::Tensor& p : m.params) EXPECT_FALSE(p.grad().defined());
  for (const auto& s : storages) EXPECT_TRUE(s.expired()) << "nothing holds a bucket's memory after the step";
}

// A weight whose gradient a sink writes (keep_on_zero): its bucket is not
// zeroed for it, the sink overwrites; where no backward writes it, zeros.
// ZeRO-2's release (optim/grad_reducer.h) as FlatGradients sees it: a bucket dropped for its
// shard frees its storage and .grad views, reads as the shard between absent pieces, takes no
// new gradient, and release() frees the shard too.
TEST(TrainLazyGradients, ADroppedBucketReadsAsItsShardUntilRelease) {
  testing::TinyModel m(at::kBFloat16, at::Device(at::kCPU));
  DataParallelSpec dp;
  dp.bucket_elements = 256;
  AdamW opt(m.names, m.params, OptimizerSection{}, FlatLayout::kDefaultAlignment, dp);
  FlatGradients& g = opt.flat().gradients();
  const FlatBucket b0 = opt.flat().layout().buckets()[0];
  m.loss(0).backward();
  const at::Tensor whole = g.bucket(0).clone();
  const c10::weak_intrusive_ptr<c10::StorageImpl> storage = g.bucket(0).storage().getWeakStorageImpl();
  const int64_t n = b0.size / 2;
  g.make_shard(0, 1, 2).copy_(whole.narrow(0, n, n));  // as a reduce-scatter into rank 1's shard
  g.drop_bucket(0);
  EXPECT_FALSE(g.bucket(0).defined());
  for (size_t i = b0.first_segment; i < b0.end_segment; ++i) EXPECT_FALSE(m.params[i].grad().defined()) << i;
  EXPECT_TRUE(storage.expired()) << "the bucket's memory must go with its views";
  EXPECT_EQ(g.allocated_bytes(), g.bytes() - n * 2);
  EXPECT_TRUE(at::equal(g.slice(0, b0.offset + n, n, false), whole.narrow(0, n, n)));
  EXPECT_FALSE(g.slice(0, b0.offset, n, false).defined());
  EXPECT_THROW(g.slice(0, b0.offset, n, true), std::logic_error);
  const auto pieces = g.pieces();
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_FALSE(pieces[0].grads.defined());
  EXPECT_EQ(pieces[0].offset, b0.offset);
  EXPECT_EQ(pieces[0].numel, n);
  EXPECT_TRUE(pieces[1].grads.is_same(g.shard(0)));
  EXPECT_EQ(pieces[1].offset, b0.offset + n);
  EXPECT_TRUE(at::equal(g.gathered().narrow(0, b0.offset, b0.size),
                        at::cat({at::zeros({n}, whole.options()), whole.narrow(0, n, n)})));
  g.release();
  EXPECT_FALSE(g.shard(0).defined());
  EXPECT_EQ(g.allocated_bytes(), 0);
}

TEST(TrainLazyGradients, GradientSinksWriteIntoLazyBuckets) {
  auto run = [](GradStorage storage) {
    at::manual_seed(5);
    at::Tensor w = (at::randn({24, 16}) * 0.1).requires_grad_(true), b = at::randn({300}).requires_grad_(true);
    OptimizerSection o;
    o.gradient_storage = storage;
    DataParallelSpec dp;
    dp.bucket_elements = storage == GradStorage::kLazy ? 256 : 0;
    AdamW opt({"w", "b"}, {w, b}, o, FlatLayout::kDefaultAlignment, dp);
    opt.keep_on_zero({&w});
    FlatParameters& flat = opt.flat();
    models::Projection proj;
    proj.weight = &w;
    models::GradSinks sinks({proj}, [&flat](const at::Tensor& t) {
      const size_t i = flat.index_of(t);
      return models::GradSlot(
          [&flat, i](bool need) { return need ? flat.gradients().acquire_view(i) : flat.gradients().view(i); });
    });
    std::vector<at::Tensor> out;
    for (int s = 0; s < 3; ++s) {
      sinks.begin_step();
      for (int k = 0; k < 2; ++k) {
        const at::Tensor x = at::randn({8, 16});
        // Step 2: plain autograd for the weight (the sink unwritten: zeroed where its bucket exists).
        at::Tensor y = models::sink_linear(x, w, at::Tensor(), s == 2 ? nullptr : sinks.at(0));
        (y.sin().sum() + (b * b).sum() * (s == 1 ? 0.0 : 1.0)).backward();
      }
      sinks.finish_step();
      opt.grad_norm(1.0);
      opt.step(1e-2);
      out.push_back(flat.weights().clone());
    }
    return out;
  };
  const auto lazy = run(GradStorage::kLazy), resident = run(GradStorage::kResident);
  for (size_t s = 0; s < lazy.size(); ++s) EXPECT_TRUE(lazy[s].equal(resident[s])) << s;
}

// The fused loss's head sink (models::GradSinks::head()) on a tied embedding: the loss writes
// the slot in its forward (the bucket is allocated there, its kept segment not zeroed), the
// embedding's backward adds through AccumulateGrad; over micro-batches and steps (one of
// them supervising nothing) this trains as plain autograd into a resident buffer, to fp32
// rounding (the sink applies the scale per chunk).
TEST(TrainLazyGradients, HeadSinkOfATiedEmbeddingTrainsAsPlainAutograd) {
  auto run = [](bool sink) {
    at::manual_seed(9);
    at::Tensor emb = (at::randn({40, 16}) * 0.3).requires_grad_(true), b = at::randn({300}).requires_grad_(true);
    OptimizerSection o;
    o.gradient_storage = sink ? GradStorage::kLazy : GradStorage::kResident;
    DataParallelSpec dp;
    dp.bucket_elements = sink ? 256 : 0;
    AdamW opt({"emb", "b"}, {emb, b}, o, FlatLayout::kDefaultAlignment, dp);
    FlatParameters& flat = opt.flat();
    models::GradSinks sinks({}, [&flat](const at::Tensor& t) {
      const size_t i = flat.index_of(t);
      return models::GradSlot(
          [&flat, i](bool need) { return need ? flat.gradients().acquire_view(i) : flat.gradients().view(i); });
    }, sink ? &emb : nullptr);
    if (sink) opt.keep_on_zero(sinks.params());
    for (int s = 0; s < 3; ++s) {
      const double scale = 1.0 / 19.0;
      sinks.begin_step(scale);
      for (int k = 0; k < 2; ++k) {
        const at::Tensor ids = at::randint(40, {12}, at::kLong);
        at::Tensor targets = at::randint(40, {12}, at::kLong);
        if (s == 1 && k == 0) targets.fill_(models::kIgnoreIndex);
        const at::Tensor hidden = at::embedding(emb, ids) * b.narrow(0, 0, 16);
        const at::Tensor loss =
            models::linear_cross_entropy(hidden, emb, targets, 1.0, 5, {}, 0.0, sink ? sinks.head() : nullptr);
        (loss * scale).backward();
      }
      sinks.finish_step();
      opt.grad_norm(1.0);
      opt.step(1e-2);
    }
    return flat.weights().clone();
  };
  const at::Tensor sunk = run(true), plain = run(false);
  EXPECT_LE(((sunk - plain).norm() / plain.norm()).item<double>(), 1e-6);
}

// A .grad set by hand (no backward) is copied in and released after the step, as before.
TEST(TrainLazyGradients, HandSetGradientsAreCollected) {
  auto run = [](GradStorage storage) {
    testing::TinyModel m(at::kFloat, at::Device(at::kCPU));
    OptimizerSection o;
    o.gradient_storage = storage;
    DataParallelSpec dp;
    dp.bucket_elements = 256;
    AdamW opt(m.names, m.params, o, FlatLayout::kDefaultAlignment, dp);
    for (int s = 0; s < 2; ++s) {
      m.params[1].mutable_grad() = at::full_like(m.params[1], 0.5);
      if (s == 1) m.loss(0).backward();
      opt.grad_norm(1.0);
      opt.step(1e-2);
      EXPECT_FALSE(m.params[1].grad().defined() && storage == GradStorage::kLazy);
    }
    return opt.flat().weights().clone();
  };
  EXPECT_TRUE(run(GradStorage::kLazy).equal(run(GradStorage::kResident)));
}

}  // namespace
}  // namespace fptrain::optim
