// The step profile: kernel and op names go to the right category, the profiler
// records a window of steps on the CPU (ops inside named scopes, their backward
// included), and a run with logging.profile_steps writes profile.json and
// profile.md — or says why there is no window, and goes on either way.
#include "trainer/step_profiler.h"

#include "tests/trainer/trainer_test_util.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

namespace fptrain::trainer {
namespace {

using namespace testing;

struct Case {
  std::string name;
  std::vector<std::string> chain;
  StepCategory expected;
};

TEST(TrainStepProfile, ClassifiesRepresentativeKernelsAndOps) {
  using C = StepCategory;
  const std::string bwd = "autograd::engine::evaluate_function: ";
  const std::vector<Case> cases = {
      // GEMMs by name, whatever op launched them
      {"void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x3_nn_align8>("
       "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x3_nn_align8::Params)",
       {"aten::mm", "aten::linear"}, C::kGemm},
      {"nvjet_tst_192x192_64x4_2x1_v_bz_coopA_TNN", {"aten::mm"}, C::kGemm},
      {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_"
       "kernel__5x_cublas",
       {}, C::kGemm},
      {"ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", {"aten::addmm"}, C::kGemm},
      {"void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>("
       "cublasLt::cublasSplitKParams<float>)",
       {"aten::mm"}, C::kGemm},
      // attention: ours, torch's flash, cuDNN, memory-efficient (its name says cutlass too)
      {"void fptrain::attention::cuda::fwd_kernel<128>(fptrain::attention::cuda::FwdParams, "
       "fptrain::attention::cuda::FwdTensorMaps)",
       {}, C::kAttention},
      {"void fptrain::attention::cuda::(anonymous namespace)::tile_scheduler_kernel(fptrain::attention::cuda::"
       "VarlenShape, fptrain::attention::cuda::TileKind, int, int, fptrain::attention::cuda::TileList)",
       {}, C::kAttention},
      {"void fptrain::attention::cuda::bwd_dq_convert_kernel<128>(fptrain::attention::cuda::BwdParams, long)",
       {bwd + "torch::autograd::CppNode<fptrain::attention::(anonymous namespace)::HopperAttention>"}, C::kAttention},
      {"void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
       "cutlass::bfloat16_t>, false, true, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)",
       {"aten::_flash_attention_forward"}, C::kAttention},
      {"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, "
       "2, 4, 2, false, false, cutlass::bfloat16_t>>(pytorch_flash::Flash_bwd_params)",
       {}, C::kAttention},
      {"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", {},
       C::kAttention},
      {"fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
       "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
       {}, C::kAttention},
      // our optimizer kernels
      {"void fptrain::trainer::cuda::(anonymous namespace)::adamw_step_kernel<__nv_bfloat16, true, false, true>("
       "fptrain::trainer::cuda::(anonymous namespace)::StepArgs)",
       {"fptrain::optimizer_step"}, C::kOptimizer},
      {"void fptrain::trainer::cuda::(anonymous namespace)::accumulate_kernel<__nv_bfloat16, true>(float*, "
       "__nv_bfloat16*, long)",
       {}, C::kOptimizer},
      {"void fptrain::trainer::cuda::(anonymous namespace)::grad_norm_kernel<__nv_bfloat16, false, true>("
       "fptrain::trainer::cuda::(anonymous namespace)::NormArgs)",
       {"fptrain::clip_grad_norm"}, C::kClipping},
      {"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
       "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>>(...)",
       {"aten::_fused_adamw_"}, C::kOptimizer},
      // communication and memory
      {"ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", {"fptrain::optimizer_step"},
       C::kNccl},
      {"Memcpy HtoD (Pinned -> Device)", {"aten::copy_", "aten::_to_copy", "aten::to"}, C::kMemcpy},
      {"Memcpy DtoD (Device -> Device)", {}, C::kMemcpy},
      {"Memset (Device)", {"aten::zero_", "fptrain::optimizer_step"}, C::kMemset},
      // element-wise work by the op that launched it, or an enclosing one
      {"void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::"
       "{lambda()#1}::operator()() const::{lambda()#5}::operator()() const::{lambda(c10::BFloat16)#1}, "
       "std::array<char*, 2ul>>(int, ...)",
       {"aten::silu"}, C::kActivation},
      {"void at::native::vectorized_elementwise_kernel<4, ...silu_backward_kernel...>(int, ...)",
       {"aten::silu_backward", "SiluBackward0", bwd + "SiluBackward0"}, C::kActivation},
      {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
       "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
       {"aten::_log_softmax", "aten::log_softmax", "aten::cross_entropy_loss"}, C::kLoss},
      {"void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(...)",
       {"aten::nll_loss_backward", "NllLossBackward0", bwd + "NllLossBackward0"}, C::kLoss},
      {"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, "
       "unsigned int, float, 4, 4>>(...)",
       {"aten::mean"}, C::kNorm},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda...>(int, ...)",
       {"aten::rsqrt"}, C::kNorm},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float>>>(...)",
       {"aten::mul", "PowBackward0", bwd + "PowBackward0"}, C::kNorm},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda...>(int, ...)", {"aten::neg"},
       C::kRope},
      // a generic op names nothing; an enclosing scope does, in the forward and
      // (through the forward op that made the autograd node) in the backward
      {"void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...MulFunctor<float>>>(...)",
       {"aten::mul"}, C::kOtherElementwise},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...MulFunctor<float>>>(...)",
       {"aten::mul", "fptrain::rms_norm"}, C::kNorm},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...MulFunctor<float>>>(...)",
       {"aten::mul", "MulBackward0", bwd + "MulBackward0", "aten::mul", "fptrain::rope"}, C::kRope},
      {"void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>(...)", {"aten::cat"}, C::kOtherElementwise},
      // a GEMM op names gemm only for what it launched itself (not a copy its matmul made)
      {"void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
       "direct_copy_kernel_cuda...>>(int, ...)",
       {"aten::copy_", "aten::clone", "aten::matmul"}, C::kOtherElementwise},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)", {},
       C::kOtherElementwise},
      {"my_library_kernel_v2", {}, C::kOther},
      // CPU ops: the op's own name first in its chain
      {"aten::mm", {"aten::mm", "aten::matmul", "aten::linear"}, C::kGemm},
      {"aten::bmm", {"aten::bmm", "aten::matmul"}, C::kGemm},
      {"fptrain::optimizer_step", {"fptrain::optimizer_step"}, C::kOptimizer},
      {"fptrain::optimizer_accumulate", {"fptrain::optimizer_accumulate"}, C::kOptimizer},
      {"fptrain::clip_grad_norm", {"fptrain::clip_grad_norm"}, C::kClipping},
      {"aten::_softmax", {"aten::_softmax", "aten::softmax"}, C::kAttention},
      {"aten::add_", {"aten::add_"}, C::kOtherElementwise},
  };
  for (const auto& c : cases)
    EXPECT_STREQ(category_name(classify_activity(c.name, c.chain)), category_name(c.expected))
        << c.name << " under " << (c.chain.empty() ? std::string("no op") : c.chain.front());
}

