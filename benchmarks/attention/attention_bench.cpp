// Varlen attention speed: our kernels vs LibTorch's FlashAttention-2 varlen and cuDNN
// SDPA on the padded layout, forward and forward+backward, one run on one GPU.
//
//   attention_bench [--out results.json] [--md results.md] [--reps N] [--only-ours] [--workload NAME]
//                   [--head-dim D] [--deviation] [--softcap CAP]
//
// --deviation writes the numeric deviation study (O vs float64 for sequence lengths 256..16k)
// instead of timing.
//
// FLOPs are FlashAttention's count of useful work: causal forward = 2 * Hq * D * sum(L_i^2)
// (non-causal twice that), backward = 2.5x forward. Padding done by cuDNN counts nothing.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#ifdef FPTRAIN_HOPPER_KERNELS  // the kernels are part of this build (FPTRAIN_CUDA=ON)
#include "attention/cuda/hopper_kernels.h"

namespace fa = fptrain::attention;

namespace {

constexpr int kTokens = 32768;

struct Workload {
  std::string name;
  std::vector<int> lens;
  std::vector<int> heads_kv;  // K/V head counts it runs at (Hq = 32)
};

// Lengths drawn from a lognormal until the pack holds exactly kTokens (the last one trimmed).
std::vector<int> lognormal_pack(double median, double sigma, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> dist(std::log(median), sigma);
  std::vector<int> lens;
  int total = 0;
  while (total < kTokens) {
    int l = std::clamp(int(std::lround(dist(rng))), 1, max_len);
    l = std::min(l, kTokens - total);
    lens.push_back(l);
    total += l;
  }
  return lens;
}

// A few long documents among many short ones: 4 of 4096 tokens spread through alpaca-like ones.
std::vector<int> mixed_pack() {
  std::vector<int> shorts = lognormal_pack(100, 0.7, 1024, 4321), lens;
  int total = 0;
  size_t next = 0;
  for (int part = 0; part < 4; ++part) {
    lens.push_back(4096);
    total += 4096;
    const int until = (part + 1) * (kTokens / 4);
    while (total < until && next < shorts.size()) {
      const int l = std::min(shorts[next++], until - total);
      lens.push_back(l);
      total += l;
    }
  }
  return lens;
}

// Hkv 8 (grouped queries, as Llama-3 / Mistral) everywhere; the short-document mixes (alpaca-like,
// chat-turns: single turns of median 30 tokens, where one tile spans several documents) also
// at Hkv 32 (one K/V head per query head, the layout BinFlash takes).
std::vector<Workload> workloads() {
  return {
      {"flan-like", lognormal_pack(256, 1.1, 4096, 1234), {8}},
      {"orca-like", lognormal_pack(550, 0.4, 4096, 5678), {8}},
      {"alpaca-like", lognormal_pack(100, 0.7, 1024, 4321), {8, 32}},
      {"chat-turns", lognormal_pack(30, 0.7, 512, 2468), {8, 32}},
      {"mixed", mixed_pack(), {8, 32}},
      {"fixed-2048", std::vector<int>(kTokens / 2048, 2048), {8}},
      {"fixed-8192", std::vector<int>(kTokens / 8192, 8192), {8}},
  };
}

// The workloads' document lengths as JSON (for peers run from Python on the same documents).
void dump_workloads(const std::string& path) {
  std::ofstream f(path);
  f << "{\"tokens\": " << kTokens << ", \"heads_q\": 32, \"workloads\": {";
  bool first = true;
  for (const Workload& w : workloads()) {
    f << (first ? "" : ", ") << "\"" << w.name << "\": {\"heads_kv\": [";
    for (size_t i = 0; i < w.heads_kv.size(); ++i) f << (i ? ", " : "") << w.heads_kv[i];
    f << "], \"lens\": [";
    for (size_t i = 0; i < w.lens.size(); ++i) f << (i ? ", " : "") << w.lens[i];
    f << "]}";
    first = false;
  }
  f << "}}\n";
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("attention_bench: ") + what + ": " + cudaGetErrorString(e));
}

