// Reference attention: for each packed sequence, softmax(q k^T * scale + mask) v
// with an L x L mask for that sequence only (never a T x T one). It follows
// Hugging Face's eager attention step by step (matmul, then scale, softmax in
// fp32, cast back, matmul with v) so that results agree to rounding, and it is
// differentiable through ATen autograd.
#include "attention/reference_attention.h"

#include <limits>
#include <vector>

namespace fptrain::attention {
namespace {

// [L, Hkv, D] -> [L, Hkv * n_rep, D]: query head h reads key/value head h / n_rep.
at::Tensor expand_kv_heads(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t L = x.size(0), hkv = x.size(1), d = x.size(2);
  return x.unsqueeze(2).expand({L, hkv, n_rep, d}).reshape({L, hkv * n_rep, d});
}

// [L, L] bool, true where query i may attend key j: j <= i, and i - j < window
// when a window is set.
at::Tensor allowed_keys(int64_t L, int64_t window, const at::Device& device) {
  const at::Tensor pos = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor i = pos.unsqueeze(1), j = pos.unsqueeze(0);
  at::Tensor allowed = j <= i;
  if (window > 0) allowed = allowed & ((i - j) < window);
  return allowed;
}

at::Tensor one_sequence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const VarlenSpec& spec, int64_t n_rep) {
  const int64_t L = q.size(0);
  const at::Tensor qh = q.transpose(0, 1);                          // [Hq, L, D]
  const at::Tensor kh = expand_kv_heads(k, n_rep).transpose(0, 1);  // [Hq, L, D]
  const at::Tensor vh = expand_kv_heads(v, n_rep).transpose(0, 1);  // [Hq, L, D]
  at::Tensor scores = at::matmul(qh, kh.transpose(1, 2)) * spec.softmax_scale;  // [Hq, L, L]
  if (spec.softcap > 0) scores = at::tanh(scores / spec.softcap) * spec.softcap;  // Gemma 2, op by op
  if (spec.causal) {
    scores = scores.masked_fill(allowed_keys(L, spec.window, q.device()).logical_not(),
                                -std::numeric_limits<double>::infinity());
  }
  // Every row keeps its diagonal, so no row is fully masked. Softmax runs in
  // fp32 for 16- and 32-bit inputs, as Hugging Face's eager attention does.
  const at::ScalarType softmax_dtype = at::promote_types(q.scalar_type(), at::kFloat);
  const at::Tensor probs = at::softmax(scores, -1, softmax_dtype).to(q.scalar_type());
  return at::matmul(probs, vh).transpose(0, 1);  // [L, Hq, D]
}

}  // namespace

at::Tensor reference_varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const VarlenSpec& spec) {
  at::Tensor cu = spec.cu_seqlens_cpu.defined() ? spec.cu_seqlens_cpu : spec.cu_seqlens;
  if (!cu.device().is_cpu()) {
    // No host copy was given: fetch one (a sync) and check it, as the dispatcher
    // could not.
    cu = cu.to(at::kCPU);
    validate_cu_seqlens(cu, q.size(0), spec.max_seqlen);
  }
  cu = cu.contiguous();
  const int32_t* bounds = cu.data_ptr<int32_t>();
  const int64_t n_rep = q.size(1) / k.size(1);

  std::vector<at::Tensor> outputs;
  outputs.reserve(cu.numel());
  for (int64_t b = 0; b + 1 < cu.numel(); ++b) {
    const int64_t start = bounds[b], len = bounds[b + 1] - bounds[b];
    if (len == 0) continue;  // an empty sequence contributes no rows
    outputs.push_back(one_sequence(q.narrow(0, start, len), k.narrow(0, start, len),
                                   v.narrow(0, start, len), spec, n_rep));
  }
  return at::cat(outputs, 0);
}

}  // namespace fptrain::attention
