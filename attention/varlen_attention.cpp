// The varlen attention dispatcher: checks what every backend relies on, then
// hands the call to the chosen backend.
#include "attention/varlen_attention.h"

#include "attention/hopper_backend.h"
#include "attention/reference_attention.h"
#include "attention/torch_fa2_attention.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace fptrain::attention {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("varlen_attention: " + what);
}

void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) fail("q, k and v must all be defined");
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3) {
    fail("q, k and v must be [T, heads, head_dim]; got q " + shape_of(q) + ", k " + shape_of(k) +
         ", v " + shape_of(v));
  }
  if (k.sizes() != v.sizes()) fail("k " + shape_of(k) + " and v " + shape_of(v) + " differ in shape");
  if (q.size(0) != k.size(0)) {
    fail("q has " + std::to_string(q.size(0)) + " tokens but k and v have " +
         std::to_string(k.size(0)));
  }
  if (q.size(2) != k.size(2)) {
    fail("head_dim differs: q " + std::to_string(q.size(2)) + ", k/v " + std::to_string(k.size(2)));
  }
  const int64_t hq = q.size(1), hkv = k.size(1);
  if (hkv == 0 || hq % hkv != 0) {
    fail("query heads (" + std::to_string(hq) + ") must be a multiple of key/value heads (" +
         std::to_string(hkv) + ")");
  }
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) {
    fail(std::string("q, k and v must share a dtype; got ") + c10::toString(q.scalar_type()) + ", " +
         c10::toString(k.scalar_type()) + ", " + c10::toString(v.scalar_type()));
  }
  if (!at::isFloatingType(q.scalar_type())) {
    fail(std::string("q, k and v must be floating point; got ") + c10::toString(q.scalar_type()));
  }
  if (k.device() != q.device() || v.device() != q.device()) {
    fail("q, k and v must be on one device; got " + q.device().str() + ", " + k.device().str() +
         ", " + v.device().str());
  }
}

void check_spec(const at::Tensor& q, const VarlenSpec& spec) {
  const at::Tensor& cu = spec.cu_seqlens;
  if (!cu.defined()) fail("cu_seqlens is missing (boundaries must come from the batcher)");
  if (cu.scalar_type() != at::kInt) {
    fail(std::string("cu_seqlens must be int32; got ") + c10::toString(cu.scalar_type()));
  }
  if (cu.dim() != 1 || cu.numel() < 1) fail("cu_seqlens must be 1-D [B+1]; got " + shape_of(cu));
  if (cu.device() != q.device()) {
    fail("cu_seqlens is on " + cu.device().str() + " but q is on " + q.device().str());
  }
  if (spec.max_seqlen < 0) fail("max_seqlen is negative (" + std::to_string(spec.max_seqlen) + ")");
  if (spec.window < 0) fail("window is negative (" + std::to_string(spec.window) + ")");
  if (spec.window > 0 && !spec.causal) fail("a sliding window needs causal attention");
  if (!std::isfinite(spec.softmax_scale) || spec.softmax_scale <= 0.0) {
    fail("softmax_scale must be finite and positive; got " + std::to_string(spec.softmax_scale));
  }
  if (!std::isfinite(spec.softcap) || spec.softcap < 0.0) {
    fail("softcap must be finite and >= 0 (0: none); got " + std::to_string(spec.softcap));
  }
  if (spec.cu_seqlens_cpu.defined() && spec.cu_seqlens_cpu.numel() != cu.numel()) {
    fail("cu_seqlens_cpu has " + std::to_string(spec.cu_seqlens_cpu.numel()) +
         " entries but cu_seqlens has " + std::to_string(cu.numel()));
  }
}

}  // namespace

