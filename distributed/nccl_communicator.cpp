#include "distributed/nccl_communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <stdexcept>

namespace fptrain::distributed {

bool nccl_available() { return true; }

NcclCommunicator::NcclCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                   int device_index, std::chrono::milliseconds timeout, Transfers transfers)
    : rank_(rank), world_(world_size), device_index_(device_index), requested_(transfers) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl", store), rank,
                                                       world_size, options);
  group_->setBoundDeviceId(device);
  // Connect now (one element), so a bad launch fails at start-up.
  at::Tensor probe = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(device));
  all_reduce_sum(probe).wait();
  if (probe.item<float>() != static_cast<float>(world_size))
    throw std::runtime_error("NCCL start-up check failed: an all-reduce of ones over " + std::to_string(world_size) +
                             " ranks gave " + std::to_string(probe.item<float>()));
  if (transfers == Transfers::kNccl) return;
  std::string failure;
  try {
    copies_ = std::make_unique<CopyEngineTransfers>(c10::make_intrusive<c10d::PrefixStore>("transfers", store), rank,
                                                    world_size, device_index);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!all_succeeded(failure.empty())) {
    give_up_copy_engines(failure.empty() ? "another rank cannot use them" : failure);
    return;
  }
  transfers_note_ = "nccl; reduce-scatters and all-gathers of shared buffers by copy engines";
}

bool NcclCommunicator::all_succeeded(bool mine) {
  at::Tensor failed = at::full({1}, mine ? 0 : 1,
                               at::TensorOptions().dtype(at::kInt).device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index_)));
  all_reduce_max(failed).wait();
  return failed.item<int>() == 0;
}

void NcclCommunicator::give_up_copy_engines(const std::string& why) {
  copies_.reset();
  if (requested_ == Transfers::kCopyEngine)
    throw std::runtime_error("rank " + std::to_string(rank_) + ": distributed.transfers is copy_engine, but: " + why);
  transfers_note_ = "nccl (copy engines not used: " + why + ")";
}

template <typename Fn>
bool NcclCommunicator::all_set_up(Fn&& collective, const std::string& other_rank_failed) {
  if (!copies_) return false;
  std::string failure;
  try {
    collective();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (all_succeeded(failure.empty())) return true;
  give_up_copy_engines(failure.empty() ? other_rank_failed : failure);
  return false;
}

bool NcclCommunicator::share_buffer(const at::Tensor& buffer) {
  return all_set_up([&] { copies_->share(buffer); }, "another rank cannot share its buffer");
}

bool NcclCommunicator::take_reduce_scatters(int64_t largest_bytes) {
  const bool taken = all_set_up([&] { copies_->open_receive_window(largest_bytes); },
                                "another rank cannot open its receive window");
  if (taken) transfers_note_ += "; reduce-scatters of step-by-step buffers pushed by copy engines";
  return taken;
}

NcclCommunicator::~NcclCommunicator() {
  if (group_) {
    try {
      group_->shutdown();
    } catch (...) {
    }
  }
}

Pending NcclCommunicator::all_reduce_sum(at::Tensor t) {
  std::vector<at::Tensor> ts{std::move(t)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return Pending(group_->allreduce(ts, o));
}

Pending NcclCommunicator::all_reduce_max(at::Tensor t) {
  std::vector<at::Tensor> ts{std::move(t)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  return Pending(group_->allreduce(ts, o));
}

Pending NcclCommunicator::reduce_scatter_sum(at::Tensor full, at::Tensor out) {
  if (copies_ && copies_->covers(full)) return copies_->reduce_scatter_sum(full, out);
  if (copies_ && copies_->takes_pushed(full)) return copies_->reduce_scatter_pushed(full, out);
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return Pending(group_->_reduce_scatter_base(out, full, o));
}

Pending NcclCommunicator::all_gather(at::Tensor shard, at::Tensor full) {
  if (copies_ && copies_->covers(full)) return copies_->all_gather(shard, full);
  return Pending(group_->_allgather_base(full, shard, c10d::AllgatherOptions()));
}

Pending NcclCommunicator::broadcast(at::Tensor t, int root) {
  std::vector<at::Tensor> ts{std::move(t)};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  return Pending(group_->broadcast(ts, o));
}

}  // namespace fptrain::distributed
