// Chat templates, rendered as transformers renders them: a model's own Jinja
// template (tokenizer_config.json, chat_template.jinja, named templates) or
// one we ship (data/chat_templates/*.jinja), run by our Jinja interpreter
// (jinja/) with the variables apply_chat_template passes. The rendered text
// comes back as pieces that carry which characters are supervised.
//
// Which characters are supervised (the assistant mask):
//   - loss_mask: all — every character.
//   - a template with {% generation %} blocks — the blocks that hold a
//     supervised message (what transformers' return_assistant_tokens_mask
//     marks); a block with no message text inside is matched to the assistant
//     messages in order.
//   - any other template — by provenance: the characters copied from a
//     supervised message's content, plus the end-of-turn text the template
//     writes right after it: the template's own text that follows, up to and
//     including the first special token in it (e.g. "<|eot_id|>", "</s>",
//     "<|im_end|>"), if one comes before the next message's text.
// A message is supervised when the loss mask says so (assistant turns, or the
// last one) or, for prompt/completion and Alpaca examples, when the parser
// flagged it (the completion).
//
// strftime_now (e.g. Llama 3.1's "Today Date") reads the local clock, as
// transformers does; the environment variable FPTRAIN_CHAT_TEMPLATE_DATE=
// YYYY-MM-DD fixes it to that date at 00:00:00 (read when the template is
// built), for reproducible renders: the parity tests use it.
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_options.h"
#include "data/raw_example.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::jinja {
class Template;
}

namespace fptrain::data {

struct TextPiece {
  std::string text;
  // A special token of the tokenizer (e.g. <|eot_id|>, <s>): a hard
  // tokenization boundary, which lets the encoder tokenize turn by turn with
  // the same ids as the whole text.
  bool control = false;
  bool supervised = false;
};

// Marks the supervised turns of a `messages` example (assistant turns, the
// last assistant turn, or everything).
void apply_loss_mask(std::vector<Message>& messages, ChatLossMask mask);

std::string join_pieces(const std::vector<TextPiece>& pieces);

// The templates a tokenizer folder holds, by name ("default", "tool_use", ...),
// as transformers 5 reads them: tokenizer_config.json's chat_template (a string,
// or a list of {name, template}), overridden by chat_template.jinja (default)
// and additional_chat_templates/<name>.jinja. Empty when there are none.
struct ChatTemplateFiles {
  std::map<std::string, std::string> templates;
  std::string origin;  // the file(s) they came from, for messages
};
ChatTemplateFiles read_chat_templates(const std::filesystem::path& tokenizer_dir);

// The default template of a tokenizer folder; nullopt when it has none.
std::optional<std::string> read_chat_template(const std::filesystem::path& tokenizer_dir);

// The Jinja source of a template we ship (kLlama3, kLlama2, kMistral, kGranite3).
std::string_view builtin_chat_template(ChatTemplateKind kind);

class ChatTemplate {
 public:
  // `sources`: name -> Jinja source (one "default", optionally "tool_use" and
  // others); `label` names them in messages. Compiles every source: a template
  // our interpreter cannot run is an error naming the template, line and construct.
  ChatTemplate(std::map<std::string, std::string> sources, std::string label, const tokenizer::Tokenizer* tokenizer);
  ~ChatTemplate();

  // kAuto: the tokenizer folder's own template (nullptr when it has none);
  // kNone: nullptr; a named kind: the template we ship.
  static std::shared_ptr<const ChatTemplate> resolve(ChatTemplateKind kind,
                                                     const std::filesystem::path& tokenizer_dir,
                                                     const tokenizer::Tokenizer* tokenizer);

  const std::string& label() const { return label_; }
  // Changes with any template source (for the data cursor's fingerprint).
  uint64_t fingerprint() const { return fingerprint_; }

  // The conversation rendered as apply_chat_template(messages, tools=...,
  // documents=..., add_generation_prompt=False, tokenize=False) renders it,
  // cut into pieces at the tokenizer's special tokens and at supervision
  // changes. Message::supervised picks the trained turns; `supervise_all`
  // trains on everything. Throws BadLine(kInvalidValue) for a conversation the
  // template refuses (raise_exception) or cannot render.
  std::vector<TextPiece> render(const RawExample& example, bool supervise_all) const;

 private:
  // The template for this call ("tool_use" when there are tools and it exists,
  // else "default"); sets whether it has {% generation %} blocks.
  const jinja::Template& pick(bool has_tools, bool& generation_blocks) const;

  std::map<std::string, std::shared_ptr<const jinja::Template>> templates_;
  std::map<std::string, bool> has_generation_;
  std::string label_;
  uint64_t fingerprint_ = 0;
  nlohmann::ordered_json special_tokens_map_;  // bos_token, eos_token, ... as template variables
  std::vector<std::string> special_tokens_;     // longest first, for cutting pieces
  bool starts_special_[256] = {};               // first bytes of special tokens
  // The tokenizer spells a space as the "\u2581" that starts the next word
  // (SentencePiece, Metaspace): a space before a reply is the reply's.
  bool space_starts_word_ = false;
  std::optional<std::tm> date_;                 // FPTRAIN_CHAT_TEMPLATE_DATE, when set
};

}  // namespace fptrain::data
