// The ATen side of the fused kernels (see fused_ops_cuda.h). Compiled only with
// FPTRAIN_CUDA; fused_ops_cuda_stub.cpp stands in without it.
#include "models/cuda/fused_ops_cuda.h"

#include "common/cuda/torch_dtype.h"
#include "models/cuda/fused_kernels.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <stdexcept>

namespace fptrain::models::cuda {
namespace {

Dtype dtype_of(const at::Tensor& t) { return common::cuda::dtype_of(t.scalar_type(), "models/cuda"); }

const void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

GateActivation activation_of(bool gelu_tanh) { return gelu_tanh ? GateActivation::kGeluTanh : GateActivation::kSilu; }

void check_rows(const at::Tensor& t, int64_t rows, int64_t cols, const char* what) {
  if (!t.defined()) return;
  if (t.dim() != 2 || t.size(0) != rows || t.size(1) != cols || !t.is_contiguous()) {
    throw std::invalid_argument(std::string("models/cuda rms_norm: ") + what + " must be contiguous [rows, cols]");
  }
}

}  // namespace

bool kernels_built() { return true; }

bool device_supported(const at::Device& device) {
  if (!device.is_cuda() || !at::globalContext().hasCUDA()) return false;
  const int index = device.has_index() ? device.index() : at::cuda::current_device();
  if (index < 0 || index >= at::cuda::device_count()) return false;
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(index);
  return prop->major == 9 && prop->minor == 0;
}

int64_t rms_norm_max_cols() { return rms_norm_kernel_max_cols(); }

RmsNormForwardResult rms_norm_forward(const at::Tensor& x, const at::Tensor& update, const at::Tensor& weight,
                                      double eps, double update_scale, bool one_plus_weight) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  check_rows(x, rows, cols, "x");
  check_rows(update, rows, cols, "update");
  if (weight.dim() != 1 || weight.size(0) != cols || !weight.is_contiguous()) {
    throw std::invalid_argument("models/cuda rms_norm: weight must be contiguous [cols]");
  }
  RmsNormForwardResult r;
  r.y = at::empty_like(x);
  r.rstd = at::empty({rows}, x.options().dtype(at::kFloat));
  if (update.defined()) r.sum = at::empty_like(x);
  RmsNormFwdArgs a;
  a.dtype = dtype_of(x);
  a.x = x.data_ptr();
  a.update = ptr_or_null(update);
  a.weight = weight.data_ptr();
  a.sum_out = update.defined() ? r.sum.data_ptr() : nullptr;
  a.y = r.y.data_ptr();
  a.rstd = r.rstd.data_ptr<float>();
  a.rows = rows;
  a.cols = cols;
  a.eps = static_cast<float>(eps);
  a.update_scale = static_cast<float>(update_scale);
  a.one_plus_weight = one_plus_weight;
  rms_norm_forward(a, at::cuda::getCurrentCUDAStream());
  return r;
}

RmsNormBackwardResult rms_norm_backward(const at::Tensor& s, const at::Tensor& weight, const at::Tensor& rstd,
                                        const at::Tensor& grad_y, const at::Tensor& grad_sum, bool want_update,
                                        double update_scale, bool want_weight, bool one_plus_weight) {
  const c10::cuda::CUDAGuard guard(s.device());
  const int64_t rows = s.size(0), cols = s.size(1);
  check_rows(s, rows, cols, "s");
  check_rows(grad_y, rows, cols, "grad_y");
  check_rows(grad_sum, rows, cols, "grad_sum");
  RmsNormBackwardResult r;
  r.grad_x = at::empty_like(s);
  const bool separate_update = want_update && update_scale != 1.0;
  if (separate_update) r.grad_update = at::empty_like(s);
  if (want_weight) r.grad_weight = at::empty_like(weight);

  RmsNormBwdArgs a;
  a.dtype = dtype_of(s);
  a.s = s.data_ptr();
  a.weight = weight.data_ptr();
  a.rstd = rstd.data_ptr<float>();
  a.grad_y = grad_y.data_ptr();
  a.grad_sum = ptr_or_null(grad_sum);
  a.grad_x = r.grad_x.data_ptr();
  a.grad_update = separate_update ? r.grad_update.data_ptr() : nullptr;
  a.update_scale = static_cast<float>(update_scale);
  a.rows = rows;
  a.cols = cols;
  a.one_plus_weight = one_plus_weight;  // before the block count: the variant's occupancy
  at::Tensor partial;
  if (want_weight) {
    a.grad_weight = r.grad_weight.data_ptr();
    a.dw_blocks = rms_norm_backward_blocks(a);
    partial = at::empty({a.dw_blocks, cols}, s.options().dtype(at::kFloat));
    a.dw_partial = partial.data_ptr<float>();
  }
  rms_norm_backward(a, at::cuda::getCurrentCUDAStream());
  if (want_update && !separate_update) r.grad_update = r.grad_x;
  return r;
}

