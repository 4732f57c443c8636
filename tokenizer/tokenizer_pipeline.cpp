#include "tokenizer/tokenizer_pipeline.h"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tokenizer/metaspace_words.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode.h"

namespace fptrain::tokenizer {

void use_llama_metaspace_pipeline(TokenizerParts& parts, const TokenizerConfig& config, const std::string& file) {
  const bool add_prefix_space = config.add_prefix_space.value_or(true);
  const char* scheme = !add_prefix_space ? "never" : config.legacy.value_or(false) ? "always" : "first";
  const std::string metaspace(kMetaspaceMarker);
  parts.normalizer.reset();
  const nlohmann::json pre = {{"type", "Metaspace"}, {"replacement", metaspace}, {"prepend_scheme", scheme}, {"split", false}};
  parts.pre_tokenizer = make_pre_tokenizer(JsonNode(pre, file, "(LlamaTokenizer pre_tokenizer)"));
  parts.decoder = make_metaspace_decoder(add_prefix_space, file, "(LlamaTokenizer decoder)");
}

std::unique_ptr<Decoder> make_metaspace_decoder(bool strip_prefix_space, const std::string& file, const char* who) {
  const std::string metaspace(kMetaspaceMarker);
  nlohmann::json decoders = nlohmann::json::array({
      {{"type", "Replace"}, {"pattern", {{"String", metaspace}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}},
  });
  if (strip_prefix_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const nlohmann::json decoder = {{"type", "Sequence"}, {"decoders", decoders}};
  return make_decoder(JsonNode(decoder, file, who));
}

PipelineTokenizer::PipelineTokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  if (!parts_.model) throw std::invalid_argument("PipelineTokenizer needs a model");
}

void PipelineTokenizer::encode_text(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
  thread_local std::vector<PreToken> pieces;
  thread_local std::vector<TextSegment> segments;
  std::string normalized(text);
  if (parts_.normalizer) parts_.normalizer->normalize(normalized);
  // Normalized added tokens are matched in the normalized text.
  segments.clear();
  if (parts_.added.has_normalized_tokens()) {
    parts_.added.split(normalized, /*normalized_set=*/true, segments);
  } else if (!normalized.empty()) {
    segments.push_back({0, normalized.size(), -1});
  }
  for (const auto& seg : segments) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
      continue;
    }
    pieces.clear();
    pieces.push_back({normalized.substr(seg.begin, seg.end - seg.begin), at_start && seg.begin == 0});
    if (parts_.pre_tokenizer) parts_.pre_tokenizer->pre_tokenize(pieces);
    for (const auto& p : pieces) parts_.model->tokenize(p.text, ids);
  }
}

std::vector<int32_t> PipelineTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!unicode::is_valid_utf8(text)) throw std::invalid_argument("tokenizer input is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  thread_local std::vector<TextSegment> segments;
  segments.clear();
  parts_.added.split(text, /*normalized_set=*/false, segments);
  for (const auto& seg : segments) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
    } else {
      encode_text(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, ids);
    }
  }
  if (add_special_tokens && parts_.post_processor) parts_.post_processor->process(ids);
  return ids;
}

std::string PipelineTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const std::string* form = parts_.added.decoded_form(id)) {
      tokens.push_back(*form);
    } else if (const std::string* s = parts_.model->id_to_token(id)) {
      tokens.push_back(*s);
    }  // unknown ids are skipped, as tokenizers does
  }
  if (!parts_.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  parts_.decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

int64_t PipelineTokenizer::vocab_size() const {
  return std::max<int64_t>(parts_.model->size(), static_cast<int64_t>(parts_.added.max_id()) + 1);
}

std::optional<int32_t> PipelineTokenizer::token_to_id(std::string_view token) const {
  if (auto id = parts_.added.token_to_id(token)) return id;
  return parts_.model->token_to_id(token);
}

}  // namespace fptrain::tokenizer
