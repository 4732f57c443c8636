// Data-pipeline throughput: JSONL -> tokens, masks and micro-batches, per
// batching mode, with tokenization on the producer thread only (workers = 0),
// so the number is what one core delivers. Writes a JSON result.
//
//   data_pipeline_bench --data flan.jsonl --tokenizer DIR [--chat-template llama2]
//                       [--max-length 4096] [--examples-per-micro-batch 8]
//                       [--max-tokens 16384] [--modes flatten,pad,pack] [--out result.json]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/data_pipeline.h"
#include "data/data_report.h"

using namespace fptrain::data;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of the whole process: on a shared machine the honest measure of
// what one core does (the consumer thread only waits).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"--chat-template", "auto"},
                                             {"--max-length", "4096"},
                                             {"--examples-per-micro-batch", "8"},
                                             {"--max-tokens", "16384"},
                                             {"--modes", "flatten,pad,pack"},
                                             {"--out", ""}};
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  if (!args.count("--data") || !args.count("--tokenizer")) {
    std::cerr << "usage: data_pipeline_bench --data FILE.jsonl --tokenizer DIR [options]\n";
    return 2;
  }
  try {
    DataOptions o;
    o.files = {{args["--data"], 1.0, ExampleFormat::kAuto}};
    o.tokenizer_dir = args["--tokenizer"];
    o.chat_template = fptrain::common::parse_enum<ChatTemplateKind>(args["--chat-template"], "--chat-template");
    o.max_length = std::stoll(args["--max-length"]);
    o.examples_per_micro_batch = std::stoll(args["--examples-per-micro-batch"]);
    o.max_tokens = std::stoll(args["--max-tokens"]);
    o.shuffle = true;
    o.workers = 0;
    o.prefetch_steps = 4;
    std::shared_ptr<const fptrain::tokenizer::Tokenizer> tok = fptrain::tokenizer::load_tokenizer(o.tokenizer_dir);

    nlohmann::json result = {{"data", args["--data"]},
                             {"tokenizer", args["--tokenizer"]},
                             {"max_length", o.max_length},
                             {"examples_per_micro_batch", o.examples_per_micro_batch},
                             {"max_tokens", o.max_tokens},
                             {"threads", "one producer thread (workers = 0)"}};
    {
      const auto t0 = std::chrono::steady_clock::now();
      ExampleSource source(o, tok.get());
      result["index_seconds"] = seconds_since(t0);
      result["lines"] = source.file(0).num_lines();
      result["chat_template"] = source.chat_template_label();
      result["format"] = fptrain::common::enum_name(source.format(0));
    }
    std::stringstream modes(args["--modes"]);
    std::string mode;
    while (std::getline(modes, mode, ',')) {
      DataOptions mo = o;
      mo.batching = fptrain::common::parse_enum<BatchMode>(mode, "--modes");
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      DataPipeline pipeline(mo, tok);
      int64_t examples = 0, tokens = 0, padding = 0, supervised = 0, micro_batches = 0;
      std::vector<double> lengths;
      while (auto step = pipeline.next_step()) {
        for (const auto& mb : step->micro_batches) {
          if (mo.batching != BatchMode::kPad)
            for (size_t i = 0; i + 1 < mb.cu_seqlens.size(); ++i) lengths.push_back(mb.cu_seqlens[i + 1] - mb.cu_seqlens[i]);
          examples += mb.num_examples;
          tokens += mb.num_tokens;
          padding += mb.num_padding_tokens;
          supervised += mb.num_supervised;
          micro_batches += mb.num_examples > 0;
        }
      }
      const double wall = seconds_since(t0);
      if (!lengths.empty() && !result.contains("lengths")) {
        // The token-length distribution of the file, to check the generator's profile.
        std::sort(lengths.begin(), lengths.end());
        double log_mean = 0, log_var = 0;
        for (double l : lengths) log_mean += std::log(l) / lengths.size();
        for (double l : lengths) log_var += (std::log(l) - log_mean) * (std::log(l) - log_mean) / lengths.size();
        result["lengths"] = {{"median", lengths[lengths.size() / 2]},
                             {"p90", lengths[lengths.size() * 9 / 10]},
                             {"max", lengths.back()},
                             {"mean", tokens / static_cast<double>(lengths.size())},
                             {"log_sigma", std::sqrt(log_var)}};
      }
      const double s = cpu_seconds() - c0;
      const int64_t real = tokens - padding;
      result["modes"].push_back({{"mode", mode},
                                 {"cpu_seconds", s},
                                 {"wall_seconds", wall},
                                 {"examples", examples},
                                 {"tokens", real},
                                 {"padding_tokens", padding},
                                 {"supervised_tokens", supervised},
                                 {"micro_batches", micro_batches},
                                 {"examples_per_second", examples / s},
                                 {"tokens_per_second", real / s}});
      std::printf("%-8s %8lld examples %11lld tokens in %7.2f CPU s (%7.2f wall): %9.0f examples/s %11.0f tokens/s\n",
                  mode.c_str(), (long long)examples, (long long)real, s, wall, examples / s, real / s);
      std::fflush(stdout);
    }
    {
      // What `fptrain data` shows for this file: padding of pad mode, pack fill rate, tokens per step.
      const DataReport report = make_data_report(o, tok);
      print_data_report(std::cout, report);
      result["report"] = data_report_json(report);
    }
    const std::string out = args["--out"];
    if (!out.empty()) std::ofstream(out) << result.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "data_pipeline_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
