#include "data/example_encoder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "data/packed_batch.h"

namespace fptrain::data {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

void finish_labels(EncodedExample& e) {
  if (!e.labels.empty()) e.labels[0] = kIgnoreLabel;
}

}  // namespace

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  // The classic Alpaca layout: instruction, optional input, then the response header.
  std::string p = "### Instruction:\n" + instruction + "\n\n";
  if (!input.empty()) p += "### Input:\n" + input + "\n\n";
  return p + "### Response:\n";
}

ExampleEncoder::ExampleEncoder(const tokenizer::Tokenizer* tokenizer,
                               std::shared_ptr<const ChatTemplate> chat_template, ChatLossMask loss_mask)
    : tok_(tokenizer), template_(std::move(chat_template)), loss_mask_(loss_mask) {
  if (tok_ && template_) {
    use_anchors_ = check_turn_by_turn();
    if (!use_anchors_)
      spdlog::warn("data: the tokenizer does not split the special tokens of chat template {} like Hugging "
                   "Face tokenizers do; encoding whole conversations instead (slower)",
                   template_->label());
  }
}

std::optional<int32_t> ExampleEncoder::anchor_id(const TextPiece& piece) const {
  if (!piece.control || !use_anchors_) return std::nullopt;
  return tok_->token_to_id(piece.text);
}

// Tokenizing a rendered conversation piece by piece, split at special tokens,
// gives the whole text's ids with Hugging Face tokenizers; checked once on
// probe conversations (the first one the template accepts).
bool ExampleEncoder::check_turn_by_turn() const {
  auto message = [](const char* role, const char* content, bool supervised) {
    Message m{role, content, supervised, nlohmann::ordered_json()};
    return m;
  };
  const std::vector<std::vector<Message>> probes = {
      {message("system", " Be brief.\n", false),
       message("user", "Hi there!  What's 2+2? <|eot_id|> caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80\r\n", false),
       message("assistant", "\n 4.\tDone  ", true), message("user", "x", false), message("assistant", "   ", true)},
      {message("user", "Hi there!  What's 2+2? caf\xC3\xA9\r\n", false), message("assistant", "\n 4.\tDone  ", true)}};
  for (const auto& probe : probes) {
    RawExample ex;
    ex.format = ExampleFormat::kMessages;
    ex.messages = probe;
    std::vector<TextPiece> pieces;
    try {
      pieces = template_->render(ex, /*supervise_all=*/false);
    } catch (const BadLine&) {
      continue;  // the template refuses this shape of conversation
    }
    return encode_pieces(pieces).input_ids == tok_->encode(join_pieces(pieces), false);
  }
  return false;
}

EncodedExample ExampleEncoder::encode_pieces(const std::vector<TextPiece>& pieces) const {
  if (!tok_) throw std::logic_error("ExampleEncoder: text examples need a tokenizer");
  EncodedExample out;
  size_t i = 0;
  while (i < pieces.size()) {
    // A chunk runs from one anchor (a control token the tokenizer knows) to the next.
    size_t j = i + 1;
    while (j < pieces.size() && !anchor_id(pieces[j])) ++j;
    std::string text;
    std::vector<std::pair<size_t, bool>> spans;  // (start offset, supervised) of runs
    for (size_t k = i; k < j; ++k) {
      if (spans.empty() || spans.back().second != pieces[k].supervised)
        spans.emplace_back(text.size(), pieces[k].supervised);
      text += pieces[k].text;
    }
    const std::vector<int32_t> ids = tok_->encode(text, false);
    const auto anchor = anchor_id(pieces[i]);
    if (anchor && (ids.empty() || ids[0] != *anchor))
      throw std::runtime_error("tokenizer did not keep the control token '" + pieces[i].text +
                               "' as one token");
    // Token index where each run starts.
    std::vector<size_t> starts(spans.size(), 0);
    for (size_t s = 1; s < spans.size(); ++s) {
      const size_t offset = spans[s].first;
      if (anchor && offset == pieces[i].text.size()) {
        starts[s] = 1;
      } else {
        starts[s] = std::min(common_prefix(tok_->encode(text.substr(0, offset), false), ids), ids.size());
      }
      starts[s] = std::max(starts[s], starts[s - 1]);
    }
    for (size_t s = 0; s < spans.size(); ++s) {
      const size_t end = s + 1 < spans.size() ? starts[s + 1] : ids.size();
      for (size_t t = starts[s]; t < end; ++t) {
        out.input_ids.push_back(ids[t]);
        out.labels.push_back(spans[s].second ? ids[t] : kIgnoreLabel);
      }
    }
    i = j;
  }
  finish_labels(out);
  return out;
}