// Median time (ms) of `fn` over `reps` runs after warm-up, timed with CUDA events.
double time_ms(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  std::vector<double> times;
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a, stream), "record");
    fn();
    check(cudaEventRecord(b, stream), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    times.push_back(ms);
  }
  check(cudaGetLastError(), "timed region");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Row {
  std::string workload, method;
  int head_dim, heads_kv;
  double fwd_ms, fwdbwd_ms, fwd_tflops, fwdbwd_tflops;
};

// Numeric deviation of O from a float64 reference ("Is Flash Attention Stable?"): one sequence
// of length L, N(0,1) inputs in bf16 or fp16; max and mean |O - O_fp64| for our kernels, FA2
// varlen, cuDNN SDPA and math attention in the input dtype (fp32 softmax), in each configuration
// below (a soft cap: ours and math only, the others have none).
struct DeviationCase {
  int d, hq, hkv;
  bool causal;
  double softcap;
  at::ScalarType dtype = at::kBFloat16;
  std::string name() const {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s D=%d Hq=%d Hkv=%d %s%s", dtype == at::kHalf ? "fp16" : "bf16", d, hq, hkv,
                  causal ? "causal" : "full", softcap > 0 ? (" softcap=" + std::to_string(int(softcap))).c_str() : "");
    return buf;
  }
};

std::vector<DeviationCase> deviation_cases() {
  return {{128, 4, 1, true, 0.0}, {64, 4, 1, true, 0.0},  {128, 4, 4, true, 0.0},
          {128, 4, 1, false, 0.0}, {128, 4, 2, true, 50.0}, {128, 4, 1, true, 0.0, at::kHalf}};
}

// The float64 reference (into ref) and bf16 math attention (into math) of one head, by query
// chunks: no L x L tensor for the whole sequence at once.
void math_attention_head(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const DeviationCase& c,
                         int h, double scale, at::Tensor& ref, at::Tensor& math) {
  const int L = int(q.size(0)), chunk = 2048;
  const auto cuda_long = at::TensorOptions().dtype(at::kLong).device(at::kCUDA);
  at::Tensor kh = k.select(1, h / (c.hq / c.hkv)), vh = v.select(1, h / (c.hq / c.hkv));
  for (int c0 = 0; c0 < L; c0 += chunk) {
    const int n = std::min(chunk, L - c0);
    at::Tensor qh = q.select(1, h).narrow(0, c0, n);
    at::Tensor hidden = at::arange(L, cuda_long).unsqueeze(0) > at::arange(c0, c0 + n, cuda_long).unsqueeze(1);
    if (!c.causal) hidden.fill_(false);
    auto scores = [&](at::Tensor s) {
      if (c.softcap > 0) s = at::tanh(s / c.softcap) * c.softcap;
      return s.masked_fill(hidden, -INFINITY);
    };
    at::Tensor s64 = scores(at::matmul(qh.to(at::kDouble), kh.to(at::kDouble).t()) * scale);
    ref.select(1, h).narrow(0, c0, n).copy_(at::matmul(at::softmax(s64, -1), vh.to(at::kDouble)));
    at::Tensor s = scores(at::matmul(qh, kh.t()) * scale);
    math.select(1, h).narrow(0, c0, n).copy_(at::matmul(at::softmax(s, -1, at::kFloat).to(c.dtype), vh));
  }
}

