#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <stdexcept>

namespace fptrain::tokenizer {

int32_t add_token(TokenizerParts& parts, AddedToken token) {
  if (auto id = parts.added.token_to_id(token.content)) {
    token.id = *id;
  } else if (auto mid = parts.model->token_to_id(token.content)) {
    token.id = *mid;
  } else {
    token.id = static_cast<int32_t>(std::max<int64_t>(parts.model->size(), parts.added.max_id() + 1));
  }
  parts.added.add(token, parts.normalizer.get());
  return token.id;
}

void apply_config_tokens(const TokenizerConfig& config, TokenizerParts& parts, const std::string& file) {
  for (const auto& t : config.added_tokens) add_token(parts, t);
  auto named = [&](const std::optional<AddedToken>& t) -> std::optional<int32_t> {
    if (!t || t->content.empty()) return std::nullopt;
    // A token the tokenizer already knows keeps its flags; a new one is added as special.
    if (auto id = parts.added.token_to_id(t->content)) return id;
    return add_token(parts, *t);
  };
  parts.bos_id = named(config.bos_token);
  parts.eos_id = named(config.eos_token);
  named(config.unk_token);
  parts.pad_id = named(config.pad_token);
  const std::pair<const char*, const std::optional<AddedToken>*> names[] = {
      {"bos_token", &config.bos_token}, {"eos_token", &config.eos_token},
      {"unk_token", &config.unk_token}, {"pad_token", &config.pad_token}};
  parts.special_tokens_map.clear();
  for (const auto& [name, token] : names)
    if (*token && !(*token)->content.empty()) parts.special_tokens_map.emplace_back(name, (*token)->content);
  for (const auto& t : config.extra_special_tokens) named(t);
  (void)file;
}

void apply_bos_eos_template(const TokenizerConfig& config, TokenizerParts& parts, const std::string& file) {
  const bool explicit_flags = config.add_bos_token.has_value() || config.add_eos_token.has_value();
  if (!explicit_flags && parts.post_processor) return;
  const bool add_bos = config.add_bos_token.value_or(false) && parts.bos_id.has_value();
  const bool add_eos = config.add_eos_token.value_or(false) && parts.eos_id.has_value();
  // As in transformers, a flag without its token is ignored.
  (void)file;
  std::vector<int32_t> prefix, suffix;
  if (add_bos) prefix.push_back(*parts.bos_id);
  if (add_eos) suffix.push_back(*parts.eos_id);
  parts.post_processor = make_template_processor(std::move(prefix), std::move(suffix));
}

}  // namespace fptrain::tokenizer
