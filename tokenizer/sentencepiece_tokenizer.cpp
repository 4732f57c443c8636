#include "tokenizer/sentencepiece_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "common/json_input.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/unicode.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer_pipeline.h"

namespace fptrain::tokenizer {
namespace {

bool is_llama_class(const std::optional<std::string>& cls) {
  return !cls || *cls == "LlamaTokenizer" || *cls == "LlamaTokenizerFast";
}

AddedToken named_default(const std::optional<AddedToken>& configured, const char* content) {
  if (configured) return *configured;
  AddedToken t;
  t.content = content;
  t.special = true;
  t.normalized = false;
  return t;
}

// transformers' generate_merges(vocab): every split of every piece into two
// pieces is a merge, ordered by the merged piece's id, then by the length of
// the left part in characters.
std::vector<std::pair<std::string, std::string>> merges_from_pieces(const std::vector<std::string>& pieces) {
  std::unordered_map<std::string_view, int32_t> ids;
  for (size_t i = 0; i < pieces.size(); ++i) ids.emplace(pieces[i], static_cast<int32_t>(i));
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& piece : pieces) {
    const std::string_view p(piece);
    size_t b = unicode::sequence_length(static_cast<unsigned char>(p.empty() ? 0 : p[0]));
    for (; b < p.size(); b += unicode::sequence_length(static_cast<unsigned char>(p[b]))) {
      if (ids.count(p.substr(0, b)) && ids.count(p.substr(b))) {
        merges.emplace_back(std::string(p.substr(0, b)), std::string(p.substr(b)));
      }
    }
  }
  return merges;  // pieces in id order, splits by growing left length: already sorted
}

std::unique_ptr<TokenModel> make_bpe_from_pieces(const SentencePieceModel& spm, const std::string& file) {
  std::vector<std::string> vocab;
  vocab.reserve(spm.size());
  for (int32_t id = 0; id < spm.size(); ++id) vocab.push_back(*spm.id_to_token(id));
  const auto merges = merges_from_pieces(vocab);
  // LlamaTokenizer's BPE: byte fallback, fused unknowns, no unk token.
  return std::make_unique<BpeModel>(std::move(vocab), merges, BpeOptions{std::nullopt, true, true, false}, file);
}

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_file,
                                                        const TokenizerConfig& config_in, SentencePieceEngine engine) {
  const std::string file = model_file.string();
  if (!is_llama_class(config_in.tokenizer_class)) {
    throw std::runtime_error(file + ": tokenizer_class '" + common::cut_text(*config_in.tokenizer_class) +
                             "' is not supported with a tokenizer.model (supported: LlamaTokenizer, as used by "
                             "Llama 2 and Mistral); provide a tokenizer.json instead");
  }
  auto model = std::make_unique<SentencePieceModel>(model_file);
  if (model->is_unigram() && engine == SentencePieceEngine::kLibSentencePiece) {
    throw std::runtime_error(file + ": a unigram model cannot be checked with libsentencepiece's encoder "
                             "(transformers runs it as a BPE over its pieces, which SentencePieceEngine::kMerges does)");
  }
  TokenizerParts parts;
  const auto* spm = model.get();

  // Control pieces are special added tokens, user-defined pieces plain ones.
  for (int32_t id = 0; id < spm->size(); ++id) {
    const auto type = spm->type(id);
    if (type != SentencePieceModel::PieceType::kControl && type != SentencePieceModel::PieceType::kUserDefined) {
      continue;
    }
    AddedToken t;
    t.content = *spm->id_to_token(id);
    t.id = id;
    t.special = type == SentencePieceModel::PieceType::kControl;
    t.normalized = false;
    parts.added.add(t, nullptr);
  }
  if (engine == SentencePieceEngine::kMerges) {
    parts.model = make_bpe_from_pieces(*spm, file);
  } else {
    parts.model = std::move(model);
  }

  // LlamaTokenizer's defaults for the named tokens.
  TokenizerConfig config = config_in;
  config.unk_token = named_default(config.unk_token, "<unk>");
  config.bos_token = named_default(config.bos_token, "<s>");
  config.eos_token = named_default(config.eos_token, "</s>");
  const std::string config_file = (model_file.parent_path() / "tokenizer_config.json").string();
  apply_config_tokens(config, parts, config_file);

  use_llama_metaspace_pipeline(parts, config, file);

  // The converted tokenizer has no post-processor, so transformers always
  // builds [bos] $A [eos] from add_bos_token / add_eos_token (default false).
  apply_bos_eos_template(config, parts, config_file);
  return std::make_unique<PipelineTokenizer>(std::move(parts));
}

}  // namespace fptrain::tokenizer