void validate_cu_seqlens(const at::Tensor& cu_seqlens_cpu, int64_t total_tokens,
                         int64_t max_seqlen) {
  const at::Tensor& cu = cu_seqlens_cpu;
  if (!cu.defined()) throw std::invalid_argument("cu_seqlens: missing");
  if (!cu.device().is_cpu()) {
    throw std::invalid_argument("cu_seqlens: validation needs a host copy; got a tensor on " +
                                cu.device().str());
  }
  if (cu.scalar_type() != at::kInt) {
    throw std::invalid_argument(std::string("cu_seqlens: must be int32; got ") +
                                c10::toString(cu.scalar_type()));
  }
  if (cu.dim() != 1 || cu.numel() < 1) {
    throw std::invalid_argument("cu_seqlens: must be 1-D with B+1 >= 1 entries; got shape " +
                                shape_of(cu));
  }
  const at::Tensor c = cu.contiguous();
  const int32_t* v = c.data_ptr<int32_t>();
  const int64_t n = c.numel();
  if (v[0] != 0) {
    throw std::invalid_argument("cu_seqlens: must start at 0; cu_seqlens[0] = " + std::to_string(v[0]));
  }
  int64_t longest = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    if (v[i + 1] < v[i]) {
      throw std::invalid_argument("cu_seqlens: must be non-decreasing; cu_seqlens[" +
                                  std::to_string(i + 1) + "] = " + std::to_string(v[i + 1]) +
                                  " < cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(v[i]));
    }
    longest = std::max<int64_t>(longest, v[i + 1] - v[i]);
  }
  if (v[n - 1] != total_tokens) {
    throw std::invalid_argument("cu_seqlens: must end at the token count " +
                                std::to_string(total_tokens) + "; cu_seqlens[" +
                                std::to_string(n - 1) + "] = " + std::to_string(v[n - 1]));
  }
  if (longest != max_seqlen) {
    throw std::invalid_argument("cu_seqlens: max_seqlen is " + std::to_string(max_seqlen) +
                                " but the longest sequence has " + std::to_string(longest) +
                                " tokens");
  }
}

namespace {
// The checks every entry point makes; false: no tokens (nothing to compute).
bool check_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const VarlenSpec& spec) {
  check_qkv(q, k, v);
  check_spec(q, spec);
  // Boundaries are checked wherever they are on the host already, unless the
  // caller has (the model checks once per forward, not once per layer); a
  // device-only cu_seqlens is not copied back just to be checked (that would sync).
  if (spec.boundaries_validated) {
  } else if (spec.cu_seqlens_cpu.defined()) {
    validate_cu_seqlens(spec.cu_seqlens_cpu, q.size(0), spec.max_seqlen);
  } else if (spec.cu_seqlens.device().is_cpu()) {
    validate_cu_seqlens(spec.cu_seqlens, q.size(0), spec.max_seqlen);
  }
  return q.size(0) > 0;
}
}  // namespace

at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const VarlenSpec& spec, Backend backend) {
  if (!check_call(q, k, v, spec)) return q.clone();  // no tokens: empty, still part of q's graph
  if (spec.softcap > 0 && backend == Backend::kTorchFA2)
    throw std::invalid_argument(std::string("varlen_attention: backend '") + std::string(backend_name(backend)) +
                                "' has no logit soft-capping (softcap " + std::to_string(spec.softcap) +
                                "); use hopper or reference");
  switch (backend) {
    case Backend::kReference: return reference_varlen_attention(q, k, v, spec);
    case Backend::kTorchFA2: return torch_fa2_varlen_attention(q, k, v, spec);
    case Backend::kHopper: return hopper_varlen_attention(q, k, v, spec);
  }
  throw std::invalid_argument("varlen_attention: unknown backend");
}

at::Tensor varlen_attention_recorded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const VarlenSpec& spec, Backend backend, AttentionRecord& record) {
  record = AttentionRecord{};
  if (backend != Backend::kHopper || at::GradMode::is_enabled() || !check_call(q, k, v, spec))
    return varlen_attention(q, k, v, spec, backend);
  return hopper_varlen_attention_recorded(q, k, v, spec, record);
}

at::Tensor varlen_attention_replayed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const VarlenSpec& spec, Backend backend, const AttentionRecord& record) {
  if (!record.replayable() || backend != Backend::kHopper)
    throw std::logic_error("varlen_attention_replayed: no replayable record for this backend");
  if (!check_call(q, k, v, spec)) return q.clone();
  if (record.out.sizes() != q.sizes())
    throw std::logic_error("varlen_attention_replayed: the record is of another call");
  return hopper_varlen_attention_replayed(q, k, v, spec, record);
}

}  // namespace fptrain::attention