TEST(TrainStepProfile, UnionOfIntervals) {
  EXPECT_EQ(union_length({{0, 10}, {5, 15}, {20, 30}}, 0, 100), 25);
  EXPECT_EQ(union_length({{20, 30}, {0, 10}, {2, 3}}, 0, 100), 20);  // unsorted, nested
  EXPECT_EQ(union_length({{0, 10}, {20, 30}}, 5, 25), 10);           // clipped to the window
  EXPECT_EQ(union_length({}, 0, 10), 0);
}

nlohmann::json read_json(const fs::path& p) {
  const std::string text = read_file(p);
  EXPECT_FALSE(text.empty()) << p;
  return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
}

void expect_profile_keys(const nlohmann::json& j) {
  for (const char* k : {"device", "date", "torch", "mode", "activity", "warmup_steps", "profiled_steps", "first_step",
                        "last_step", "per_step", "categories", "top_kernels", "other_elementwise_by_op", "steps"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"wall_ms", "busy_ms", "idle_ms", "busy_percent", "idle_percent", "kernels", "host_sync_ms"})
    EXPECT_TRUE(j["per_step"].contains(k)) << k;
  for (const char* c : {"gemm", "attention", "norm", "rope", "activation", "loss", "other_elementwise", "optimizer",
                        "clipping", "nccl", "memcpy", "memset", "other"}) {
    ASSERT_TRUE(j["categories"].contains(c)) << c;
    for (const char* k : {"ms", "percent", "count"}) EXPECT_TRUE(j["categories"][c].contains(k)) << c << "." << k;
  }
  EXPECT_LE(j["top_kernels"].size(), 15u);
  EXPECT_GT(j["per_step"]["wall_ms"].get<double>(), 0.0);
  EXPECT_LE(j["per_step"]["busy_ms"].get<double>(), j["per_step"]["wall_ms"].get<double>() + 1e-3);
}

