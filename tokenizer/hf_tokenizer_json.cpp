#include "tokenizer/hf_tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <stdexcept>

#include "tokenizer/bpe_model.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/tokenizer_pipeline.h"

namespace fptrain::tokenizer {
namespace {

// transformers 5 keeps tokenizer.json's pipeline for these classes and
// rebuilds it (from vocab, merges and post_processor only) for the others.
enum class TransformersClass { kFileAsIs, kLlama, kGpt2 };

TransformersClass classify(const std::optional<std::string>& cls, const std::string& file) {
  if (!cls || *cls == "PreTrainedTokenizerFast" || *cls == "TokenizersBackend") return TransformersClass::kFileAsIs;
  if (*cls == "LlamaTokenizer" || *cls == "LlamaTokenizerFast") return TransformersClass::kLlama;
  if (*cls == "GPT2Tokenizer" || *cls == "GPT2TokenizerFast") return TransformersClass::kGpt2;
  spdlog::warn("{}: tokenizer_class '{}' is tokenized as tokenizer.json describes; transformers' class may differ",
               file, *cls);
  return TransformersClass::kFileAsIs;
}

struct BpeSpec {
  std::vector<std::string> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  BpeOptions options;
};

BpeSpec read_bpe(const nlohmann::json& model, const std::string& file) {
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") throw std::runtime_error(file + ": unsupported model type '" + type + "' (only BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    throw std::runtime_error(file + ": BPE dropout is not supported (it makes tokenization random)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      throw std::runtime_error(file + ": BPE " + key + " is not supported");
    }
  }
  BpeSpec spec;
  const auto& vocab = json_field(model, "vocab", file, "model");
  if (!vocab.is_object()) throw std::runtime_error(file + ": model \"vocab\" must be an object");
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = id_json.get<int64_t>();
    if (id < 0 || id > (int64_t{1} << 30)) throw std::runtime_error(file + ": bad id for token '" + token + "'");
    if (static_cast<size_t>(id) >= spec.vocab.size()) spec.vocab.resize(id + 1);
    spec.vocab[id] = token;
  }
  const auto& merges = json_field(model, "merges", file, "model");
  spec.merges.reserve(merges.size());
  for (const auto& m : merges) {
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw std::runtime_error(file + ": merge '" + s + "' is not two tokens separated by one space");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw std::runtime_error(file + ": merge " + m.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    spec.options.unk_token = model["unk_token"].get<std::string>();
  }
  spec.options.fuse_unk = model.value("fuse_unk", false);
  spec.options.byte_fallback = model.value("byte_fallback", false);
  spec.options.ignore_merges = model.value("ignore_merges", false);
  return spec;
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& path, const TokenizerConfig& config) {
  const std::string file = path.string();
  const nlohmann::json j = read_json_file(file);
  if (!j.is_object()) throw std::runtime_error(file + ": expected a JSON object");
  const TransformersClass cls = classify(config.tokenizer_class, file);

  BpeSpec bpe = read_bpe(json_field(j, "model", file, "tokenizer"), file);
  TokenizerParts parts;
  switch (cls) {
    case TransformersClass::kFileAsIs:
      parts.normalizer = make_normalizer(j.value("normalizer", nlohmann::json()), file);
      parts.pre_tokenizer = make_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()), file);
      parts.decoder = make_decoder(j.value("decoder", nlohmann::json()), file);
      break;
    case TransformersClass::kLlama: {
      // LlamaTokenizer.__init__: byte-fallback BPE, Metaspace, no normalizer.
      bpe.options = BpeOptions{std::nullopt, true, true, false};
      use_llama_metaspace_pipeline(parts, config, file);
      break;
    }
    case TransformersClass::kGpt2:
      // GPT2Tokenizer.__init__: plain BPE, ByteLevel with GPT-2's regex, no normalizer.
      bpe.options = BpeOptions{};
      parts.pre_tokenizer = make_pre_tokenizer(
          {{"type", "ByteLevel"}, {"add_prefix_space", config.add_prefix_space.value_or(false)}, {"use_regex", true}},
          file);
      parts.decoder = make_decoder({{"type", "ByteLevel"}}, file);
      break;
  }
  parts.post_processor = make_post_processor(j.value("post_processor", nlohmann::json()), file);
  parts.model = std::make_unique<BpeModel>(std::move(bpe.vocab), bpe.merges, bpe.options, file);

  // A rebuilt pipeline gets the file's added tokens only when
  // tokenizer_config.json has no added_tokens_decoder (transformers' rule).
  const bool use_file_tokens = cls == TransformersClass::kFileAsIs || !config.has_added_tokens_decoder;
  if (use_file_tokens && j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      AddedToken token;
      token.id = json_field(t, "id", file, "added_tokens entry").get<int32_t>();
      token.content = json_string(t, "content", file, "added_tokens entry");
      token.special = t.value("special", false);
      token.lstrip = t.value("lstrip", false);
      token.rstrip = t.value("rstrip", false);
      token.single_word = t.value("single_word", false);
      token.normalized = t.value("normalized", !token.special);
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
