#include "distributed/copy_engine_transfers.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

namespace fptrain::distributed {
namespace {

constexpr int64_t kSlots = 8192;  // distinct collectives (kind, buffer place) a run may use
// Pushed reduce-scatters in flight per owner: one slot filling while the owner adds
// the other. Their flags follow the kSlots collectives'.
constexpr int64_t kWindowSlots = 2;
constexpr int64_t kWindowAlignment = 256;  // each slice starts on a multiple (vector loads of the add)

using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

struct Driver {
  WriteValueFn write_value = nullptr;
  WaitValueFn wait_value = nullptr;
  AddressRangeFn address_range = nullptr;
};

// The driver functions through the runtime (no link to libcuda: the binary
// still starts on machines without a GPU driver).
const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    auto get = [](const char* name, void** fn) {
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
          found != cudaDriverEntryPointSuccess || !*fn)
        throw std::runtime_error(std::string("the CUDA driver has no ") + name);
    };
    get("cuStreamWriteValue32", reinterpret_cast<void**>(&r.write_value));
    get("cuStreamWaitValue32", reinterpret_cast<void**>(&r.wait_value));
    get("cuMemGetAddressRange", reinterpret_cast<void**>(&r.address_range));
    return r;
  }();
  return d;
}

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the caller may fall back to NCCL
    throw std::runtime_error(what + ": " + cudaGetErrorString(e));
  }
}

void check(CUresult r, const std::string& what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(what + ": CUDA driver error " + std::to_string(static_cast<int>(r)));
}

// Which machine this process runs on (host name and boot), to tell one node from several.
std::string machine_id() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + "/" + boot;
}

std::string bytes_to_string(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

CopyEngineTransfers::CopyEngineTransfers(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                                         int device_index)
    : store_(std::move(store)),
      rank_(rank),
      world_(world_size),
      device_(static_cast<c10::DeviceIndex>(device_index)),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_)) {
  // One node: every rank's machine is rank 0's.
  const std::string here = machine_id();
  store_->set("ce/machine/" + std::to_string(rank_), std::vector<uint8_t>(here.begin(), here.end()));
  for (int r = 0; r < world_; ++r) {
    const std::string there = bytes_to_string(store_->get("ce/machine/" + std::to_string(r)));
    if (there != here)
      throw std::runtime_error("rank " + std::to_string(r) + " runs on another machine (" + there + ", here " + here +
                               ")");
  }
  c10::cuda::CUDAGuard guard(device_);
  std::string failure;
  try {
    (void)driver();
    const size_t bytes =
        static_cast<size_t>(kSlots + kWindowSlots) * 2 * static_cast<size_t>(world_) * sizeof(uint32_t);
    check(cudaMalloc(&flags_, bytes), "cudaMalloc of the transfer flags");
    check(cudaMemset(flags_, 0, bytes), "cudaMemset of the transfer flags");
    check(cudaDeviceSynchronize(), "zeroing the transfer flags");
  } catch (const std::exception& e) {
    failure = e.what();
  }
  peer_flags_ = exchange("flags", failure.empty() ? flags_ : nullptr);
  seq_.assign(kSlots, 0);
}

CopyEngineTransfers::~CopyEngineTransfers() {
  // Never wait here: after a failure the side stream may wait for a peer that
  // will not come. Peer memory is unmapped only when nothing is queued that may
  // still read it; flags_ stays allocated (a peer's last "done" may still be on
  // its way). The process's end releases all of it.
  c10::cuda::CUDAGuard guard(device_);
  if (cudaStreamQuery(stream_.stream()) == cudaSuccess) {
    for (void* p : opened_) (void)cudaIpcCloseMemHandle(p);
    // Nothing of ours is queued, so every push into the window was waited for: a run
    // that gives the copy engines up at start-up gets its memory back.
    if (window_) (void)cudaFree(window_);
  }
  (void)cudaGetLastError();
}

