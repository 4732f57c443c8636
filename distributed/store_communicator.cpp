#include "distributed/store_communicator.h"
#include "distributed/store_errors.h"

#include <cstring>
#include <stdexcept>

namespace fptrain::distributed {
namespace {

std::vector<uint8_t> to_bytes(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  std::vector<uint8_t> bytes(c.nbytes());
  if (!bytes.empty()) std::memcpy(bytes.data(), c.data_ptr(), bytes.size());
  return bytes;
}

at::Tensor from_bytes(const std::vector<uint8_t>& bytes, const at::Tensor& like) {
  at::Tensor t = at::empty(like.sizes(), like.options().device(at::kCPU));
  if (bytes.size() != t.nbytes())
    throw std::runtime_error("store collective: received " + std::to_string(bytes.size()) + " bytes, expected " +
                             std::to_string(t.nbytes()) + " (the ranks disagree on a tensor's size)");
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

StoreCommunicator::StoreCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                                     std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), world_(world_size), timeout_(timeout) {}

std::string StoreCommunicator::key(int64_t seq, int src, int dst) const {
  std::string k = "coll/" + std::to_string(seq) + "/" + std::to_string(src);
  if (dst >= 0) k += ">" + std::to_string(dst);
  return k;
}

std::vector<uint8_t> StoreCommunicator::receive(const std::string& k, int src, const char* what, int64_t seq) {
  try {
    store_->wait({k}, timeout_);
    return store_->get(k);
  } catch (const std::exception& e) {
    if (store_connection_lost(e)) throw;  // with_store says it
    throw std::runtime_error("rank " + std::to_string(rank_) + ": no data from rank " + std::to_string(src) + " in " +
                             what + " #" + std::to_string(seq) + " within " +
                             std::to_string(timeout_.count() / 1000) + " s (distributed.timeout): rank " +
                             std::to_string(src) + " died or hangs (" + first_line(e) + ")");
  }
}

// Keys read by several ranks are deleted by the last reader.
void StoreCommunicator::done_reading(int64_t seq, const std::vector<std::string>& keys, int readers) {
  const std::string counter = "coll/" + std::to_string(seq) + "/read";
  if (store_->add(counter, 1) == readers) {
    for (const auto& k : keys) store_->deleteKey(k);
    store_->deleteKey(counter);
  }
}

void StoreCommunicator::all_reduce(at::Tensor t, Reduce op, const char* what) {
  const int64_t seq = seq_++;
  store_->set(key(seq, rank_), to_bytes(t));
  at::Tensor acc;
  std::vector<std::string> keys;
  for (int src = 0; src < world_; ++src) {
    keys.push_back(key(seq, src));
    at::Tensor x = from_bytes(receive(keys.back(), src, what, seq), t);
    if (!acc.defined())
      acc = x;
    else
      acc = op == Reduce::kSum ? acc + x : at::maximum(acc, x);
  }
  done_reading(seq, keys, world_);
  t.copy_(acc);
}

Pending StoreCommunicator::all_reduce_sum(at::Tensor t) {
  with_store(rank_, "an all-reduce", [&] { all_reduce(std::move(t), Reduce::kSum, "all-reduce"); });
  return {};
}

Pending StoreCommunicator::all_reduce_max(at::Tensor t) {
  with_store(rank_, "an all-reduce", [&] { all_reduce(std::move(t), Reduce::kMax, "all-reduce (max)"); });
  return {};
}

Pending StoreCommunicator::reduce_scatter_sum(at::Tensor full, at::Tensor out) {
  with_store(rank_, "a reduce-scatter", [&] { reduce_scatter(full, out); });
  return {};
}

void StoreCommunicator::reduce_scatter(const at::Tensor& full, const at::Tensor& out) {
  const int64_t n = out.numel();
  TORCH_CHECK(full.numel() == n * world_, "reduce_scatter_sum: full must hold world_size x out elements");
  const int64_t seq = seq_++;
  for (int dst = 0; dst < world_; ++dst)
    if (dst != rank_) store_->set(key(seq, rank_, dst), to_bytes(full.narrow(0, dst * n, n)));
  const at::Tensor own = full.narrow(0, rank_ * n, n).to(at::kCPU).clone();
  at::Tensor acc;
  for (int src = 0; src < world_; ++src) {
    at::Tensor x;
    if (src == rank_) {
      x = own;
    } else {
      const std::string k = key(seq, src, rank_);
      x = from_bytes(receive(k, src, "reduce-scatter", seq), out);
      store_->deleteKey(k);  // one reader
    }
    acc = acc.defined() ? acc + x : x;
  }
  out.copy_(acc);

}

Pending StoreCommunicator::all_gather(at::Tensor shard, at::Tensor full) {
  with_store(rank_, "an all-gather", [&] { gather(shard, full); });
  return {};
}

void StoreCommunicator::gather(const at::Tensor& shard, const at::Tensor& full) {
  const int64_t n = shard.numel();
  TORCH_CHECK(full.numel() == n * world_, "all_gather: full must hold world_size x shard elements");
  const int64_t seq = seq_++;
  store_->set(key(seq, rank_), to_bytes(shard));
  std::vector<std::string> keys;
  for (int src = 0; src < world_; ++src) {
    keys.push_back(key(seq, src));
    if (src == rank_) continue;  // full's own chunk already holds it (or is copied below)
    full.narrow(0, src * n, n).copy_(from_bytes(receive(keys.back(), src, "all-gather", seq), shard));
  }
  at::Tensor mine = full.narrow(0, rank_ * n, n);
  if (mine.data_ptr() != shard.data_ptr()) mine.copy_(shard);
  done_reading(seq, keys, world_);

}

Pending StoreCommunicator::broadcast(at::Tensor t, int root) {
  with_store(rank_, "a broadcast", [&] { broadcast_from(t, root); });
  return {};
}

void StoreCommunicator::broadcast_from(const at::Tensor& t, int root) {
  const int64_t seq = seq_++;
  const std::string k = key(seq, root);
  if (rank_ == root) {
    store_->set(k, to_bytes(t));
  } else {
    t.copy_(from_bytes(receive(k, root, "broadcast", seq), t));
  }
  done_reading(seq, {k}, world_);

}

}  // namespace fptrain::distributed
