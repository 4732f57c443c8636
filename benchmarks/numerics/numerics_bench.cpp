// The forward microbenchmark of "Is Flash Attention Stable?" (Golden et al., arXiv
// 2405.02803), on an emulation: flash attention's tiled forward with online softmax
// and baseline attention (the materialised softmax), both computed in float64 with
// every intermediate result's mantissa cut to a chosen number of bits (the paper's
// way to emulate a lower precision), against the exact float64 result. It sweeps
// what our kernels cannot vary: the intermediate precision, the sequence length, the
// tile size and the tile shape. Our real kernels' deviation at bf16 is
// attention_bench --deviation's (benchmarks/attention); run_gpu.sh writes both.
//
//   numerics_bench [--device cuda|cpu] [--max-len L] [--json F] [--md F] [--check]
//
// --check: small sizes on any device; exits 1 unless the emulations with all 52 bits
// equal exact attention (1e-12) and fewer bits deviate more.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {

constexpr int kHeadDim = 128;      // our kernels' head size
constexpr int kFullMantissa = 52;  // float64

// x with its float64 mantissa cut to `bits` bits (toward zero), as the paper emulates precision.
at::Tensor cut(const at::Tensor& x, int bits) {
  if (bits >= kFullMantissa) return x;
  const int64_t mask = ~((int64_t{1} << (kFullMantissa - bits)) - 1);
  return at::bitwise_and(x.contiguous().view(at::kLong), mask).view(at::kDouble);
}

// Causal mask of the scores of query rows [r0, r0 + rows) against keys [c0, c0 + cols): true = hidden.
at::Tensor hidden(int64_t r0, int64_t rows, int64_t c0, int64_t cols, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  return at::arange(c0, c0 + cols, opts).unsqueeze(0) > at::arange(r0, r0 + rows, opts).unsqueeze(1);
}

// Baseline attention: S = QK^T * scale, softmax (max subtracted), O = PV; each result cut.
at::Tensor baseline(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int bits) {
  const int64_t L = q.size(0);
  const double scale = 1.0 / std::sqrt(double(q.size(1)));
  at::Tensor s = cut(cut(at::matmul(q, k.t()), bits) * scale, bits);
  s = s.masked_fill(hidden(0, L, 0, L, q.device()), -std::numeric_limits<double>::infinity());
  const at::Tensor p = cut(at::exp(cut(s - std::get<0>(s.max(1, true)), bits)), bits);
  return cut(at::matmul(cut(p / cut(p.sum(1, true), bits), bits), v), bits);
}

// Flash attention's forward (FlashAttention-2's loop order: each query tile keeps a running
// max m, sum l and unnormalised output o over the key tiles; all query tiles at once), tiles of
// `br` query rows by `bc` keys, each intermediate cut to `bits`. L a multiple of both.
at::Tensor flash(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int bits, int64_t br, int64_t bc) {
  const int64_t L = q.size(0), d = q.size(1), tiles = L / br;
  const double scale = 1.0 / std::sqrt(double(d));
  const at::Tensor qt = q.view({tiles, br, d});
  at::Tensor m = at::full({tiles, br, 1}, -std::numeric_limits<double>::infinity(), q.options());
  at::Tensor l = at::zeros({tiles, br, 1}, q.options()), o = at::zeros({tiles, br, d}, q.options());
  const auto rows = at::arange(L, at::TensorOptions().dtype(at::kLong).device(q.device())).view({tiles, br, 1});
  for (int64_t c0 = 0; c0 < L; c0 += bc) {
    const int64_t first = c0 / br;  // the query tiles that see any of these keys
    const at::Tensor kj = k.narrow(0, c0, bc), vj = v.narrow(0, c0, bc);
    const at::Tensor cols = at::arange(c0, c0 + bc, rows.options()).view({1, 1, bc});
    at::Tensor s = cut(cut(at::matmul(qt.narrow(0, first, tiles - first), kj.t()), bits) * scale, bits);
    s = s.masked_fill(cols > rows.narrow(0, first, tiles - first), -std::numeric_limits<double>::infinity());
    const at::Tensor m_old = m.narrow(0, first, tiles - first);
    const at::Tensor m_new = at::maximum(m_old, std::get<0>(s.max(2, true)));
    const at::Tensor p = cut(at::exp(cut(s - m_new, bits)), bits);
    const at::Tensor correction = cut(at::exp(cut(m_old - m_new, bits)), bits);
    at::Tensor l_tiles = l.narrow(0, first, tiles - first), o_tiles = o.narrow(0, first, tiles - first);
    l_tiles.copy_(cut(cut(l_tiles * correction, bits) + cut(p.sum(2, true), bits), bits));
    o_tiles.copy_(cut(cut(o_tiles * correction, bits) + cut(at::matmul(p, vj), bits), bits));
    m_old.copy_(m_new);
  }
  return cut(o / l, bits).view({L, d});
}

