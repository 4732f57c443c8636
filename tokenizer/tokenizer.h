// The tokenizer interface the data pipeline uses. Implementations must be
// thread-safe for concurrent encode() calls (workers tokenize in parallel).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fptrain::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Same ids as Hugging Face's tokenizer(text, add_special_tokens=...)["input_ids"].
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;

  // Size of the id space, added tokens included (max id + 1).
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;

  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::optional<int32_t> pad_id() const = 0;

  // transformers' special_tokens_map: the named special tokens a chat template
  // sees as variables ("bos_token" -> "<s>", "eos_token", "unk_token", "pad_token").
  virtual std::vector<std::pair<std::string, std::string>> special_tokens_map() const { return {}; }
  // The text of every added token marked special ("<|eot_id|>", "</s>", ...).
  virtual std::vector<std::string> special_tokens() const { return {}; }
};

// Loads <dir>/tokenizer.json if present, else <dir>/tokenizer.model, with
// <dir>/tokenizer_config.json and special_tokens_map.json for BOS/EOS/pad and
// add_bos/add_eos. Throws with the file name and the problem.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);

}  // namespace fptrain::tokenizer