EncodedExample ExampleEncoder::encode_plain(const std::string& prompt, const std::string& completion) const {
  if (!tok_) throw std::logic_error("ExampleEncoder: text examples need a tokenizer");
  EncodedExample out;
  out.input_ids = tok_->encode(prompt + completion, true);
  const auto eos = tok_->eos_id();
  size_t boundary = 0;
  if (!prompt.empty()) {
    const auto prefix = tok_->encode(prompt, true);
    size_t prefix_len = prefix.size();
    if (eos && prefix_len > 0 && prefix.back() == *eos) --prefix_len;  // a tokenizer that appends EOS
    boundary = std::min(common_prefix(prefix, out.input_ids), prefix_len);
  } else if (tok_->bos_id() && !out.input_ids.empty() && out.input_ids[0] == *tok_->bos_id()) {
    boundary = 1;
  }
  if (eos && (out.input_ids.empty() || out.input_ids.back() != *eos)) out.input_ids.push_back(*eos);
  out.labels.assign(out.input_ids.size(), kIgnoreLabel);
  for (size_t t = boundary; t < out.input_ids.size(); ++t) out.labels[t] = out.input_ids[t];
  finish_labels(out);
  return out;
}

std::vector<TextPiece> ExampleEncoder::render(const RawExample& ex) const {
  if (!template_)
    throw std::runtime_error("chat examples need a chat template: set data.chat_template (llama3, llama2, "
                             "mistral, granite3) or use a tokenizer that has one (tokenizer_config.json's "
                             "chat_template or chat_template.jinja)");
  if (ex.format == ExampleFormat::kMessages) {
    RawExample masked = ex;
    apply_loss_mask(masked.messages, loss_mask_);
    return template_->render(masked, loss_mask_ == ChatLossMask::kAll);
  }
  return template_->render(ex, /*supervise_all=*/false);  // turns flagged by the parser
}

bool ExampleEncoder::uses_chat_template(const RawExample& ex) const {
  switch (ex.format) {
    case ExampleFormat::kMessages: return true;
    case ExampleFormat::kPromptCompletion: return !ex.messages.empty();
    case ExampleFormat::kAlpaca: return template_ != nullptr;
    default: return false;
  }
}

EncodedExample ExampleEncoder::encode(const RawExample& ex) const {
  if (uses_chat_template(ex)) return encode_pieces(render(ex));
  switch (ex.format) {
    case ExampleFormat::kMessages:
      break;
    case ExampleFormat::kPromptCompletion:
      return encode_plain(ex.prompt, ex.completion);
    case ExampleFormat::kAlpaca:
      return encode_plain(alpaca_prompt(ex.prompt, ex.text), ex.completion);
    case ExampleFormat::kText:
      return encode_plain("", ex.text);
    case ExampleFormat::kTokens: {
      EncodedExample out;
      out.input_ids = ex.input_ids;
      if (tok_) {
        const int64_t vocab = tok_->vocab_size();
        for (size_t t = 0; t < out.input_ids.size(); ++t)
          if (out.input_ids[t] >= vocab)
            throw BadLine(SkipReason::kInvalidValue, "input_ids[" + std::to_string(t) + "] = " +
                                                         std::to_string(out.input_ids[t]) +
                                                         " is not below the vocabulary size " + std::to_string(vocab));
      }
      out.labels = ex.labels.empty() ? ex.input_ids : ex.labels;
      finish_labels(out);
      return out;
    }
    case ExampleFormat::kAuto: break;
  }
  throw std::logic_error("ExampleEncoder::encode: unresolved format");
}

}  // namespace fptrain::data