std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                         const at::Tensor& sin, bool inverse) {
  const at::Tensor& first = q.defined() ? q : k;
  const c10::cuda::CUDAGuard guard(first.device());
  RotaryArgs a;
  a.dtype = dtype_of(first);
  a.tokens = first.size(0);
  a.head_dim = first.size(2);
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  a.table_stride = cos.stride(0);
  if (cos.stride(0) != sin.stride(0)) throw std::invalid_argument("models/cuda rotary: cos and sin strides differ");
  a.inverse = inverse;
  std::pair<at::Tensor, at::Tensor> out;
  auto add = [&](const at::Tensor& in, at::Tensor& result) {
    if (!in.defined()) return;
    result = at::empty(in.sizes(), in.options().memory_format(at::MemoryFormat::Contiguous));
    RotaryTensor& t = a.tensors[a.count++];
    t.in = in.data_ptr();
    t.out = result.data_ptr();
    t.heads = in.size(1);
    t.stride_token = in.stride(0);
    t.stride_head = in.stride(1);
  };
  add(q, out.first);
  add(k, out.second);
  if (a.count > 0) rotary(a, at::cuda::getCurrentCUDAStream());
  return out;
}

at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up, bool gelu_tanh) {
  const c10::cuda::CUDAGuard guard(gate.device());
  const at::Tensor out = at::empty(gate.sizes(), gate.options().memory_format(at::MemoryFormat::Contiguous));
  SwigluFwdArgs a;
  a.dtype = dtype_of(gate);
  a.activation = activation_of(gelu_tanh);
  a.gate = gate.data_ptr();
  a.up = up.data_ptr();
  a.out = out.data_ptr();
  a.gate_stride = gate.stride(0);
  a.up_stride = up.stride(0);
  a.out_stride = out.stride(0);
  a.rows = gate.size(0);
  a.cols = gate.size(1);
  swiglu_forward(a, at::cuda::getCurrentCUDAStream());
  return out;
}

void swiglu_backward(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& grad_gate,
                     const at::Tensor& grad_up, bool gelu_tanh) {
  const c10::cuda::CUDAGuard guard(gate.device());
  SwigluBwdArgs a;
  a.dtype = dtype_of(gate);
  a.activation = activation_of(gelu_tanh);
  a.grad = grad.data_ptr();
  a.gate = gate.data_ptr();
  a.up = up.data_ptr();
  a.grad_gate = grad_gate.data_ptr();
  a.grad_up = grad_up.data_ptr();
  a.grad_stride = grad.stride(0);
  a.gate_stride = gate.stride(0);
  a.up_stride = up.stride(0);
  a.grad_gate_stride = grad_gate.stride(0);
  a.grad_up_stride = grad_up.stride(0);
  a.rows = gate.size(0);
  a.cols = gate.size(1);
  swiglu_backward(a, at::cuda::getCurrentCUDAStream());
}