// Exact attention in float64 by query chunks (the golden result).
at::Tensor golden(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t L = q.size(0), chunk = 2048;
  at::Tensor out = at::empty_like(q);
  for (int64_t r0 = 0; r0 < L; r0 += chunk) {
    const int64_t n = std::min(chunk, L - r0);
    at::Tensor s = at::matmul(q.narrow(0, r0, n), k.t()) / std::sqrt(double(q.size(1)));
    s = s.masked_fill(hidden(r0, n, 0, L, q.device()), -std::numeric_limits<double>::infinity());
    out.narrow(0, r0, n).copy_(at::matmul(at::softmax(s, 1), v));
  }
  return out;
}

struct Inputs {
  at::Tensor q, k, v, exact;
};

// One causal head of length L: N(0, 1) values rounded to bf16 (what the kernels read), then float64.
Inputs make_inputs(int64_t L, const at::Device& device, uint64_t seed) {
  at::manual_seed(seed);
  auto draw = [&] { return at::randn({L, kHeadDim}).to(at::kBFloat16).to(at::kDouble).to(device); };
  Inputs in{draw(), draw(), draw(), {}};
  in.exact = golden(in.q, in.k, in.v);
  return in;
}

struct Row {
  std::string sweep;
  int64_t seqlen, br, bc;
  int bits;
  double flash_max, flash_mean, base_max, base_mean;
};

Row measure(const std::string& sweep, const Inputs& in, int bits, int64_t br, int64_t bc) {
  const at::Tensor f = (flash(in.q, in.k, in.v, bits, br, bc) - in.exact).abs();
  const at::Tensor b = (baseline(in.q, in.k, in.v, bits) - in.exact).abs();
  return {sweep, in.q.size(0), br, bc, bits, f.max().item<double>(), f.mean().item<double>(),
          b.max().item<double>(), b.mean().item<double>()};
}

// Baseline attention materialises [L, L]: past this length it runs in query chunks would be
// needed; the sweeps stop at it (16k: 2 GiB of float64 scores).
std::vector<Row> run_sweeps(const at::Device& device, int64_t max_len) {
  std::vector<Row> rows;
  for (int64_t L = 256; L <= max_len; L *= 4) {  // precision x sequence length, tiles 128 x 128 (ours)
    const Inputs in = make_inputs(L, device, 1);
    for (int bits : {23, 10, 7}) rows.push_back(measure("precision", in, bits, 128, 128));
  }
  const int64_t L = std::min<int64_t>(4096, max_len);
  const Inputs in = make_inputs(L, device, 2);
  for (int64_t t : {16, 32, 64, 128, 256}) rows.push_back(measure("tile size", in, 7, t, t));
  for (int64_t br : {32, 64, 128, 256, 512}) rows.push_back(measure("tile shape", in, 7, br, 128 * 128 / br));
  return rows;
}

