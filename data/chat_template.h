// Native renderers for the chat conventions fptrain supports (no Jinja
// engine): Llama 3, Llama 2 ([INST] with <<SYS>>), Mistral ([INST], system
// prepended to the first user turn) and Granite 3. Each produces the exact
// text of the corresponding Jinja template in tests/data/make_fixtures.py,
// as pieces that carry which characters are supervised.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/data_options.h"
#include "data/raw_example.h"

namespace fptrain::data {

struct TextPiece {
  std::string text;
  // A template control token (e.g. <|eot_id|>, <s>). When the tokenizer knows
  // it as a token it is a hard tokenization boundary, which lets the encoder
  // tokenize turn by turn with the same ids as the whole text.
  bool control = false;
  bool supervised = false;
};

// Marks the supervised turns of a `messages` example (assistant turns, the
// last assistant turn, or everything).
void apply_loss_mask(std::vector<Message>& messages, ChatLossMask mask);

// Renders the conversation. Message::supervised decides which turns are
// trained on: their content and their end-of-turn token. With
// `supervise_all`, every piece is. Throws BadLine(kInvalidValue) for a
// conversation the template cannot render (e.g. roles that do not alternate).
std::vector<TextPiece> render_chat(ChatTemplateKind kind, const std::vector<Message>& messages,
                                   bool supervise_all = false);

std::string join_pieces(const std::vector<TextPiece>& pieces);

// The convention of a Jinja chat template, from its control tokens; kNone when
// it is none of the supported ones.
ChatTemplateKind detect_chat_template(std::string_view jinja_source);

// tokenizer_config.json's "chat_template" (a string, or the "default" entry of
// a list of named templates); nullopt when absent.
std::optional<std::string> read_chat_template(const std::filesystem::path& tokenizer_dir);

// kAuto resolved against tokenizer_dir (kNone if nothing to detect from).
ChatTemplateKind resolve_chat_template(ChatTemplateKind configured, const std::filesystem::path& tokenizer_dir);

// Python's str.strip() (Jinja's trim): removes Unicode whitespace at both ends.
std::string python_strip(std::string_view text);

}  // namespace fptrain::data