void cross_entropy_inplace(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& loss,
                           bool write_grad) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0);
  if (logits.dim() != 2 || logits.stride(1) != 1 || (rows > 1 && logits.stride(0) < logits.size(1)))
    throw std::invalid_argument("models/cuda cross_entropy: logits must be [rows, cols] with contiguous rows");
  const auto is_vector = [&](const at::Tensor& t, at::ScalarType type) {
    return t.dim() == 1 && t.size(0) == rows && t.is_contiguous() && t.scalar_type() == type &&
           t.device() == logits.device();
  };
  if (!is_vector(targets, at::kLong) || !is_vector(loss, at::kFloat))
    throw std::invalid_argument("models/cuda cross_entropy: targets (int64) and loss (fp32) must be contiguous [rows]");
  CrossEntropyArgs a;
  a.dtype = dtype_of(logits);
  a.logits = logits.data_ptr();
  a.targets = targets.const_data_ptr<int64_t>();
  a.loss = loss.mutable_data_ptr<float>();
  a.rows = rows;
  a.cols = logits.size(1);
  a.row_stride = logits.stride(0);
  a.write_grad = write_grad;
  cross_entropy_inplace(a, at::cuda::getCurrentCUDAStream());
}

std::pair<at::Tensor, at::Tensor> nf4_quantize(const at::Tensor& weight, const at::Tensor& levels) {
  const c10::cuda::CUDAGuard guard(weight.device());
  const at::Tensor w = weight.contiguous();
  const int64_t n = w.numel();
  if (levels.numel() != 16 || !levels.is_cpu())
    throw std::invalid_argument("nf4_quantize: a CPU table of 16 levels expected");
  const at::Tensor codes = at::empty({n / 2}, w.options().dtype(at::kByte));
  const at::Tensor absmax = at::empty({(n + 63) / 64}, w.options().dtype(at::kFloat));
  Nf4QuantArgs a;
  a.dtype = dtype_of(w);
  a.weight = w.data_ptr();
  a.codes = codes.data_ptr<uint8_t>();
  a.absmax = absmax.data_ptr<float>();
  a.numel = n;
  const at::Tensor lv = levels.to(at::kFloat).contiguous();
  std::copy(lv.data_ptr<float>(), lv.data_ptr<float>() + 16, a.levels);
  nf4_quantize(a, at::cuda::getCurrentCUDAStream());
  return {codes, absmax};
}

at::Tensor nf4_dequantize(const at::Tensor& codes, const at::Tensor& absmax_codes, const at::Tensor& absmax_scales,
                          const at::Tensor& absmax_offset, const at::Tensor& dynamic_map, const at::Tensor& levels,
                          int64_t numel, at::ScalarType dtype) {
  const c10::cuda::CUDAGuard guard(codes.device());
  const at::Tensor out = at::empty({numel}, codes.options().dtype(dtype));
  Nf4DequantArgs a;
  a.dtype = dtype_of(out);
  if (!codes.is_contiguous() || !absmax_codes.is_contiguous() || !absmax_scales.is_contiguous() ||
      dynamic_map.numel() != 256 || levels.numel() != 16 || !dynamic_map.is_cpu() || !levels.is_cpu())
    throw std::invalid_argument("nf4_dequantize: contiguous codes and CPU tables of 256 and 16 values expected");
  a.codes = codes.data_ptr<uint8_t>();
  a.absmax_codes = absmax_codes.data_ptr<uint8_t>();
  a.absmax_scales = absmax_scales.data_ptr<float>();
  a.absmax_offset = absmax_offset.data_ptr<float>();
  const at::Tensor map = dynamic_map.to(at::kFloat).contiguous(), lv = levels.to(at::kFloat).contiguous();
  std::copy(map.data_ptr<float>(), map.data_ptr<float>() + 256, a.dynamic_map);
  std::copy(lv.data_ptr<float>(), lv.data_ptr<float>() + 16, a.levels);
  a.out = out.data_ptr();
  a.numel = numel;
  nf4_dequantize(a, at::cuda::getCurrentCUDAStream());
  return out;
}

}  // namespace fptrain::models::cuda