// The profiler by itself on the CPU: a warm-up step, then two profiled steps of
// a GEMM, an RMSNorm-like block in a named scope and a product in another. The
// backward of the scoped product counts as its scope's: through the forward op
// that made its autograd node (the name MulBackward0 says nothing).
TEST(TrainStepProfile, RecordsAWindowOfCpuSteps) {
  TempDir dir;
  DeviceInfo device;
  device.name = "CPU (test)";
  const at::Tensor w = at::randn({64, 64}).requires_grad_(true);
  const at::Tensor scale = at::full({64}, 0.5);
  {
    StepProfiler profiler(/*steps=*/2, /*warmup=*/1, dir.path(), device);
    for (int64_t step = 0; step < 4; ++step) {
      profiler.begin_step(step);
      const at::Tensor h = at::mm(at::randn({32, 64}), w);
      at::Tensor normed, out;
      {
        RECORD_USER_SCOPE("fptrain::rms_norm");
        normed = h * at::rsqrt(h.pow(2).mean(-1, true) + 1e-6);
      }
      {
        RECORD_USER_SCOPE("fptrain::rope");
        out = normed * scale;
      }
      out.sum().backward();
      w.mutable_grad().zero_();
      profiler.end_step(step + 1);
    }
    profiler.finish();
  }
  ASSERT_TRUE(fs::exists(dir / "profile.md"));
  const auto j = read_json(dir / "profile.json");
  expect_profile_keys(j);
  EXPECT_EQ(j["mode"], "cpu");
  EXPECT_EQ(j["profiled_steps"].get<int64_t>(), 2);
  EXPECT_EQ(j["first_step"].get<int64_t>(), 2);
  EXPECT_EQ(j["last_step"].get<int64_t>(), 3);
  ASSERT_EQ(j["steps"].size(), 2u);
  const auto count = [&](const char* c) { return j["categories"][c]["count"].get<double>(); };
  EXPECT_GE(count("gemm"), 3.0);  // mm; in the backward its node, the node's evaluation and the mm for w
  EXPECT_GT(count("norm"), 6.0);  // pow, mean, add, rsqrt, mul, mul and their backward
  // aten::mul in the forward; the node's evaluation, MulBackward0 and its aten::mul in the backward.
  EXPECT_GE(count("rope"), 4.0);
  EXPECT_GT(j["categories"]["norm"]["ms"].get<double>(), 0.0);
}

TEST(TrainStepProfile, OffDoesNothing) {
  TempDir dir;
  StepProfiler profiler(/*steps=*/0, /*warmup=*/0, dir.path(), DeviceInfo{});
  for (int64_t s = 0; s < 2; ++s) {
    profiler.begin_step(s);
    profiler.end_step(s + 1);
  }
  profiler.finish();
  EXPECT_FALSE(fs::exists(dir / "profile.json"));
}

TEST(TrainStepProfile, RunWritesTheProfile) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write(
      "c.yaml", base_config(run, "tokens.jsonl",
                            "batching:\n  examples_per_micro_batch: 2\n  grad_accumulation: 2\n"
                            "training:\n  max_steps: 5\nlogging:\n  log_interval: 2\n"));
  const CommandResult r =
      run_fptrain({"train", cfg, "--set", "logging.profile_steps=2", "--set", "logging.profile_warmup=1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step profile, steps 2-3"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(run / "profile.md"));
  const auto j = read_json(run / "profile.json");
  expect_profile_keys(j);
  EXPECT_EQ(j["profiled_steps"].get<int64_t>(), 2);
  EXPECT_EQ(j["first_step"].get<int64_t>(), 2);
  EXPECT_EQ(j["last_step"].get<int64_t>(), 3);
  EXPECT_EQ(j["warmup_steps"].get<int64_t>(), 1);
  EXPECT_FALSE(j.contains("note"));
  EXPECT_GT(j["categories"]["gemm"]["ms"].get<double>(), 0.0);
  EXPECT_GT(j["categories"]["optimizer"]["count"].get<double>(), 0.0);  // the fptrain::optimizer_step scope
  EXPECT_GT(j["categories"]["loss"]["count"].get<double>(), 0.0);
  EXPECT_EQ(train_records(run).size(), 3u);  // the run went on as usual: steps 2, 4, 5
  EXPECT_NE(read_file(run / "config.yaml").find("profile_steps: 2"), std::string::npos);
}

TEST(TrainStepProfile, ARunShorterThanTheWindowReportsWhatItHasOrWhyNot) {
  TempDir dir;
  const std::string extra = "batching:\n  examples_per_micro_batch: 2\ntraining:\n  max_steps: 3\n";
  // Cut short: 2 of 4 steps, with a note.
  const std::string cfg = dir.write("a.yaml", base_config(dir / "a", "tokens.jsonl", extra));
  CommandResult r =
      run_fptrain({"train", cfg, "--set", "logging.profile_steps=4", "--set", "logging.profile_warmup=1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(dir / "a" / "profile.json");
  EXPECT_EQ(j["profiled_steps"].get<int64_t>(), 2);
  EXPECT_NE(j.value("note", "").find("2 of the 4 steps"), std::string::npos) << j.dump();
  // No window at all: said, and the run succeeds.
  const std::string cfg2 = dir.write("b.yaml", base_config(dir / "b", "tokens.jsonl", extra));
  r = run_fptrain({"train", cfg2, "--set", "logging.profile_steps=2"});  // warm-up 5 > 3 steps
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step profile: none taken"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "b" / "profile.json"));
}

}  // namespace
}  // namespace fptrain::trainer
