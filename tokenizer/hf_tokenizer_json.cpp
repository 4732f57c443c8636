#include "tokenizer/hf_tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "common/json_input.h"

#include "tokenizer/bpe_model.h"
#include "tokenizer/metaspace_words.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/tokenizer_pipeline.h"

namespace fptrain::tokenizer {
namespace {

// transformers 5 keeps tokenizer.json's pipeline for these classes and
// rebuilds it (from vocab, merges and post_processor only) for the others.
enum class TransformersClass { kFileAsIs, kLlama, kGpt2, kQwen2, kGemma };

TransformersClass classify(const std::optional<std::string>& cls, const std::string& file) {
  if (!cls || *cls == "PreTrainedTokenizerFast" || *cls == "TokenizersBackend") return TransformersClass::kFileAsIs;
  if (*cls == "LlamaTokenizer" || *cls == "LlamaTokenizerFast") return TransformersClass::kLlama;
  if (*cls == "GPT2Tokenizer" || *cls == "GPT2TokenizerFast") return TransformersClass::kGpt2;
  if (*cls == "Qwen2Tokenizer" || *cls == "Qwen2TokenizerFast") return TransformersClass::kQwen2;
  if (*cls == "GemmaTokenizer" || *cls == "GemmaTokenizerFast") return TransformersClass::kGemma;
  spdlog::warn("{}: tokenizer_class '{}' is tokenized as tokenizer.json describes; transformers' class may differ",
               file, common::cut_text(*cls));
  return TransformersClass::kFileAsIs;
}

// Qwen2Tokenizer.__init__'s pre-tokenizer regex (Qwen2 and Qwen3 tokenizers).
constexpr const char* kQwen2PretokenizeRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct BpeSpec {
  std::vector<std::string> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  BpeOptions options;
};

// Ids are stored in a vector indexed by id, so a corrupt id would allocate
// without bound: ids must stay below a limit derived from the file's size,
// twice its number of tokens (vocab entries plus added tokens) plus 1024, which
// leaves room for the gaps real vocabularies have.
int64_t id_limit(const JsonNode& doc) {
  const JsonNode vocab = doc["model"]["vocab"];
  const JsonNode added = doc["added_tokens"];
  const int64_t entries = static_cast<int64_t>(vocab.is_object() ? vocab.json().size() : 0) +
                          static_cast<int64_t>(added.is_array() ? added.json().size() : 0);
  return std::min<int64_t>(2 * entries + 1024, std::numeric_limits<int32_t>::max());
}

std::string id_limit_reason(int64_t limit) {
  return " (ids above " + std::to_string(limit - 1) +
         ", twice the file's number of tokens plus 1024, mean a corrupt file)";
}

BpeSpec read_bpe(const JsonNode& model, int64_t id_limit) {
  const std::string type = model.string_or("type", "BPE");
  if (type != "BPE") model["type"].fail("unsupported model type '" + common::cut_text(type) + "' (only BPE)");
  const JsonNode dropout = model["dropout"];
  if (!dropout.is_null() && dropout.number() != 0.0)
    dropout.fail("BPE dropout is not supported (it makes tokenization random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.string_or(key, "").empty()) model[key].fail(std::string("BPE ") + key + " is not supported");
  }
  BpeSpec spec;
  const JsonNode vocab = model.required("vocab");
  for (const auto& [token, id_node] : vocab.entries()) {
    const int64_t id = id_node.integer_in(0, id_limit - 1, id_limit_reason(id_limit));
    if (static_cast<size_t>(id) >= spec.vocab.size()) spec.vocab.resize(id + 1);
    spec.vocab[id] = token;
  }
  const JsonNode merges = model.required("merges");
  const std::vector<JsonNode> merge_list = merges.elements();
  spec.merges.reserve(merge_list.size());
  for (const JsonNode& m : merge_list) {
    if (m.is_string()) {  // "left right"
      const std::string s = m.string();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        m.fail("merge '" + common::cut_text(s) + "' is not two tokens separated by one space");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.json().size() == 2 && m.json()[0].is_string() && m.json()[1].is_string()) {
      spec.merges.emplace_back(m.json()[0].get<std::string>(), m.json()[1].get<std::string>());  // ["left", "right"]
    } else {
      m.fail("merge " + common::json_excerpt(m.json()) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  const JsonNode unk = model["unk_token"];
  if (unk.is_string()) spec.options.unk_token = unk.string();
  spec.options.fuse_unk = model.boolean_or("fuse_unk", false);
  spec.options.byte_fallback = model.boolean_or("byte_fallback", false);
  spec.options.ignore_merges = model.boolean_or("ignore_merges", false);
  return spec;
}

// GemmaTokenizer.__init__: byte-fallback BPE fusing unknowns, spaces replaced
// by U+2581 (no prefix space), a split on spaces that the replacement leaves
// nothing to split, and the decoder back.
void use_gemma_pipeline(BpeSpec& bpe, TokenizerParts& parts, const TokenizerConfig& config, const std::string& file) {
  bpe.options = BpeOptions{config.unk_token ? config.unk_token->content : std::string("<unk>"), true, true, false};
  const std::string metaspace(kMetaspaceMarker);
  const nlohmann::json normalizer = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", metaspace}};
  const nlohmann::json pre = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
  parts.normalizer = make_normalizer(JsonNode(normalizer, file, "(GemmaTokenizer normalizer)"));
  parts.pre_tokenizer = make_pre_tokenizer(JsonNode(pre, file, "(GemmaTokenizer pre_tokenizer)"));
  parts.decoder = make_metaspace_decoder(/*strip_prefix_space=*/false, file, "(GemmaTokenizer decoder)");
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& path, const TokenizerConfig& config) {
  const std::string file = path.string();
  const nlohmann::json j = read_json_file(file);
  const JsonNode doc(j, file);
  if (!doc.is_object()) doc.fail("expected a JSON object");
  const TransformersClass cls = classify(config.tokenizer_class, file);
  const int64_t limit = id_limit(doc);

  BpeSpec bpe = read_bpe(doc.required("model"), limit);
  TokenizerParts parts;
  switch (cls) {
    case TransformersClass::kFileAsIs:
      parts.normalizer = make_normalizer(doc["normalizer"]);
      parts.pre_tokenizer = make_pre_tokenizer(doc["pre_tokenizer"]);
      parts.decoder = make_decoder(doc["decoder"]);
      break;
    case TransformersClass::kLlama: {
      // LlamaTokenizer.__init__: byte-fallback BPE, Metaspace, no normalizer.
      bpe.options = BpeOptions{std::nullopt, true, true, false};
      use_llama_metaspace_pipeline(parts, config, file);
      break;
    }
    case TransformersClass::kGpt2: {
      // GPT2Tokenizer.__init__: plain BPE, ByteLevel with GPT-2's regex, no normalizer.
      bpe.options = BpeOptions{};
      const nlohmann::json pre = {
          {"type", "ByteLevel"}, {"add_prefix_space", config.add_prefix_space.value_or(false)}, {"use_regex", true}};
      const nlohmann::json decoder = {{"type", "ByteLevel"}};
      parts.pre_tokenizer = make_pre_tokenizer(JsonNode(pre, file, "(GPT2Tokenizer pre_tokenizer)"));
      parts.decoder = make_decoder(JsonNode(decoder, file, "(GPT2Tokenizer decoder)"));
      break;
    }
    case TransformersClass::kGemma:
      use_gemma_pipeline(bpe, parts, config, file);
      break;
    case TransformersClass::kQwen2: {
      // Qwen2Tokenizer.__init__: plain BPE, NFC, Qwen's split regex, then ByteLevel without its regex.
      bpe.options = BpeOptions{};
      const nlohmann::json normalizer = {{"type", "NFC"}};
      const nlohmann::json pre = {
          {"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2PretokenizeRegex}}}, {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", config.add_prefix_space.value_or(false)},
             {"trim_offsets", true},
             {"use_regex", false}}}}};
      const nlohmann::json decoder = {{"type", "ByteLevel"}};
      parts.normalizer = make_normalizer(JsonNode(normalizer, file, "(Qwen2Tokenizer normalizer)"));
      parts.pre_tokenizer = make_pre_tokenizer(JsonNode(pre, file, "(Qwen2Tokenizer pre_tokenizer)"));
      parts.decoder = make_decoder(JsonNode(decoder, file, "(Qwen2Tokenizer decoder)"));
      break;
    }
  }
  parts.post_processor = make_post_processor(doc["post_processor"]);
  parts.model = std::make_unique<BpeModel>(std::move(bpe.vocab), bpe.merges, bpe.options, file);

  // A rebuilt pipeline gets the file's added tokens only when
  // tokenizer_config.json has no added_tokens_decoder (transformers' rule).
  const bool use_file_tokens = cls == TransformersClass::kFileAsIs || !config.has_added_tokens_decoder;
  if (use_file_tokens && doc["added_tokens"].is_array()) {
    for (const JsonNode& t : doc["added_tokens"].elements()) {
      AddedToken token;
      token.id = static_cast<int32_t>(t.required("id").integer_in(0, limit - 1, id_limit_reason(limit)));
      token.content = t.required("content").string();
      token.special = t.boolean_or("special", false);
      token.lstrip = t.boolean_or("lstrip", false);
      token.rstrip = t.boolean_or("rstrip", false);
      token.single_word = t.boolean_or("single_word", false);
      token.normalized = t.boolean_or("normalized", !token.special);
      parts.added.add(token, parts.normalizer.get());
    }
  }
  const std::string config_file = (path.parent_path() / "tokenizer_config.json").string();
  apply_config_tokens(config, parts, config_file);
  // With a tokenizer.json, transformers drops add_bos_token / add_eos_token:
  // the file's post_processor alone decides (a template is built only if none).
  TokenizerConfig without_flags = config;
  without_flags.add_bos_token.reset();
  without_flags.add_eos_token.reset();
  apply_bos_eos_template(without_flags, parts, config_file);
  return std::make_unique<PipelineTokenizer>(std::move(parts));
}

}  // namespace fptrain::tokenizer
