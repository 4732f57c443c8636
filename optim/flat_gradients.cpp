#include "optim/flat_gradients.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fptrain::optim {

FlatGradients::FlatGradients(const FlatLayout& layout, std::vector<at::Tensor> params, at::TensorOptions options,
                             GradStorage storage)
    : layout_(layout),
      params_(std::move(params)),
      options_(options.requires_grad(false)),
      storage_(GradStorage::kLazy) {
  buckets_.resize(layout_.buckets().size());
  shards_.resize(buckets_.size());
  views_.resize(params_.size());
  zero_ranges_ = {{0, layout_.total()}};
  bucket_keeps_.assign(buckets_.size(), false);
  // Runs before AccumulateGrad reads .grad (a leaf's hooks are its AccumulateGrad's
  // tensor pre-hooks), also when the incoming gradient is undefined.
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].mutable_grad() = at::Tensor();  // what a .grad held before belongs to no step of ours
    hooks_.push_back(params_[i].register_hook([this, i](const at::Tensor&) { before_accumulate(i); }));
  }
  set_storage(storage);
}

FlatGradients::~FlatGradients() {
  for (size_t i = 0; i < params_.size(); ++i) {
    try {
      params_[i].remove_hook(hooks_[i]);
    } catch (...) {  // a destructor must not throw; the hook only points here
    }
  }
}

void FlatGradients::set_storage(GradStorage storage) {
  const GradStorage target = storage == GradStorage::kResident ? GradStorage::kResident : GradStorage::kLazy;
  if (target == storage_ && (target == GradStorage::kLazy || buffer_.defined())) return;
  storage_ = GradStorage::kLazy;  // give everything up, then build the new form
  release();
  buffer_ = at::Tensor();
  storage_ = target;
  if (target == GradStorage::kResident) allocate_resident();
}

void FlatGradients::allocate_resident() {
  c10::NoGradGuard no_grad;
  buffer_ = at::zeros({layout_.total()}, options_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const FlatBucket& fb = layout_.buckets()[b];
    buckets_[b] = buffer_.narrow(0, fb.offset, fb.size);
  }
  for (size_t i = 0; i < params_.size(); ++i) install(i, Fill::kZeros);
}

const at::Tensor& FlatGradients::buffer() const {
  if (!buffer_.defined()) throw std::logic_error("FlatGradients: the gradients have no one buffer (lazy storage)");
  return buffer_;
}

const at::Tensor& FlatGradients::acquire(size_t b, Fill fill) {
  at::Tensor& s = buckets_.at(b);
  if (s.defined()) return s;
  if (shards_[b].grads.defined())
    throw std::logic_error("FlatGradients: bucket " + std::to_string(b) +
                           " was reduced into this rank's shard and freed; no gradient can enter it before the step");
  c10::NoGradGuard no_grad;
  const FlatBucket& fb = layout_.buckets()[b];
  if (fill == Fill::kZeros || !bucket_keeps_[b]) {
    s = at::zeros({fb.size}, options_);
  } else {
    s = at::empty({fb.size}, options_);  // the kept segments: the backward overwrites them
    zero_except_kept(s, fb.offset);
  }
  // Every parameter of the bucket sees its view (a .grad set by hand stays for collect_grads).
  for (size_t i = fb.first_segment; i < fb.end_segment; ++i)
    if (!params_[i].grad().defined()) install(i, fill);
  return s;
}

at::Tensor FlatGradients::slice(size_t b, int64_t flat, int64_t numel, bool need) {
  const flat::GradPiece& shard = shards_.at(b);
  if (shard.grads.defined() && flat >= shard.offset && flat + numel <= shard.offset + shard.numel)
    return shard.grads.narrow(0, flat - shard.offset, numel);
  const at::Tensor& bucket = need ? acquire(b) : buckets_.at(b);
  if (!bucket.defined()) return bucket;
  return bucket.narrow(0, flat - layout_.buckets()[b].offset, numel);
}

const at::Tensor& FlatGradients::make_shard(size_t b, int64_t rank, int64_t shards) {
  if (storage_ != GradStorage::kLazy) throw std::logic_error("FlatGradients: shards need lazy storage");
  const FlatBucket& fb = layout_.buckets().at(b);
  const int64_t n = fb.size / shards;
  shards_[b] = {at::empty({n}, options_), fb.offset + rank * n, n};
  return shards_[b].grads;
}

void FlatGradients::drop_bucket(size_t b) {
  if (storage_ != GradStorage::kLazy) throw std::logic_error("FlatGradients: only lazy buckets can be dropped");
  const FlatBucket& fb = layout_.buckets().at(b);
  drop_views(fb.first_segment, fb.end_segment);
  buckets_[b] = at::Tensor();
}

// Parameters [first, end) lose their .grad views (a .grad set by hand stays).
void FlatGradients::drop_views(size_t first, size_t end) {
  for (size_t i = first; i < end; ++i) {
    if (holds_view(i)) params_[i].mutable_grad() = at::Tensor();
    views_[i] = at::Tensor();
  }
}

