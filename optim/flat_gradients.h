// The parameters' gradients, cut into the layout's buckets (optim/flat_layout.h),
// and each parameter's .grad as a view of its bucket.
//
// Lazy storage (the default): a bucket has no memory until the backward of a
// step first reaches one of its parameters. A hook on every parameter runs just
// before autograd's AccumulateGrad: it allocates the bucket (zeroed, except the
// segments of keep_on_zero parameters, which the backward overwrites) and sets
// every .grad of the bucket to its view, so AccumulateGrad adds into the view in
// place (it replaces a defined .grad only under create_graph): no copy. After the
// step release() frees the buckets (.grad undefined again), so the next forward
// — where activations peak — runs without the 2 bytes per parameter that a bf16
// gradient takes. A bucket no backward reached holds no memory and reads as
// zeros (pieces()); whoever needs its memory anyway (a reduction, the step) asks
// with Fill::kZeros.
//
// Resident storage: one buffer of the layout's length, allocated once and never
// freed, the buckets views of it (for what must see one fixed address: the
// copy-engine collectives register it); release() zeroes it (keep_on_zero aside).
//
// A .grad that someone set to undefined after a view was installed means "no
// gradient": its segment is zeroed before the view goes back.
//
// Shards (ZeRO-2, optim/grad_reducer.h): when the optimizer state is sharded, the
// last micro-batch's reduce-scatter of a lazy bucket may write this rank's slice
// into a small tensor of its own (make_shard) and the whole bucket go at once
// (drop_bucket): from then until release() the bucket reads as that slice, the
// rest of it as absent (pieces(), slice()). No gradient may arrive in it meanwhile.
#pragma once

#include "optim/flat_adamw.h"
#include "optim/flat_layout.h"
#include "optim/optimizer_section.h"

#include <ATen/ATen.h>

#include <vector>

namespace fptrain::optim {

class FlatGradients {
 public:
  // `params`: the layout's parameters (leaves that require grad), in its order;
  // `options`: the gradients' dtype and device.
  FlatGradients(const FlatLayout& layout, std::vector<at::Tensor> params, at::TensorOptions options,
                GradStorage storage);
  ~FlatGradients();
  FlatGradients(const FlatGradients&) = delete;
  FlatGradients& operator=(const FlatGradients&) = delete;

  GradStorage storage() const { return storage_; }
  // Between steps: resident allocates the one buffer (zeros), lazy gives it up.
  void set_storage(GradStorage storage);
  // The one buffer [layout total] (resident storage only).
  const at::Tensor& buffer() const;

  // How a missing bucket is filled: for the backward (kept segments left for it
  // to overwrite) or with zeros throughout (nothing will write it).
  enum class Fill { kForBackward, kZeros };
  // Bucket b's storage [its size], undefined while lazy and not reached (or dropped).
  const at::Tensor& bucket(size_t b) const { return buckets_.at(b); }
  // The same, made to exist (not after drop_bucket: its shard holds what is left).
  const at::Tensor& acquire(size_t b, Fill fill = Fill::kZeros);
  // Flat elements [flat, flat + numel) of bucket b, from the bucket or its shard;
  // undefined where neither holds them (zeros), unless `need`: then acquired.
  at::Tensor slice(size_t b, int64_t flat, int64_t numel, bool need);

  // A new shard for slice `rank` of `shards` of bucket b (lazy storage; left for a
  // reduce-scatter to write), held until release().
  const at::Tensor& make_shard(size_t b, int64_t rank, int64_t shards);
  // Bucket b's shard, undefined when none.
  const at::Tensor& shard(size_t b) const { return shards_.at(b).grads; }
  // Frees bucket b now (lazy storage): its .grad views become undefined, which also
  // lets go of the storage they shared; its shard stays.
  void drop_bucket(size_t b);
  // Parameter i's view (its shape), undefined without storage; acquire_view makes it exist.
  at::Tensor view(size_t i) const;
  at::Tensor acquire_view(size_t i, Fill fill = Fill::kForBackward);
  // Whether parameter i's .grad is its view now.
  bool holds_view(size_t i) const;
  // Sets parameter i's .grad to its view (acquiring it), zeroing its segment
  // first if the view had been installed and someone reset .grad since.
  void install(size_t i, Fill fill);
  // Parameter i's .grad was reset (undefined): no gradient, its segment zeroed.
  void forget(size_t i);
  // Forgets that parameter i's view was installed (whoever sets its .grad undefined
  // now means nothing by it: the segment keeps its values).
  void forget_view(size_t i) { views_.at(i) = at::Tensor(); }

  // After a step: lazy frees every bucket and shard (.grad views undefined); resident
  // zeroes the buffer except the kept segments.
  void release();
  // Segments the backward overwrites (true per parameter): not zeroed.
  void keep_on_zero(const std::vector<bool>& keep);

  // The buckets as pieces of one buffer, in order (undefined: zeros); a dropped
  // bucket as its shard between two absent pieces.
  std::vector<flat::GradPiece> pieces() const;
  // A copy of the whole gradient [layout total] (zeros where no storage), for tests and benchmarks.
  at::Tensor gathered() const;
  int64_t bytes() const;            // all buckets, as held from the backward to the step
  int64_t largest_bucket_bytes() const;  // the largest bucket, as allocated
  int64_t allocated_bytes() const;  // what is allocated now (buckets and shards)

  // Called by the hook before parameter i's AccumulateGrad (public for the hook).
  void before_accumulate(size_t i);

 private:
  void zero_except_kept(const at::Tensor& storage, int64_t offset);
  void allocate_resident();
  void drop_views(size_t first, size_t end);

  const FlatLayout& layout_;
  std::vector<at::Tensor> params_;
  at::TensorOptions options_;
  GradStorage storage_;
  at::Tensor buffer_;                  // resident only
  std::vector<at::Tensor> buckets_;    // per bucket; undefined: none
  std::vector<flat::GradPiece> shards_;  // per bucket: its shard and where it lies in the whole; grads undefined: none
  std::vector<at::Tensor> views_;      // the view installed as each .grad, undefined when none
  std::vector<unsigned> hooks_;        // each parameter's hook position
  std::vector<std::pair<int64_t, int64_t>> zero_ranges_;  // [begin, end) of the whole that zeroing clears
  std::vector<bool> bucket_keeps_;     // a bucket holds kept segments
};

}  // namespace fptrain::optim
