#include "apps/fptrain/init/tokenizer_builder.h"

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <unordered_map>

namespace fptrain::app {
namespace {

using ordered_json = nlohmann::ordered_json;

class VectorSentences : public sentencepiece::SentenceIterator {
 public:
  explicit VectorSentences(const std::vector<std::string>& s) : s_(s) {}
  bool done() const override { return i_ >= s_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return s_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& s_;
  size_t i_ = 0;
};

// SentencePiece logs its training to stderr; keep the console for fptrain's own output.
class SilenceStderr {
 public:
  SilenceStderr() {
    std::fflush(stderr);
    saved_ = dup(2);
    FILE* null = std::fopen("/dev/null", "w");
    if (null) {
      dup2(fileno(null), 2);
      std::fclose(null);
    }
  }
  ~SilenceStderr() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      dup2(saved_, 2);
      close(saved_);
    }
  }

 private:
  int saved_ = -1;
};

// Start offsets of the UTF-8 characters of s.
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  return starts;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

}  // namespace

std::string tokenizer_json_from_sentencepiece(const std::string& serialized_model_proto) {
  sentencepiece::SentencePieceProcessor sp;
  auto status = sp.LoadFromSerializedProto(serialized_model_proto);
  if (!status.ok()) throw std::runtime_error("SentencePiece model: " + status.ToString());

  const int n = sp.GetPieceSize();
  std::unordered_map<std::string, int> vocab;
  ordered_json vocab_json = ordered_json::object();
  for (int id = 0; id < n; ++id) {
    vocab[sp.IdToPiece(id)] = id;
    vocab_json[sp.IdToPiece(id)] = id;
  }

  // A merge (left, right) for every way a normal piece splits into two pieces
  // of the vocabulary; ranked by the merged piece's score, best first, as
  // SentencePiece's BPE applies them.
  struct Merge {
    std::string left, right;
    float score;
    int left_id, right_id;
  };
  std::vector<Merge> merges;
  for (int id = 0; id < n; ++id) {
    if (sp.IsControl(id) || sp.IsUnknown(id) || sp.IsByte(id) || sp.IsUnused(id)) continue;
    const std::string piece = sp.IdToPiece(id);
    std::vector<Merge> local;
    for (size_t cut : char_starts(piece)) {
      if (cut == 0) continue;
      auto l = vocab.find(piece.substr(0, cut)), r = vocab.find(piece.substr(cut));
      if (l == vocab.end() || r == vocab.end()) continue;
      local.push_back({l->first, r->first, sp.GetScore(id), l->second, r->second});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return std::tie(a.left_id, a.right_id) < std::tie(b.left_id, b.right_id);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  ordered_json merges_json = ordered_json::array();
  for (const auto& m : merges) merges_json.push_back({m.left, m.right});

  ordered_json added = ordered_json::array();
  for (int id = 0; id < n; ++id) {
    if (!(sp.IsControl(id) || sp.IsUnknown(id))) continue;
    added.push_back({{"id", id}, {"content", sp.IdToPiece(id)}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  const std::string bos = sp.IdToPiece(sp.bos_id());
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary mark

  ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = added;
  doc["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "Prepend"}, {"prepend", space}},
                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}}}};
  doc["pre_tokenizer"] = nullptr;
  doc["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair",
       {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
        {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
      {"special_tokens", {{bos, {{"id", bos}, {"ids", {sp.bos_id()}}, {"tokens", {bos}}}}}}};
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  doc["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", sp.IdToPiece(sp.unk_id())},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},
                  {"byte_fallback", true},
                  {"ignore_merges", false},
                  {"vocab", vocab_json},
                  {"merges", merges_json}};
  return doc.dump(2);
}

void build_tokenizer(const std::vector<std::string>& sentences, const std::filesystem::path& dir,
                     const TokenizerBuildOptions& options) {
  if (sentences.empty()) throw std::invalid_argument("tokenizer: no training text");
  if (options.vocab_size < 300)
    throw std::invalid_argument("tokenizer: vocab_size " + std::to_string(options.vocab_size) +
                                " is too small (256 byte tokens + specials + pieces; use >= 300)");
  std::filesystem::create_directories(dir);
  // Llama-2 conventions: identity normalization, a dummy prefix, digits split,
  // unknown characters as bytes; <pad> exists so that padded batches never pad with EOS.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "true"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"hard_vocab_limit", "false"},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"pad_id", std::to_string(kPadId)},
      {"pad_piece", "<pad>"},
      {"input_sentence_size", "200000"},
      {"shuffle_input_sentence", "true"},
      {"num_threads", "2"},
  };
  std::string proto;
  {
    VectorSentences it(sentences);
    SilenceStderr quiet;
    auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
    if (!status.ok()) throw std::runtime_error("SentencePiece training failed: " + status.ToString());
  }
  write_file(dir / "tokenizer.model", proto);
  write_file(dir / "tokenizer.json", tokenizer_json_from_sentencepiece(proto));

  ordered_json cfg;
  // The generic class loads tokenizer.json exactly as written (LlamaTokenizer would rebuild
  // its pre-tokenizer and treat a leading space differently from SentencePiece).
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  cfg["bos_token"] = "<s>";
  cfg["eos_token"] = "</s>";
  cfg["unk_token"] = "<unk>";
  cfg["pad_token"] = "<pad>";
  cfg["add_bos_token"] = true;
  cfg["add_eos_token"] = false;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["legacy"] = false;
  cfg["model_max_length"] = options.model_max_length;
  if (!options.chat_template.empty()) cfg["chat_template"] = options.chat_template;
  write_file(dir / "tokenizer_config.json", cfg.dump(2));

  ordered_json special = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}};
  write_file(dir / "special_tokens_map.json", special.dump(2));
}

}  // namespace fptrain::app
