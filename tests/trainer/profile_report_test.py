#!/usr/bin/env python3
"""benchmarks/train/profile_report.py: kernel and op names go to the right
category, intervals unite, and a trace (a real CPU one from torch.profiler, a
GPU one written here in Kineto's format) becomes the report."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "train"))
import profile_report as pr  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(pr.__file__), "profile_report.py")

CASES = [
    # our fused kernels by their names, whether or not an op is linked
    ("void fptrain::models::cuda::(anonymous namespace)::rms_norm_dw_reduce_kernel<__nv_bfloat16>(float const*, long, "
     "long, __nv_bfloat16*)", [], "norm"),
    ("void fptrain::models::cuda::(anonymous namespace)::rotary_kernel<__nv_bfloat16, 8>(...)", [], "rope"),
    ("void fptrain::models::cuda::(anonymous namespace)::swiglu_bwd_kernel<__nv_bfloat16, 8>(...)", [], "activation"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x3_nn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x3_nn_align8::Params)",
     ["aten::mm", "aten::linear"], "gemm"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopA_TNN",
     ["aten::mm"], "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
     [], "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
     ["aten::addmm"], "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(cublasLt::cublasSplitKParams<float>)",
     ["aten::mm"], "gemm"),
    ("void fptrain::attention::cuda::fwd_kernel<128>(fptrain::attention::cuda::FwdParams, fptrain::attention::cuda::FwdTensorMaps)",
     [], "attention"),
    ("void fptrain::attention::cuda::(anonymous namespace)::tile_scheduler_kernel(fptrain::attention::cuda::VarlenShape, fptrain::attention::cuda::TileKind, int, int, fptrain::attention::cuda::TileList)",
     [], "attention"),
    ("void fptrain::attention::cuda::bwd_dq_convert_kernel<128>(fptrain::attention::cuda::BwdParams, long)",
     ["autograd::engine::evaluate_function: torch::autograd::CppNode<fptrain::attention::(anonymous namespace)::HopperAttention>"], "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)",
     ["aten::_flash_attention_forward"], "attention"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>>(pytorch_flash::Flash_bwd_params)",
     [], "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
     [], "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
     [], "attention"),
    ("void fptrain::optim::cuda::(anonymous namespace)::adamw_step_kernel<__nv_bfloat16, true, false, true>(fptrain::optim::cuda::(anonymous namespace)::StepArgs)",
     ["fptrain::optimizer_step"], "optimizer"),
    ("void fptrain::optim::cuda::(anonymous namespace)::accumulate_kernel<__nv_bfloat16, true>(float*, __nv_bfloat16*, long)",
     [], "optimizer"),
    ("void fptrain::optim::cuda::(anonymous namespace)::grad_norm_kernel<__nv_bfloat16, false, true>(fptrain::optim::cuda::(anonymous namespace)::NormArgs)",
     ["fptrain::clip_grad_norm"], "clipping"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>>(...)",
     ["aten::_fused_adamw_"], "optimizer"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     ["fptrain::optimizer_step"], "nccl"),
    ("Memcpy HtoD (Pinned -> Device)",
     ["aten::copy_", "aten::_to_copy", "aten::to"], "memcpy"),
    ("Memcpy DtoD (Device -> Device)",
     [], "memcpy"),
    ("Memset (Device)",
     ["aten::zero_", "fptrain::optimizer_step"], "memset"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#5}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>>(int, ...)",
     ["aten::silu"], "activation"),
    ("void at::native::vectorized_elementwise_kernel<4, ...silu_backward_kernel...>(int, ...)",
     ["aten::silu_backward", "SiluBackward0", "autograd::engine::evaluate_function: SiluBackward0"], "activation"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
     ["aten::_log_softmax", "aten::log_softmax", "aten::cross_entropy_loss"], "loss"),
    ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(...)",
     ["aten::nll_loss_backward", "NllLossBackward0", "autograd::engine::evaluate_function: NllLossBackward0"], "loss"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4, 4>>(...)",
     ["aten::mean"], "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda...>(int, ...)",
     ["aten::rsqrt"], "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>(...)",
     ["aten::mul", "PowBackward0", "autograd::engine::evaluate_function: PowBackward0"], "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda...>(int, ...)",
     ["aten::neg"], "rope"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...MulFunctor<float>>>(...)",
     ["aten::mul"], "other_elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...MulFunctor<float>>>(...)",
     ["aten::mul", "fptrain::rms_norm"], "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...MulFunctor<float>>>(...)",
     ["aten::mul", "MulBackward0", "autograd::engine::evaluate_function: MulBackward0", "aten::mul", "fptrain::rope"], "rope"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>(...)",
     ["aten::cat"], "other_elementwise"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda...>>(int, ...)",
     ["aten::copy_", "aten::clone", "aten::matmul"], "other_elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)",
     [], "other_elementwise"),
    ("my_library_kernel_v2",
     [], "other"),
    ("aten::mm",
     ["aten::mm", "aten::matmul", "aten::linear"], "gemm"),
    ("aten::bmm",
     ["aten::bmm", "aten::matmul"], "gemm"),
    ("fptrain::optimizer_step",
     ["fptrain::optimizer_step"], "optimizer"),
    ("fptrain::optimizer_accumulate",
     ["fptrain::optimizer_accumulate"], "optimizer"),
    ("fptrain::clip_grad_norm",
     ["fptrain::clip_grad_norm"], "clipping"),
    ("aten::_softmax",
     ["aten::_softmax", "aten::softmax"], "attention"),
    ("aten::add_",
     ["aten::add_"], "other_elementwise"),
]


def run_report(folder):
    out = subprocess.run([sys.executable, SCRIPT, folder], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with open(os.path.join(folder, "profile.json")) as f:
        return json.load(f), out.stdout


def window(mode, last_step, **extra):
    return dict({"trace": "profile_trace.json", "device": "test", "date": "today", "torch": "x", "mode": mode,
                 "warmup_steps": 1, "last_step": last_step}, **extra)


class Classify(unittest.TestCase):
    def test_representative_kernels_and_ops(self):
        for name, chain, expected in CASES:
            self.assertEqual(pr.classify(name, chain), expected, f"{name} under {chain[:1]}")

    def test_union_of_intervals(self):
        self.assertEqual(pr.union_length([(0, 10), (5, 15), (20, 30)], 0, 100), 25)
        self.assertEqual(pr.union_length([(20, 30), (0, 10), (2, 3)], 0, 100), 20)  # unsorted, nested
        self.assertEqual(pr.union_length([(0, 10), (20, 30)], 5, 25), 10)  # clipped to the window
        self.assertEqual(pr.union_length([], 0, 10), 0)


class GpuTrace(unittest.TestCase):
    """Kineto's GPU events: a kernel names its launching op by External id; a
    backward kernel is classified through the forward op that made its node."""

    def test_kernels_by_launching_op_and_forward_scope(self):
        def cpu(name, ts, dur, ext, seq=None, fwd=0, tid=1):
            args = {"External id": ext}
            if seq is not None:
                args.update({"Sequence number": seq, "Fwd thread id": fwd})
            return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}

        def gpu(name, ts, dur, ext, cat="kernel"):
            return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": 7, "args": {"External id": ext}}
        mul = "void at::native::vectorized_elementwise_kernel<4, MulFunctor<float>>(...)"
        events = [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100, "tid": 1, "args": {}},
            cpu("fptrain::rope", 1, 20, 1),
            cpu("aten::mul", 2, 5, 2, seq=40),
            cpu("aten::mm", 30, 5, 3, seq=41),
            cpu("autograd::engine::evaluate_function: MulBackward0", 50, 10, 4, seq=40, fwd=1, tid=2),
            cpu("MulBackward0", 50, 9, 5, seq=40, fwd=1, tid=2),
            cpu("aten::mul", 51, 3, 6, tid=2),
            gpu(mul, 10, 4, 2),
            gpu("nvjet_tst_192x192_64x4_2x1_v_bz_coopA_TNN", 31, 10, 3),
            gpu(mul, 60, 6, 6),
            gpu("Memcpy HtoD (Pinned -> Device)", 70, 2, 99, cat="gpu_memcpy"),
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 80, "dur": 8, "tid": 1,
             "args": {}},
            # a step left unfinished: its marker's number is beyond last_step
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 100, "dur": 50, "tid": 1, "args": {}},
            cpu("aten::mm", 110, 5, 7, seq=42),
            gpu("nvjet_tst_192x192_64x4_2x1_v_bz_coopA_TNN", 112, 10, 7),
        ]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "profile_trace.json"), "w") as f:
                json.dump({"traceEvents": events}, f)
            with open(os.path.join(d, "profile_window.json"), "w") as f:
                json.dump(window("gpu", 3), f)
            j, out = run_report(d)
        self.assertIn("step profile, steps 3-3 (GPU)", out)
        self.assertEqual(j["mode"], "gpu")
        self.assertEqual(j["profiled_steps"], 1)
        cats = j["categories"]
        self.assertAlmostEqual(cats["rope"]["ms"], 0.010)  # forward 4 us + backward 6 us, both as the scope's
        self.assertAlmostEqual(cats["gemm"]["ms"], 0.010)  # the unfinished step's GEMM is left out
        self.assertAlmostEqual(cats["memcpy"]["ms"], 0.002)
        self.assertEqual(j["per_step"]["kernels"], 4)
        self.assertAlmostEqual(j["per_step"]["host_sync_ms"], 0.008)
        self.assertAlmostEqual(j["per_step"]["busy_ms"], 0.022)


class CpuTrace(unittest.TestCase):
    """A real trace of torch.profiler on the CPU, steps marked as the trainer
    marks them: the scoped product's backward counts as its scope's."""

    def test_report_of_cpu_steps(self):
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function
        w = torch.randn(64, 64, requires_grad=True)
        scale = torch.full((64,), 0.5)
        with tempfile.TemporaryDirectory() as d:
            with profile(activities=[ProfilerActivity.CPU]) as p:
                for step in (1, 2):
                    with record_function(f"ProfilerStep#{step}"):
                        h = torch.randn(32, 64) @ w
                        with record_function("fptrain::rms_norm"):
                            normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
                        with record_function("fptrain::rope"):
                            out = normed * scale
                        out.sum().backward()
            p.export_chrome_trace(os.path.join(d, "profile_trace.json"))
            with open(os.path.join(d, "profile_window.json"), "w") as f:
                json.dump(window("cpu", 2), f)
            j, _ = run_report(d)
            with open(os.path.join(d, "profile.md")) as f:
                self.assertIn("# Step profile", f.read())
        self.assertEqual(j["mode"], "cpu")
        self.assertEqual(j["profiled_steps"], 2)
        self.assertEqual((j["first_step"], j["last_step"]), (1, 2))
        count = {c: v["count"] for c, v in j["categories"].items()}
        self.assertGreaterEqual(count["gemm"], 3.0)  # mm; in the backward its node, its evaluation, the mm for w
        self.assertGreater(count["norm"], 6.0)  # pow, mean, add, rsqrt, mul, mul and their backward
        self.assertGreaterEqual(count["rope"], 4.0)  # aten::mul; its node's evaluation, MulBackward0, aten::mul


if __name__ == "__main__":
    unittest.main()