// Every rank publishes the IPC handle of the allocation holding `base` (null:
// this rank failed before) and opens every peer's; returns each rank's `base`
// as mapped here. Every rank posts even when it failed, so no one waits for it.
std::vector<uintptr_t> CopyEngineTransfers::exchange(const std::string& what, const void* base) {
  struct Payload {
    cudaIpcMemHandle_t handle;
    uint64_t offset;  // base - the allocation's start
    uint8_t ok;
  } mine{};
  std::string failure = base ? "" : "a CUDA call failed";
  if (base) {
    try {
      CUdeviceptr start = 0;
      size_t size = 0;
      check(driver().address_range(&start, &size, reinterpret_cast<CUdeviceptr>(base)), "cuMemGetAddressRange");
      check(cudaIpcGetMemHandle(&mine.handle, reinterpret_cast<void*>(start)),
            "cudaIpcGetMemHandle (is PYTORCH_CUDA_ALLOC_CONF's expandable_segments on?)");
      mine.offset = reinterpret_cast<uintptr_t>(base) - static_cast<uintptr_t>(start);
      mine.ok = 1;
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  const std::string key = "ce/" + std::to_string(exchanges_++) + "-" + what + "/";
  const auto* raw = reinterpret_cast<const uint8_t*>(&mine);
  store_->set(key + std::to_string(rank_), std::vector<uint8_t>(raw, raw + sizeof mine));
  std::vector<Payload> all(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    const auto got = store_->get(key + std::to_string(r));
    if (got.size() != sizeof(Payload)) throw std::runtime_error("rank " + std::to_string(r) + " posted a bad handle");
    std::memcpy(&all[static_cast<size_t>(r)], got.data(), sizeof(Payload));
  }
  if (!failure.empty()) throw std::runtime_error("rank " + std::to_string(rank_) + " cannot share its " + what + ": " + failure);
  for (int r = 0; r < world_; ++r)
    if (!all[static_cast<size_t>(r)].ok)
      throw std::runtime_error("rank " + std::to_string(r) + " cannot share its " + what);
  std::vector<uintptr_t> mapped(static_cast<size_t>(world_));
  c10::cuda::CUDAGuard guard(device_);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) {
      mapped[static_cast<size_t>(r)] = reinterpret_cast<uintptr_t>(base);
      continue;
    }
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, all[static_cast<size_t>(r)].handle, cudaIpcMemLazyEnablePeerAccess),
          "rank " + std::to_string(rank_) + ": opening rank " + std::to_string(r) + "'s " + what +
              " (peer access between the GPUs?)");
    opened_.push_back(p);
    mapped[static_cast<size_t>(r)] = reinterpret_cast<uintptr_t>(p) + all[static_cast<size_t>(r)].offset;
  }
  return mapped;
}

void CopyEngineTransfers::share(const at::Tensor& buffer) {
  if (!buffer.is_cuda() || buffer.device().index() != device_ || !buffer.is_contiguous())
    throw std::invalid_argument("copy-engine transfers share contiguous buffers on this rank's GPU only");
  Shared s;
  s.begin = reinterpret_cast<uintptr_t>(buffer.data_ptr());
  s.end = s.begin + buffer.nbytes();
  s.peer_begin = exchange("buffer", buffer.data_ptr());
  shared_.push_back(std::move(s));
}

bool CopyEngineTransfers::covers(const at::Tensor& t) const {
  if (!t.is_cuda() || !t.is_contiguous()) return false;
  const auto b = reinterpret_cast<uintptr_t>(t.data_ptr());
  for (const Shared& s : shared_)
    if (b >= s.begin && b + t.nbytes() <= s.end) return true;
  return false;
}

const CopyEngineTransfers::Shared& CopyEngineTransfers::shared_of(const at::Tensor& t) const {
  const auto b = reinterpret_cast<uintptr_t>(t.data_ptr());
  for (const Shared& s : shared_)
    if (b >= s.begin && b + t.nbytes() <= s.end) return s;
  throw std::logic_error("copy-engine transfer on a buffer that was not shared");
}

uintptr_t CopyEngineTransfers::peer_address(int peer, const at::Tensor& t) const {
  const Shared& s = shared_of(t);
  return s.peer_begin[static_cast<size_t>(peer)] + (reinterpret_cast<uintptr_t>(t.data_ptr()) - s.begin);
}

std::pair<int64_t, uint32_t> CopyEngineTransfers::next_use(char kind, const at::Tensor& full) {
  const auto key = std::make_pair(kind, reinterpret_cast<uintptr_t>(full.data_ptr()));
  auto it = slot_of_.find(key);
  if (it == slot_of_.end()) {
    const auto slot = static_cast<int64_t>(slot_of_.size());
    if (slot >= kSlots) throw std::runtime_error("copy-engine transfers: more than 8192 distinct collectives");
    it = slot_of_.emplace(key, slot).first;
  }
  return {it->second, ++seq_[static_cast<size_t>(it->second)]};
}

uintptr_t CopyEngineTransfers::flag_address(int owner, int64_t slot, Flag flag, int source) const {
  const auto index = (slot * 2 + flag) * world_ + source;
  return peer_flags_[static_cast<size_t>(owner)] + static_cast<uintptr_t>(index) * sizeof(uint32_t);
}

