#include "trainer/device_batch.h"

#include <stdexcept>
#include <string>

namespace fptrain::trainer {
namespace {

at::Tensor host_tensor(const std::vector<int32_t>& v, at::ScalarType dtype, bool pinned) {
  at::Tensor t = at::from_blob(const_cast<int32_t*>(v.data()), {static_cast<int64_t>(v.size())}, at::kInt);
  at::Tensor out = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(dtype).pinned_memory(pinned));
  out.copy_(t);
  return out;
}

}  // namespace

DeviceBatch to_device(const data::PackedBatch& b, const at::Device& device) {
  const int64_t T = static_cast<int64_t>(b.input_ids.size());
  if (T == 0) throw std::invalid_argument("micro-batch has no tokens");
  if (static_cast<int64_t>(b.labels.size()) != T || static_cast<int64_t>(b.position_ids.size()) != T)
    throw std::invalid_argument("micro-batch: input_ids, labels and position_ids differ in length (" +
                                std::to_string(T) + ", " + std::to_string(b.labels.size()) + ", " +
                                std::to_string(b.position_ids.size()) + ")");
  const bool cuda = device.is_cuda();
  DeviceBatch d;
  at::Tensor ids = host_tensor(b.input_ids, at::kLong, cuda);
  at::Tensor pos = host_tensor(b.position_ids, at::kLong, cuda);
  at::Tensor labels = host_tensor(b.labels, at::kLong, cuda);
  at::Tensor cu = host_tensor(b.cu_seqlens, at::kInt, cuda);
  d.input.input_ids = ids.to(device, /*non_blocking=*/true);
  d.input.position_ids = pos.to(device, true);
  d.input.cu_seqlens = cu.to(device, true);
  d.input.cu_seqlens_cpu = cu;
  d.input.max_seqlen = b.max_seqlen;
  d.labels = labels.to(device, true);
  d.labels_host = labels;
  d.num_examples = b.num_examples;
  d.num_tokens = b.num_tokens;
  d.num_padding = b.num_padding_tokens;
  d.num_supervised = b.num_supervised;
  return d;
}

}  // namespace fptrain::trainer