void FlatGradients::zero_except_kept(const at::Tensor& storage, int64_t offset) {
  const int64_t end = offset + storage.numel();
  for (const auto& [begin, stop] : zero_ranges_) {
    const int64_t lo = std::max(begin, offset), hi = std::min(stop, end);
    if (lo < hi) storage.narrow(0, lo - offset, hi - lo).zero_();
  }
}

at::Tensor FlatGradients::view(size_t i) const {
  const FlatSegment& s = layout_.segments().at(i);
  const size_t b = layout_.bucket_of_segment(i);
  const at::Tensor& storage = buckets_[b];
  if (!storage.defined()) return at::Tensor();
  return storage.narrow(0, s.offset - layout_.buckets()[b].offset, s.numel).view(s.shape);
}

at::Tensor FlatGradients::acquire_view(size_t i, Fill fill) {
  install(i, fill);
  return views_[i];
}

bool FlatGradients::holds_view(size_t i) const {
  const at::Tensor& g = params_[i].grad();
  return g.defined() && views_[i].defined() && g.is_same(views_[i]);
}

void FlatGradients::install(size_t i, Fill fill) {
  if (holds_view(i)) return;
  c10::NoGradGuard no_grad;
  const bool reset = views_[i].defined() && !params_[i].grad().defined();
  if (!buckets_[layout_.bucket_of_segment(i)].defined()) acquire(layout_.bucket_of_segment(i), fill);
  if (holds_view(i)) return;  // acquire installed it
  if (reset) views_[i].zero_();  // "no gradient" since: not what the view held
  views_[i] = view(i);
  params_[i].mutable_grad() = views_[i];
}

void FlatGradients::forget(size_t i) {
  if (!views_[i].defined() || params_[i].grad().defined()) return;
  c10::NoGradGuard no_grad;
  views_[i].zero_();
  views_[i] = at::Tensor();
}

void FlatGradients::before_accumulate(size_t i) {
  // A .grad set by hand stays: AccumulateGrad adds to it and collect_grads copies it in.
  if (params_[i].grad().defined() && !holds_view(i)) return;
  install(i, Fill::kForBackward);
}

void FlatGradients::release() {
  c10::NoGradGuard no_grad;
  if (storage_ == GradStorage::kResident) {
    for (const auto& [begin, end] : zero_ranges_) buffer_.narrow(0, begin, end - begin).zero_();
    return;
  }
  drop_views(0, params_.size());
  for (at::Tensor& b : buckets_) b = at::Tensor();
  for (flat::GradPiece& s : shards_) s = {};
}

void FlatGradients::keep_on_zero(const std::vector<bool>& keep) {
  // The buffer minus the kept segments, as few ranges as possible (the padding between segments is zero anyway).
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto& segs = layout_.segments();
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return segs[a].offset < segs[b].offset; });
  zero_ranges_.clear();
  bucket_keeps_.assign(buckets_.size(), false);
  int64_t begin = 0;
  for (size_t i : order) {
    if (!keep.at(i)) continue;
    bucket_keeps_[layout_.bucket_of_segment(i)] = true;
    if (segs[i].offset > begin) zero_ranges_.emplace_back(begin, segs[i].offset);
    begin = segs[i].offset + segs[i].numel;
  }
  if (layout_.total() > begin) zero_ranges_.emplace_back(begin, layout_.total());
}

std::vector<flat::GradPiece> FlatGradients::pieces() const {
  std::vector<flat::GradPiece> out;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const FlatBucket& fb = layout_.buckets()[b];
    const flat::GradPiece& s = shards_[b];
    if (buckets_[b].defined() || !s.grads.defined()) {
      out.push_back({buckets_[b], fb.offset, fb.size});
      continue;
    }
    const int64_t end = fb.offset + fb.size, shard_end = s.offset + s.numel;
    if (s.offset > fb.offset) out.push_back({at::Tensor(), fb.offset, s.offset - fb.offset});
    out.push_back(s);
    if (end > shard_end) out.push_back({at::Tensor(), shard_end, end - shard_end});
  }
  return out;
}

at::Tensor FlatGradients::gathered() const {
  c10::NoGradGuard no_grad;
  at::Tensor out = at::zeros({layout_.total()}, options_);
  for (const flat::GradPiece& p : pieces())
    if (p.grads.defined()) out.narrow(0, p.offset, p.numel).copy_(p.grads);
  return out;
}

int64_t FlatGradients::bytes() const { return layout_.total() * static_cast<int64_t>(options_.dtype().itemsize()); }

int64_t FlatGradients::largest_bucket_bytes() const {
  int64_t largest = 0;
  for (const FlatBucket& b : layout_.buckets()) largest = std::max(largest, b.size);
  return largest * static_cast<int64_t>(options_.dtype().itemsize());
}

int64_t FlatGradients::allocated_bytes() const {
  if (buffer_.defined()) return buffer_.nbytes();
  int64_t n = 0;
  for (const at::Tensor& b : buckets_) n += b.defined() ? b.nbytes() : 0;
  for (const flat::GradPiece& s : shards_) n += s.grads.defined() ? s.grads.nbytes() : 0;
  return n;
}

}  // namespace fptrain::optim
