#include "optim/grad_reducer.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <stdexcept>

namespace fptrain::optim {
namespace {

struct ReadyHook : torch::autograd::PostAccumulateGradHook {
  ReadyHook(GradReducer* reducer, size_t index) : reducer(reducer), index(index) {}
  void operator()(const torch::autograd::Variable&) override { reducer->gradient_ready(index); }
  GradReducer* reducer;
  size_t index;
};

}  // namespace

GradReducer::GradReducer(FlatParameters& flat, distributed::Communicator& comm, bool scatter,
                         bool release_unowned, int64_t max_recorded_reads)
    : flat_(flat),
      comm_(comm),
      scatter_(scatter),
      release_unowned_(release_unowned),
      max_recorded_reads_(max_recorded_reads) {
  const FlatLayout& l = flat.layout();
  params_in_bucket_.assign(l.buckets().size(), 0);
  for (size_t i = 0; i < l.segments().size(); ++i) {
    bucket_of_param_.push_back(l.bucket_of_segment(i));
    ++params_in_bucket_[l.bucket_of_segment(i)];
  }
  for (size_t i = 0; i < flat.params().size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(flat.params()[i], std::make_unique<ReadyHook>(this, i));
}

GradReducer::~GradReducer() {
  for (const auto& p : flat_.params()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradReducer::arm() {
  waiting_ = params_in_bucket_;
  launched_.assign(waiting_.size(), false);
  next_ = static_cast<int64_t>(waiting_.size()) - 1;
  armed_ = true;
  // A bucket without parameters (there is none unless the model has none) is ready at once.
  while (next_ >= 0 && waiting_[next_] == 0) launch(static_cast<size_t>(next_--));
}

void GradReducer::gradient_ready(size_t index) {
  if (!armed_) return;  // an earlier micro-batch: gradients keep accumulating locally
  const size_t b = bucket_of_param_.at(index);
  if (--waiting_[b] < 0) throw std::logic_error("GradReducer: a parameter's gradient arrived twice in one backward");
  while (next_ >= 0 && waiting_[next_] == 0) launch(static_cast<size_t>(next_--));
}

distributed::Pending reduce_bucket(distributed::Communicator& comm, const at::Tensor& bucket, bool scatter) {
  if (!scatter) return comm.all_reduce_sum(bucket);
  const int64_t n = bucket.numel() / comm.world_size();
  return comm.reduce_scatter_sum(bucket, bucket.narrow(0, comm.rank() * n, n));
}

bool GradReducer::releases() const {
  return release_unowned_ && scatter_ && comm_.world_size() > 1 &&
         flat_.gradients().storage() == GradStorage::kLazy;
}

void GradReducer::launch(size_t bucket) {
  pending_.push_back(releases() ? scatter_and_release(bucket)
                                : reduce_bucket(comm_, flat_.gradients().acquire(bucket), scatter_));
  launched_[bucket] = true;
}

// The reduce-scatter of `bucket` into a new shard, then the bucket given up: the
// parameters' .grad views go now (nothing adds to them in this backward any more).
distributed::Pending GradReducer::scatter_and_release(size_t bucket) {
  FlatGradients& grads = flat_.gradients();
  at::Tensor whole = grads.acquire(bucket);
  distributed::Pending work =
      comm_.reduce_scatter_sum(whole, grads.make_shard(bucket, comm_.rank(), comm_.world_size()));
  grads.drop_bucket(bucket);
  // Stream safety: on CUDA the collective reads `whole` on its own stream, after the
  // host returned. Unless the collective recorded those reads with the caching
  // allocator (the pushed copy-engine reduce-scatter), our last reference is kept
  // until finish() made the current stream wait for the collective; freed after
  // that, the caching allocator can hand the block only to work queued later on that
  // stream, which runs after the reads (ProcessGroupNCCL's own recordStream or stash
  // protects it too; this does not depend on which it uses).
  if (!work.input_may_be_freed()) released_in_flight_.push_back(std::move(whole));
  else limit_recorded_reads(work);
  return work;
}

void GradReducer::limit_recorded_reads(const distributed::Pending& work) {
  if (max_recorded_reads_ <= 0) return;
  recorded_reads_.push_back(work);
  while (static_cast<int64_t>(recorded_reads_.size()) > max_recorded_reads_) {
    recorded_reads_.front().wait_for_input_reads();
    recorded_reads_.pop_front();
  }
}

void GradReducer::finish() {
  if (!armed_) arm();  // this rank ran no backward in the last slot
  while (next_ >= 0) launch(static_cast<size_t>(next_--));
  for (auto& p : pending_) p.wait();
  pending_.clear();
  released_in_flight_.clear();  // the current stream waited for every reduction: see scatter_and_release
  recorded_reads_.clear();
  armed_ = false;
}

}  // namespace fptrain::optim