// Every method's O for one case and length, and the float64 reference.
std::vector<std::pair<std::string, at::Tensor>> deviation_outputs(const DeviationCase& c, int L, at::Tensor& ref) {
  const double scale = 1.0 / std::sqrt(double(c.d));
  auto opts = at::TensorOptions().dtype(c.dtype).device(at::kCUDA);
  at::Tensor q = at::randn({L, c.hq, c.d}, opts), k = at::randn({L, c.hkv, c.d}, opts);
  at::Tensor v = at::randn({L, c.hkv, c.d}, opts);
  at::Tensor cu = at::tensor(std::vector<int>{0, L}, at::TensorOptions().dtype(at::kInt)).to(at::kCUDA);
  fa::VarlenSpec spec;
  spec.cu_seqlens = cu;
  spec.max_seqlen = L;
  spec.causal = c.causal;
  spec.softmax_scale = scale;
  spec.softcap = c.softcap;
  std::vector<std::pair<std::string, at::Tensor>> outs;
  outs.emplace_back("hopper", std::get<0>(fa::cuda::attention_forward(q, k, v, spec)));
  if (c.softcap == 0) {
    outs.emplace_back("torch-fa2", std::get<0>(at::_flash_attention_forward(q, k, v, cu, cu, L, L, 0.0, c.causal,
                                                                             false, scale)));
    try {
      at::Tensor kr = k.repeat_interleave(c.hq / c.hkv, 1), vr = v.repeat_interleave(c.hq / c.hkv, 1);
      auto r = at::_scaled_dot_product_cudnn_attention(q.unsqueeze(0).transpose(1, 2), kr.unsqueeze(0).transpose(1, 2),
                                                       vr.unsqueeze(0).transpose(1, 2), std::nullopt, false, 0.0,
                                                       c.causal, false, scale);
      outs.emplace_back("cudnn", std::get<0>(r).transpose(1, 2).squeeze(0));
    } catch (const std::exception& e) {
      std::printf("cudnn failed at L=%d: %.200s\n", L, e.what());
    }
  }
  ref = at::empty({L, c.hq, c.d}, at::TensorOptions().dtype(at::kDouble).device(at::kCUDA));
  at::Tensor math = at::empty({L, c.hq, c.d}, opts);
  for (int h = 0; h < c.hq; ++h) math_attention_head(q, k, v, c, h, scale, ref, math);
  outs.emplace_back("math", math);
  return outs;
}