void CopyEngineTransfers::signal_peers(int64_t slot, Flag flag, uint32_t seq) {
  const auto s = reinterpret_cast<CUstream>(stream_.stream());
  // The write comes after the side stream's earlier work (stream order) and,
  // by default, after a memory fence: a peer that sees it sees our data.
  for (int p = 0; p < world_; ++p)
    if (p != rank_)
      check(driver().write_value(s, flag_address(p, slot, flag, rank_), seq, CU_STREAM_WRITE_VALUE_DEFAULT),
            "cuStreamWriteValue32");
}

void CopyEngineTransfers::wait_for_peers(int64_t slot, Flag flag, uint32_t seq) {
  const auto s = reinterpret_cast<CUstream>(stream_.stream());
  for (int p = 0; p < world_; ++p)
    if (p != rank_)
      check(driver().wait_value(s, flag_address(rank_, slot, flag, p), seq, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue32");
}

void CopyEngineTransfers::signal_and_wait(int64_t slot, Flag flag, uint32_t seq) {
  signal_peers(slot, flag, seq);
  wait_for_peers(slot, flag, seq);
}

void CopyEngineTransfers::start_after_current_stream() {
  at::cuda::CUDAEvent input_ready;
  input_ready.record(c10::cuda::getCurrentCUDAStream(device_));
  input_ready.block(stream_);
}

Pending CopyEngineTransfers::finish() {
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(stream_);
  const c10::DeviceIndex device = device_;
  return Pending([done, device] { done->block(c10::cuda::getCurrentCUDAStream(device)); });
}

Pending CopyEngineTransfers::reduce_scatter_sum(const at::Tensor& full, const at::Tensor& out) {
  const int64_t n = out.numel();
  if (full.numel() != n * world_ || full.scalar_type() != out.scalar_type() || !out.is_contiguous())
    throw std::invalid_argument("reduce_scatter_sum: full must hold world × out's elements, of out's dtype");
  const auto bytes = static_cast<size_t>(n) * full.element_size();
  const auto [slot, seq] = next_use('r', full);
  c10::cuda::CUDAGuard device_guard(device_);
  start_after_current_stream();
  signal_and_wait(slot, kReady, seq);  // every rank's gradients of this bucket are complete
  c10::cuda::CUDAStreamGuard stream_guard(stream_);
  if (!scratch_.defined() || scratch_.scalar_type() != full.scalar_type() || scratch_.numel() < n * (world_ - 1))
    scratch_ = at::empty({n * (world_ - 1)}, full.options());
  int64_t piece = 0;
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    check(cudaMemcpyAsync(static_cast<char*>(scratch_.data_ptr()) + static_cast<size_t>(piece++) * bytes,
                          reinterpret_cast<const void*>(peer_address(p, full) + static_cast<size_t>(rank_) * bytes),
                          bytes, cudaMemcpyDeviceToDevice, stream_.stream()),
          "cudaMemcpyAsync from rank " + std::to_string(p));
  }
  add_slices(full.narrow(0, rank_ * n, n), scratch_.narrow(0, 0, n * (world_ - 1)).view({world_ - 1, n}), out);
  signal_and_wait(slot, kDone, seq);  // every peer has read its slice of ours
  return finish();
}

void CopyEngineTransfers::add_slices(const at::Tensor& mine, const at::Tensor& theirs, const at::Tensor& out) {
  if (world_ == 2) {
    at::add_out(const_cast<at::Tensor&>(out), mine, theirs[0]);  // one rounding of a + b, as NCCL's
  } else {
    out.copy_(mine.to(at::kFloat).add_(theirs.to(at::kFloat).sum(0)));  // fp32 sum, rounded once
  }
}

void CopyEngineTransfers::open_receive_window(int64_t largest_bytes) {
  if (window_) throw std::logic_error("copy-engine transfers: the receive window is open already");
  const int64_t slice = (largest_bytes / world_ + kWindowAlignment - 1) / kWindowAlignment * kWindowAlignment;
  const auto bytes = static_cast<size_t>(kWindowSlots * (world_ - 1) * slice);
  c10::cuda::CUDAGuard guard(device_);
  std::string failure;
  try {
    // Its own allocation, outside the caching allocator: peers map it once, for the run.
    check(cudaMalloc(&window_, bytes), "cudaMalloc of the " + std::to_string(bytes) + "-byte receive window");
  } catch (const std::exception& e) {
    window_ = nullptr;
    failure = e.what();
  }
  try {
    peer_window_ = exchange("window", window_);
  } catch (const std::exception& e) {
    throw std::runtime_error(failure.empty() ? e.what() : failure);
  }
  window_slice_ = slice;
}

bool CopyEngineTransfers::takes_pushed(const at::Tensor& full) const {
  return window_ && full.is_cuda() && full.device().index() == device_ && full.is_contiguous() &&
         full.numel() % world_ == 0 && static_cast<int64_t>(full.nbytes()) / world_ <= window_slice_;
}

uintptr_t CopyEngineTransfers::window_address(int owner, int64_t w, int source) const {
  const int index = source < owner ? source : source - 1;  // the owner receives from the others only
  return peer_window_[static_cast<size_t>(owner)] +
         static_cast<uintptr_t>((w * (world_ - 1) + index) * window_slice_);
}

Pending CopyEngineTransfers::reduce_scatter_pushed(const at::Tensor& full, const at::Tensor& out) {
  const int64_t n = out.numel();
  if (full.numel() != n * world_ || full.scalar_type() != out.scalar_type() || !out.is_contiguous() ||
      !takes_pushed(full))
    throw std::invalid_argument("reduce_scatter_pushed: full must hold world × out's elements, of out's dtype, "
                                "and fit the receive window");
  const auto bytes = static_cast<size_t>(n) * full.element_size();
  const int64_t w = pushes_ % kWindowSlots;
  const auto seq = static_cast<uint32_t>(pushes_ / kWindowSlots + 1);
  const int64_t slot = kSlots + w;
  ++pushes_;
  c10::cuda::CUDAGuard device_guard(device_);
  start_after_current_stream();
  // Every owner has added what this rank pushed into slot w the time before.
  if (seq > 1) wait_for_peers(slot, kDone, seq - 1);
  const char* base = static_cast<const char*>(full.data_ptr());
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    check(cudaMemcpyAsync(reinterpret_cast<void*>(window_address(p, w, rank_)), base + static_cast<size_t>(p) * bytes,
                          bytes, cudaMemcpyDeviceToDevice, stream_.stream()),
          "cudaMemcpyAsync to rank " + std::to_string(p));
  }
  signal_and_wait(slot, kReady, seq);  // every slice of ours has arrived, and every peer's in our window
  c10::cuda::CUDAStreamGuard stream_guard(stream_);
  const at::Tensor received =
      at::from_blob(reinterpret_cast<char*>(window_) + w * (world_ - 1) * window_slice_, {world_ - 1, n},
                    {window_slice_ / static_cast<int64_t>(full.element_size()), 1}, full.options());
  add_slices(full.narrow(0, rank_ * n, n), received, out);
  signal_peers(slot, kDone, seq);  // slot w of our window may be filled again
  // `full` may go as soon as the caller lets it (a released bucket, in the middle of
  // the backward): the allocator hands its memory out again only after the side
  // stream's reads queued so far.
  c10::cuda::CUDACachingAllocator::recordStream(full.storage().data_ptr(), stream_);
  auto reads_done = std::make_shared<at::cuda::CUDAEvent>();
  reads_done->record(stream_);
  return finish().input_recorded([reads_done] { reads_done->synchronize(); });
}