std::string to_json(const std::vector<Row>& rows, const std::string& device) {
  std::string s = "{\n  \"device\": \"" + device + "\",\n  \"head_dim\": 128,\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "    {\"sweep\": \"%s\", \"seqlen\": %lld, \"tile_rows\": %lld, \"tile_cols\": %lld, "
                  "\"mantissa_bits\": %d, \"flash_max\": %.4e, \"flash_mean\": %.4e, \"baseline_max\": %.4e, "
                  "\"baseline_mean\": %.4e}%s\n",
                  r.sweep.c_str(), (long long)r.seqlen, (long long)r.br, (long long)r.bc, r.bits, r.flash_max,
                  r.flash_mean, r.base_max, r.base_mean, i + 1 < rows.size() ? "," : "");
    s += buf;
  }
  return s + "  ]\n}\n";
}

std::string to_markdown(const std::vector<Row>& rows, const std::string& device) {
  std::string s = "Emulated attention forward, one causal head, head_dim 128, N(0,1) inputs in bf16; every "
                  "intermediate cut to the mantissa bits shown (23: fp32, 10: fp16, 7: bf16); deviation from "
                  "exact float64. Device: " + device + ".\n\n"
                  "| sweep | L | tile | bits | flash max | flash mean | baseline max | baseline mean | flash / baseline (mean) |\n"
                  "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const Row& r : rows) {
    char buf[300];
    std::snprintf(buf, sizeof buf, "| %s | %lld | %lld x %lld | %d | %.3e | %.3e | %.3e | %.3e | %.2f |\n",
                  r.sweep.c_str(), (long long)r.seqlen, (long long)r.br, (long long)r.bc, r.bits, r.flash_max,
                  r.flash_mean, r.base_max, r.base_mean, r.flash_mean / r.base_mean);
    s += buf;
  }
  return s;
}

// Small sizes: with all 52 bits both emulations are exact attention; fewer bits deviate more.
int check(const at::Device& device) {
  const Inputs in = make_inputs(256, device, 3);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) ++failures;
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  };
  for (auto [br, bc] : {std::pair<int64_t, int64_t>{64, 64}, {32, 128}, {128, 32}}) {
    const double err = (flash(in.q, in.k, in.v, kFullMantissa, br, bc) - in.exact).abs().max().item<double>();
    expect(err < 1e-12, "flash " + std::to_string(br) + "x" + std::to_string(bc) + " at 52 bits: " +
                            std::to_string(err));
  }
  expect((baseline(in.q, in.k, in.v, kFullMantissa) - in.exact).abs().max().item<double>() < 1e-12,
         "baseline at 52 bits is exact");
  const Row r23 = measure("check", in, 23, 64, 64), r7 = measure("check", in, 7, 64, 64);
  expect(r7.flash_mean > 10 * r23.flash_mean && r7.base_mean > 10 * r23.base_mean, "7 bits deviate more than 23");
  expect(cut(at::full({1}, 1.0 + 1.0 / 3, at::kDouble), 7).item<double>() == 1.328125, "a cut keeps 7 bits");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = at::hasCUDA() ? "cuda" : "cpu", json_path, md_path;
  int64_t max_len = 16384;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") device_name = value();
    else if (a == "--max-len") max_len = std::stoll(value());
    else if (a == "--json") json_path = value();
    else if (a == "--md") md_path = value();
    else if (a == "--check") check_only = true;
    else {
      std::fprintf(stderr, "usage: numerics_bench [--device cuda|cpu] [--max-len L] [--json F] [--md F] [--check]\n");
      return 2;
    }
  }
  const at::Device device(device_name);
  if (check_only) return check(device);
  const std::vector<Row> rows = run_sweeps(device, max_len);
  const std::string md = to_markdown(rows, device_name);
  std::printf("%s", md.c_str());
  if (!json_path.empty()) std::ofstream(json_path) << to_json(rows, device_name);
  if (!md_path.empty()) std::ofstream(md_path) << md;
  return 0;
}