void deviation_study(const std::string& json_path, const std::string& md_path, const std::string& device) {
  std::string json = "{\n  \"device\": \"" + device + "\",\n  \"rows\": [\n";
  std::string md = "| case | L | method | max abs dev | mean abs dev | math's mean / this |\n|---|---|---|---|---|---|\n";
  bool first = true;
  for (const DeviationCase& c : deviation_cases()) {
    for (int L : {256, 1024, 4096, 16384}) {
      at::Tensor ref;
      std::vector<std::tuple<std::string, double, double>> rows;  // method, max, mean
      for (const auto& [name, o] : deviation_outputs(c, L, ref)) {
        at::Tensor dev = (o.to(at::kDouble) - ref).abs();
        rows.emplace_back(name, dev.max().item<double>(), dev.mean().item<double>());
      }
      const double math_mean = std::get<2>(rows.back());  // deviation_outputs puts math last
      for (const auto& [name, mx, mean] : rows) {
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "%s    {\"case\": \"%s\", \"seqlen\": %d, \"method\": \"%s\", \"max_abs\": %.4e, "
                      "\"mean_abs\": %.4e, \"math_mean_over_this\": %.4f}",
                      first ? "" : ",\n", c.name().c_str(), L, name.c_str(), mx, mean, math_mean / mean);
        json += buf;
        first = false;
        std::snprintf(buf, sizeof buf, "| %s | %d | %s | %.3e | %.3e | %.2f |\n", c.name().c_str(), L, name.c_str(), mx,
                      mean, math_mean / mean);
        md += buf;
      }
    }
  }
  json += "\n  ]\n}\n";
  std::printf("\nDeviation of O from float64 (%s)\n%s", device.c_str(), md.c_str());
  if (!json_path.empty()) std::ofstream(json_path) << json;
  if (!md_path.empty()) std::ofstream(md_path) << "Device: " << device << ". One sequence per length, N(0,1) inputs; math: materialised softmax "
                                       "in fp32, rounded to the input dtype before P V.\n\n" << md;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, md_path;
  int reps = 20;
  bool only_ours = false;
  bool deviation = false;
  double softcap = 0.0;  // > 0: also time the soft-capped kernels
  std::string only_workload, dump_path;
  int only_dim = 0, only_hkv = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--md") && i + 1 < argc) md_path = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--only-ours")) only_ours = true;
    else if (!std::strcmp(argv[i], "--deviation")) deviation = true;
    else if (!std::strcmp(argv[i], "--workload") && i + 1 < argc) only_workload = argv[++i];
    else if (!std::strcmp(argv[i], "--head-dim") && i + 1 < argc) only_dim = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--heads-kv") && i + 1 < argc) only_hkv = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--softcap") && i + 1 < argc) softcap = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--dump-workloads") && i + 1 < argc) dump_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--out file.json] [--md file.md] [--reps N] [--only-ours] [--workload NAME] "
                   "[--head-dim D] [--heads-kv H] [--deviation] [--softcap CAP] [--dump-workloads file.json]\n", argv[0]);
      return 2;
    }
  }
  if (!dump_path.empty()) {  // no GPU needed
    dump_workloads(dump_path);
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  at::manual_seed(42);
  if (deviation) {
    deviation_study(json_path, md_path, prop.name);
    return 0;
  }
  const int hq = 32;
  std::vector<Row> rows;

  for (int d : {128, 64, 256}) {
    if (only_dim ? d != only_dim : d == 256) continue;  // 256 (Gemma) on request
    for (const Workload& w : workloads()) {
      if (!only_workload.empty() && w.name != only_workload) continue;
      for (const int hkv : w.heads_kv) {
        if (only_hkv && hkv != only_hkv) continue;
        const int batch = int(w.lens.size());
        std::vector<int> cu{0};
        double sum_sq = 0;
        int lmax = 0;
        for (int l : w.lens) {
          cu.push_back(cu.back() + l);
          sum_sq += double(l) * l;
          lmax = std::max(lmax, l);
        }
        const double fwd_flops = 2.0 * hq * d * sum_sq;  // causal
        const double fwdbwd_flops = 3.5 * fwd_flops;
        auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
        at::Tensor q = at::randn({kTokens, hq, d}, opts), k = at::randn({kTokens, hkv, d}, opts);
        at::Tensor v = at::randn({kTokens, hkv, d}, opts), dout = at::randn({kTokens, hq, d}, opts);
        at::Tensor cu_t = at::tensor(cu, at::TensorOptions().dtype(at::kInt)).to(at::kCUDA);
        const double scale = 1.0 / std::sqrt(double(d));
        auto add = [&](const std::string& method, double f, double fb) {
          rows.push_back({w.name, method, d, hkv, f, fb, fwd_flops / f * 1e-9, fwdbwd_flops / fb * 1e-9});
          std::printf("%-11s D=%-3d Hkv=%-2d %-14s fwd %8.3f ms %6.1f TF/s | fwd+bwd %8.3f ms %6.1f TF/s\n",
                      w.name.c_str(), d, hkv, method.c_str(), f, fwd_flops / f * 1e-9, fb, fwdbwd_flops / fb * 1e-9);
          std::fflush(stdout);
        };

        // Ours.
        fa::VarlenSpec spec;
        spec.cu_seqlens = cu_t;
        spec.max_seqlen = lmax;
        spec.softmax_scale = scale;
        {
          auto fwd = [&] { (void)fa::cuda::attention_forward(q, k, v, spec); };
          auto fwdbwd = [&] {
            auto [o, lse] = fa::cuda::attention_forward(q, k, v, spec);
            (void)fa::cuda::attention_backward(dout, q, k, v, o, lse, spec, false);
          };
          add("hopper", time_ms(fwd, reps), time_ms(fwdbwd, reps));
          if (softcap > 0) {  // the soft-capped kernels (Gemma 2) on the same inputs: their cost
            spec.softcap = softcap;
            add("hopper-softcap", time_ms(fwd, reps), time_ms(fwdbwd, reps));
            spec.softcap = 0.0;
          }
        }
        if (only_ours) continue;

        // LibTorch FlashAttention-2, varlen.
        try {
          auto fwd = [&] {
            (void)at::_flash_attention_forward(q, k, v, cu_t, cu_t, lmax, lmax, 0.0, true, false, scale);
          };
          auto fwdbwd = [&] {
            auto r = at::_flash_attention_forward(q, k, v, cu_t, cu_t, lmax, lmax, 0.0, true, false, scale);
            (void)at::_flash_attention_backward(dout, q, k, v, std::get<0>(r), std::get<1>(r), cu_t, cu_t, lmax, lmax,
                                                0.0, true, std::get<2>(r), std::get<3>(r), scale);
          };
          add("torch-fa2", time_ms(fwd, reps), time_ms(fwdbwd, reps));
        } catch (const std::exception& e) {
          std::printf("torch-fa2 failed: %s\n", e.what());
        }

        // cuDNN SDPA on the padded [B, H, Lmax, D] layout (K/V heads repeated for GQA).
        try {
          at::Tensor qp = at::zeros({batch, lmax, hq, d}, opts), kp = at::zeros({batch, lmax, hq, d}, opts);
          at::Tensor vp = at::zeros({batch, lmax, hq, d}, opts), dop = at::zeros({batch, lmax, hq, d}, opts);
          for (int b = 0; b < batch; ++b) {
            const int l = w.lens[b];
            qp[b].narrow(0, 0, l).copy_(q.narrow(0, cu[b], l));
            kp[b].narrow(0, 0, l).copy_(k.narrow(0, cu[b], l).repeat_interleave(hq / hkv, 1));
            vp[b].narrow(0, 0, l).copy_(v.narrow(0, cu[b], l).repeat_interleave(hq / hkv, 1));
            dop[b].narrow(0, 0, l).copy_(dout.narrow(0, cu[b], l));
          }
          at::Tensor qt = qp.transpose(1, 2), kt = kp.transpose(1, 2), vt = vp.transpose(1, 2), dot = dop.transpose(1, 2);
          auto fwd = [&] { (void)at::_scaled_dot_product_cudnn_attention(qt, kt, vt, std::nullopt, false, 0.0, true, false, scale); };
          auto fwdbwd = [&] {
            auto r = at::_scaled_dot_product_cudnn_attention(qt, kt, vt, std::nullopt, true, 0.0, true, false, scale);
            (void)at::_scaled_dot_product_cudnn_attention_backward(dot, qt, kt, vt, std::get<0>(r), std::get<1>(r),
                                                                   std::get<6>(r), std::get<7>(r), at::Tensor(),
                                                                   at::Tensor(), at::Tensor(), lmax, lmax, 0.0, true,
                                                                   scale);
          };
          add("cudnn-padded", time_ms(fwd, reps), time_ms(fwdbwd, reps));
        } catch (const std::exception& e) {
          std::printf("cudnn-padded failed: %s\n", std::string(e.what()).substr(0, 300).c_str());
        }
      }
    }
  }

  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\n  \"device\": \"" << prop.name << "\",\n  \"date\": \"" << date << "\",\n  \"tokens\": " << kTokens
      << ",\n  \"heads_q\": " << hq << ",\n  \"dtype\": \"bf16\",\n  \"causal\": true,\n  \"results\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      char buf[400];
      std::snprintf(buf, sizeof buf,
                    "    {\"workload\": \"%s\", \"method\": \"%s\", \"head_dim\": %d, \"heads_kv\": %d, "
                    "\"fwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"fwdbwd_ms\": %.4f, \"fwdbwd_tflops\": %.1f}%s\n",
                    r.workload.c_str(), r.method.c_str(), r.head_dim, r.heads_kv, r.fwd_ms, r.fwd_tflops, r.fwdbwd_ms,
                    r.fwdbwd_tflops, i + 1 < rows.size() ? "," : "");
      f << buf;
    }
    f << "  ]\n}\n";
  }
  std::string md = std::string("Device: ") + prop.name + ", " + date +
                   ". bf16, causal, Hq=32, T=32768 packed tokens; TFLOP/s of useful work.\n\n"
                   "| workload | D | Hkv | method | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |\n"
                   "|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "| %s | %d | %d | %s | %.3f | %.1f | %.3f | %.1f |\n", r.workload.c_str(),
                  r.head_dim, r.heads_kv, r.method.c_str(), r.fwd_ms, r.fwd_tflops, r.fwdbwd_ms, r.fwdbwd_tflops);
    md += buf;
  }
  std::printf("\n%s", md.c_str());
  if (!md_path.empty()) std::ofstream(md_path) << md;
  return 0;
}
#else
#include <cstdio>
int main() {
  std::fprintf(stderr, "attention_bench: built without FPTRAIN_CUDA, no kernels to time\n");
  return 1;
}
#endif