Pending CopyEngineTransfers::all_gather(const at::Tensor& shard, const at::Tensor& full) {
  const int64_t n = shard.numel();
  if (full.numel() != n * world_ || full.scalar_type() != shard.scalar_type())
    throw std::invalid_argument("all_gather: full must hold world × shard's elements, of shard's dtype");
  const auto bytes = static_cast<size_t>(n) * full.element_size();
  const auto [slot, seq] = next_use('g', full);
  c10::cuda::CUDAGuard device_guard(device_);
  start_after_current_stream();
  const at::Tensor mine = full.narrow(0, rank_ * n, n);
  if (mine.data_ptr() != shard.data_ptr()) {
    c10::cuda::CUDAStreamGuard stream_guard(stream_);
    mine.copy_(shard);
  }
  signal_and_wait(slot, kReady, seq);  // every rank's slice is in place
  char* base = static_cast<char*>(full.data_ptr());
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    check(cudaMemcpyAsync(base + static_cast<size_t>(p) * bytes,
                          reinterpret_cast<const void*>(peer_address(p, full) + static_cast<size_t>(p) * bytes), bytes,
                          cudaMemcpyDeviceToDevice, stream_.stream()),
          "cudaMemcpyAsync from rank " + std::to_string(p));
  }
  signal_and_wait(slot, kDone, seq);  // every peer has read our slice
  return finish();
}

}  // namespace fptrain::distributed
