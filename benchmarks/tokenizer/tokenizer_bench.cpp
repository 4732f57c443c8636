// Tokenizer throughput of fptrain on one thread: encodes every text of a JSONL
// file (one JSON string per line) one at a time, several rounds, and prints a
// JSON result. run_tokenizer_bench.py times Hugging Face tokenizers on the same
// texts in the same run and compares.
//
//   tokenizer_bench TOKENIZER_DIR TEXTS.jsonl [ROUNDS]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR TEXTS.jsonl [ROUNDS]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
  try {
    std::vector<std::string> texts;
    std::ifstream in(argv[2]);
    if (!in) throw std::runtime_error(std::string(argv[2]) + ": cannot open");
    std::string line;
    size_t bytes = 0;
    while (std::getline(in, line)) {
      texts.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += texts.back().size();
    }
    const auto load_start = std::chrono::steady_clock::now();
    const auto tok = fptrain::tokenizer::load_tokenizer(argv[1]);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

    std::vector<double> seconds;
    size_t tokens = 0;
    uint64_t checksum = 0;
    for (int r = 0; r < rounds; ++r) {
      tokens = 0;
      checksum = 0;
      const auto start = std::chrono::steady_clock::now();
      for (const auto& t : texts) {
        const auto ids = tok->encode(t, /*add_special_tokens=*/false);
        tokens += ids.size();
        for (int32_t id : ids) checksum = checksum * 1000003u + static_cast<uint32_t>(id);
      }
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    // Round 1 starts with an empty word cache; the best round is the steady state.
    const double best = *std::min_element(seconds.begin(), seconds.end());
    nlohmann::json out = {{"texts", texts.size()},         {"bytes", bytes},
                          {"tokens", tokens},              {"checksum", std::to_string(checksum)},
                          {"load_seconds", load_s},        {"seconds_per_round", seconds},
                          {"first_round_tokens_per_s", tokens / seconds.front()},
                          {"tokens_per_s", tokens / best}, {"mb_per_s", bytes / best / 1e6}};
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
