// RawExample -> token ids and labels (Hugging Face convention, unshifted:
// labels[t] = input_ids[t] where supervised, else kIgnoreLabel; labels[0] is
// always kIgnoreLabel because nothing predicts an example's first token).
//
// Chat examples are tokenized turn by turn, split at the template's control
// tokens: tokenizers split special tokens out before anything else, so the ids
// equal those of tokenizing the whole rendered text (checked once at start-up
// on a probe conversation; when a tokenizer breaks that rule the encoder
// falls back to whole-text tokenization). Within a chunk the mask boundary is
// the longest common prefix of tokenize(chunk) and tokenize(chunk prefix), so
// a token straddling the boundary counts as supervised.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/chat_template.h"
#include "data/data_options.h"
#include "data/raw_example.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {

struct EncodedExample {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
};

class ExampleEncoder {
 public:
  // `tokenizer` may be null when every file is pre-tokenized; `chat_template`
  // is null when there is none (ChatTemplate::resolve).
  ExampleEncoder(const tokenizer::Tokenizer* tokenizer, std::shared_ptr<const ChatTemplate> chat_template,
                 ChatLossMask loss_mask);

  // Throws BadLine for an example that cannot be encoded.
  EncodedExample encode(const RawExample& example) const;
  // Whether encode() renders this example with the chat template (messages;
  // conversational prompt/completion; alpaca when there is a template).
  bool uses_chat_template(const RawExample& example) const;

  // The rendered pieces of a chat-style example (messages; alpaca with a template).
  std::vector<TextPiece> render(const RawExample& example) const;
  EncodedExample encode_pieces(const std::vector<TextPiece>& pieces) const;

  // "prompt" unsupervised then "completion" supervised, with the tokenizer's
  // BOS (add_special_tokens) and EOS appended (supervised) when missing.
  EncodedExample encode_plain(const std::string& prompt, const std::string& completion) const;

  bool turn_by_turn() const { return use_anchors_; }

 private:
  std::optional<int32_t> anchor_id(const TextPiece& piece) const;
  bool check_turn_by_turn() const;

  const tokenizer::Tokenizer* tok_;
  std::shared_ptr<const ChatTemplate> template_;
  ChatLossMask loss_mask_;
  bool use_anchors_ = true;
};

// The Alpaca prompt used for instruction/input/output examples when no chat
// template is configured.
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

}  // namespace fptrain::data
