// The host's AdamW step alone, on the CPU (optimizer.offload: cpu runs it on each bucket):
// elements per CPU-second (= per thread) of the 8-bit step and of the fp32-moment step, bf16
// weights with split masters, over several steps so the moments evolve, for two kinds of
// gradients (gradient_data.h): "normal" (N(0, 1e-3), what offload_bench fills) and "realistic"
// (magnitudes over ~10 decades, zero rows, a few whose squares are subnormal). Also how often
// a moment's code falls in a run of the code lookup that holds a step (optim/blockwise8.h;
// those codes were searched until the lookup's entries held the step). CPU time of the
// process, so a busy machine inflates the wall time, not the rate; median over the steps
// after the first.
//
//   host_step_bench [--elements N] [--steps S] [--threads T] [--data normal,realistic[,subnormal]] [--out DIR]
#include "benchmarks/train/bench_setup.h"
#include "benchmarks/train/gradient_data.h"
#include "optim/blockwise8.h"
#include "optim/flat_adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cfloat>
#include <cstdio>
#include <ctime>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace fptrain;
namespace b8 = optim::blockwise8;

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.empty() ? 0.0 : x[x.size() / 2];
}

// The share of moment codes of the coming 8-bit step in runs with a step: the step's own
// phase 1 (blockwise8_math.h) replayed on its state, then asked of the lookups.
double step_run_share(const optim::flat::Moments8bit& q, const at::Tensor& grads, const b8::Scalars& s) {
  const at::Tensor g32 = grads.to(at::kFloat);
  const float* g = g32.data_ptr<float>();
  const uint8_t *mc = q.exp_avg.data_ptr<uint8_t>(), *vc = q.exp_avg_sq.data_ptr<uint8_t>();
  const float *ma = q.exp_avg_absmax.data_ptr<float>(), *va = q.exp_avg_sq_absmax.data_ptr<float>();
  const b8::CodeBooks& books = b8::code_books();
  int64_t in_step = 0;
  float m[b8::kBlock], v[b8::kBlock];
  for (int64_t b = 0; b < grads.numel() / b8::kBlock; ++b) {
    float m_max = -FLT_MAX, v_max = -FLT_MAX;
    for (int64_t k = 0; k < b8::kBlock; ++k) {
      const int64_t i = b * b8::kBlock + k;
      b8::update_moments(g[i], 1.0f, b8::dequantize(books.exp_avg, mc[i], ma[b]),
                         b8::dequantize(books.exp_avg_sq, vc[i], va[b]), m[k], v[k], s);
      m_max = b8::max_abs(m_max, m[k]);
      v_max = b8::max_abs(v_max, v[k]);
    }
    for (int64_t k = 0; k < b8::kBlock; ++k)
      in_step += b8::exp_avg_lookup().in_step_run(b8::f_div(m[k], m_max)) +
                  b8::exp_avg_sq_lookup().in_step_run(b8::f_div(v[k], v_max));
  }
  return static_cast<double>(in_step) / static_cast<double>(2 * grads.numel());
}

struct State {
  at::Tensor weights, remainder, grads, m, v;
  optim::flat::Moments8bit q;
};

State make_state(int64_t n) {
  State st;
  const at::Tensor w = at::randn({n}) * 0.02;
  st.weights = at::empty({n}, at::kBFloat16);
  st.remainder = at::empty({n}, at::kShort);
  optim::flat::split_masters(w, st.weights, st.remainder);
  st.m = at::zeros({n});
  st.v = at::zeros({n});
  st.q = {at::zeros({n}, at::kByte), at::zeros({n}, at::kByte), at::zeros({n / b8::kBlock}),
          at::zeros({n / b8::kBlock})};
  return st;
}

// `steps` steps of one form on fresh state; per step the CPU seconds (and the search share).
nlohmann::ordered_json measure(const std::string& data, bool eight_bit, int64_t n, int steps) {
  at::manual_seed(11);
  State st = make_state(n);
  std::vector<double> rate, wall, share;
  optim::flat::AdamWHyper h;
  h.lr = 1e-4;
  h.weight_decay = 0.1;
  for (int t = 1; t <= steps; ++t) {
    st.grads = bench::gradients(data, n);  // untimed: what the backward and the copies leave
    h.step = t;
    if (eight_bit) share.push_back(step_run_share(st.q, st.grads, b8::make_scalars(h.lr, h.beta1, h.beta2, h.eps,
                                                                                   h.weight_decay, t)));
    const double c0 = cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    if (eight_bit) optim::flat::adamw8bit_step(st.weights, st.remainder, st.q, st.grads, {}, {}, h);
    else optim::flat::adamw_step(st.weights, st.remainder, st.m, st.v, st.grads, {}, {}, h);
    const double cpu = cpu_seconds() - c0;
    if (t == 1) continue;  // first touches and the all-zero moments of step 1
    rate.push_back(static_cast<double>(n) / cpu / 1e6);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  nlohmann::ordered_json r = {{"data", data},
                              {"moments", eight_bit ? "8-bit" : "fp32"},
                              {"m_elements_per_cpu_s", median(rate)},
                              {"rates", rate},
                              {"wall_s_median", median(wall)}};
  if (eight_bit) r["step_run_share"] = share;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t{1} << 24;
  int steps = 6, threads = 1;
  std::string data_list = "normal,realistic", out_dir;
  // Unknown options are ignored, as they always were here.
  bench::parse_options(argc, argv,
                       {{"--elements", [&](const std::string& v) { n = std::stoll(v) / b8::kBlock * b8::kBlock; }},
                        {"--steps", [&](const std::string& v) { steps = std::stoi(v); }},
                        {"--threads", [&](const std::string& v) { threads = std::stoi(v); }},
                        {"--data", [&](const std::string& v) { data_list = v; }},
                        {"--out", [&](const std::string& v) { out_dir = v; }}});
  at::set_num_threads(threads);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::stringstream names(data_list);
  for (std::string data; std::getline(names, data, ',');)
    for (const bool eight_bit : {true, false}) {
      rows.push_back(measure(data, eight_bit, n, steps));
      std::printf("%s\n", rows.back().dump().c_str());
      std::fflush(stdout);
    }
  const nlohmann::ordered_json report = {{"elements", n}, {"steps", steps}, {"threads", threads}, {"rows", rows}};
  if (!out_dir.empty()) bench::write_json(out_dir, "host-step-bench.json", report);
  return 0;
}
