// Reduce-scatter and all-gather between the GPUs of one node that move their
// bytes with the copy engines, not with kernels.
//
// NCCL's collectives are kernels: beside the backward and the optimizer they
// take SMs from the GEMMs and attention they overlap (on two H200s, 24 SMs for a
// quarter of a 7B step, slowing the compute beside them 13-30%). Between GPUs of
// one node a collective on a buffer whose layout is the same on every rank is
// only copies, which the copy engines do without any SM:
//   all-gather      each rank copies every peer's slice from the peer's buffer
//                   into the same place of its own;
//   reduce-scatter  each rank copies its slice from every peer's buffer into a
//                   scratch buffer, then adds them into its own slice (one short
//                   element-wise kernel; summed in fp32, rounded once);
//   pushed          (buffers that are not shared: gradient buckets allocated step
//   reduce-scatter  by step, so that a rank can free the slices it does not own)
//                   each rank copies every peer's slice of its buffer into that
//                   peer's receive window, then adds what its own window received
//                   into its slice as above. The window has kWindowSlots slots used
//                   in turn; a sender waits until the owner has added the slot's
//                   previous contents.
// Buffers are shared once (share(): CUDA IPC handles exchanged through the
// store). The order between ranks is kept by 32-bit flags in each rank's device
// memory that peers write and the streams wait on (cuStreamWriteValue32 /
// cuStreamWaitValue32: no SM, no host): per collective and source rank a
// "ready" flag (the source's input is complete: it may be read; pushed: it has
// arrived) and a "done" flag (the source has finished reading: the buffer may
// change again; pushed: the owner has added the window slot's contents). A
// collective's Pending completes when this rank's output is written and every
// peer has finished reading this rank's input, as an NCCL collective does.
//
// Everything runs on one side stream in call order; every rank must call the
// same collectives in the same order (as with NCCL). A dead peer leaves the
// stream waiting: the liveness monitor ends the process (distributed.timeout).
// Built only with FPTRAIN_CUDA.
#pragma once

#include "distributed/communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fptrain::distributed {

class CopyEngineTransfers {
 public:
  // Collective over the store. Throws (naming the reason) when a rank cannot
  // take part: another node, no peer access, no driver entry points.
  CopyEngineTransfers(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, int device_index);
  ~CopyEngineTransfers();
  CopyEngineTransfers(const CopyEngineTransfers&) = delete;
  CopyEngineTransfers& operator=(const CopyEngineTransfers&) = delete;

  // Collective: makes `buffer` (contiguous, on this rank's device, the same
  // size on every rank) readable by every peer and opens every peer's. Throws
  // if any step fails on this rank.
  void share(const at::Tensor& buffer);
  // Whether `t` lies entirely inside a shared buffer.
  bool covers(const at::Tensor& t) const;

  // Collective: opens this rank's receive window for pushed reduce-scatters of
  // buffers of up to `largest_bytes` and maps every peer's. Throws if any step
  // fails on this rank.
  void open_receive_window(int64_t largest_bytes);
  // Whether reduce_scatter_pushed() takes `full`: the window is open and holds
  // full's slices, full is contiguous on this rank's device.
  bool takes_pushed(const at::Tensor& full) const;

  // As Communicator's, for `full` inside a shared buffer (out / shard may be
  // full's own chunk `rank`).
  Pending reduce_scatter_sum(const at::Tensor& full, const at::Tensor& out);
  Pending all_gather(const at::Tensor& shard, const at::Tensor& full);
  // As Communicator's reduce-scatter, for any `full` takes_pushed() takes; `full`
  // may be freed at once (its reads are recorded with the caching allocator: the
  // Pending says input_may_be_freed()), but not changed before the Pending
  // completes; out may be full's own chunk `rank`.
  Pending reduce_scatter_pushed(const at::Tensor& full, const at::Tensor& out);

 private:
  struct Shared {
    uintptr_t begin = 0, end = 0;       // this rank's buffer, bytes
    std::vector<uintptr_t> peer_begin;  // each rank's copy of it, mapped here (own: begin)
  };
  enum Flag { kReady = 0, kDone = 1 };

  const Shared& shared_of(const at::Tensor& t) const;
  uintptr_t peer_address(int peer, const at::Tensor& t) const;  // t's place in peer's buffer
  // The flag slot of a collective on `full` (the same on every rank: slots are
  // numbered in first-use order) and its next sequence number.
  std::pair<int64_t, uint32_t> next_use(char kind, const at::Tensor& full);
  uintptr_t flag_address(int owner, int64_t slot, Flag flag, int source) const;
  // On the side stream: tell every peer `flag` of `slot` is at `seq`, then wait
  // until every peer has told this rank the same.
  void signal_and_wait(int64_t slot, Flag flag, uint32_t seq);
  void signal_peers(int64_t slot, Flag flag, uint32_t seq);
  void wait_for_peers(int64_t slot, Flag flag, uint32_t seq);
  // out = mine + the world - 1 slices at `theirs` (fp32, rounded once), on the side stream.
  void add_slices(const at::Tensor& mine, const at::Tensor& theirs, const at::Tensor& out);
  // Where `source`'s slice lies in window slot `w` of `owner` (as mapped here).
  uintptr_t window_address(int owner, int64_t w, int source) const;
  void start_after_current_stream();
  Pending finish();
  std::vector<uintptr_t> exchange(const std::string& key, const void* base);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_;
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
  void* flags_ = nullptr;               // [slots][2 flags][world sources] uint32, this rank's
  std::vector<uintptr_t> peer_flags_;   // every rank's flags, mapped here
  std::vector<void*> opened_;           // peer allocations opened here (closed at the end)
  std::vector<Shared> shared_;
  std::map<std::pair<char, uintptr_t>, int64_t> slot_of_;  // (kind, full's address) → slot
  std::vector<uint32_t> seq_;
  at::Tensor scratch_;  // the peers' slices of a reduce-scatter
  void* window_ = nullptr;               // [kWindowSlots][world - 1 sources][window_slice_ bytes], this rank's
  std::vector<uintptr_t> peer_window_;   // every rank's window, mapped here
  int64_t window_slice_ = 0;             // bytes a source's slice may take
  int64_t pushes_ = 0;                   // pushed reduce-scatters so far
  int64_t exchanges_ = 0;
};

}  // namespace fptrain::distributed
