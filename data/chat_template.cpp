#include "data/chat_template.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace fptrain::data {
namespace {

// Python's str.isspace() for one code point.
bool is_python_space(uint32_t cp) {
  if (cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x80) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Decodes the code point starting at s[i] (input is valid UTF-8); sets len.
uint32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) { len = 1; return c; }
  if (c < 0xE0) { len = 2; return ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu); }
  if (c < 0xF0) { len = 3; return ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu); }
  len = 4;
  return ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
}

class PieceWriter {
 public:
  void control(std::string text, bool supervised) { add(std::move(text), true, supervised); }
  void text(std::string text, bool supervised) { add(std::move(text), false, supervised); }
  std::vector<TextPiece> take() { return std::move(pieces_); }
  bool all = false;

 private:
  void add(std::string text, bool control, bool supervised) {
    if (text.empty()) return;
    pieces_.push_back({std::move(text), control, supervised || all});
  }
  std::vector<TextPiece> pieces_;
};

// Splits off a leading system message; the remaining turns must alternate
// user/assistant starting with user (what the [INST] templates require).
std::pair<std::string, std::vector<const Message*>> alternating_turns(const std::vector<Message>& msgs,
                                                                      const char* name) {
  std::string system;
  std::vector<const Message*> turns;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && msgs[i].role == "system") {
      system = msgs[i].content;
      continue;
    }
    const bool expect_user = turns.size() % 2 == 0;
    if ((msgs[i].role == "user") != expect_user || msgs[i].role == "system")
      throw BadLine(SkipReason::kInvalidValue,
                    std::string("the ") + name + " chat template needs roles alternating user/assistant (after "
                    "an optional first system message); message " + std::to_string(i) + " is '" +
                        msgs[i].role + "'");
    turns.push_back(&msgs[i]);
  }
  return {system, turns};
}

std::vector<TextPiece> render_llama3(const std::vector<Message>& msgs, PieceWriter& w) {
  w.control("<|begin_of_text|>", false);
  for (const Message& m : msgs) {
    w.control("<|start_header_id|>", false);
    w.text(m.role, false);
    w.control("<|end_header_id|>", false);
    w.text("\n\n", false);
    w.text(python_strip(m.content), m.supervised);
    w.control("<|eot_id|>", m.supervised);
  }
  return w.take();
}

std::vector<TextPiece> render_llama2(const std::vector<Message>& msgs, PieceWriter& w) {
  auto [system, turns] = alternating_turns(msgs, "llama2");
  for (size_t i = 0; i < turns.size(); ++i) {
    const Message& m = *turns[i];
    if (m.role == "user") {
      std::string content = m.content;
      if (i == 0 && !system.empty()) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
      w.control("<s>", false);
      w.text("[INST] " + python_strip(content) + " [/INST]", false);
    } else {
      w.text(" " + python_strip(m.content) + " ", m.supervised);
      w.control("</s>", m.supervised);
    }
  }
  return w.take();
}

std::vector<TextPiece> render_mistral(const std::vector<Message>& msgs, PieceWriter& w) {
  auto [system, turns] = alternating_turns(msgs, "mistral");
  w.control("<s>", false);
  for (size_t i = 0; i < turns.size(); ++i) {
    const Message& m = *turns[i];
    if (m.role == "user") {
      const std::string content = (i == 0 && !system.empty()) ? system + "\n\n" + m.content : m.content;
      w.control("[INST]", false);
      w.text(" " + content, false);
      w.control("[/INST]", false);
    } else {
      w.text(" " + m.content, m.supervised);
      w.control("</s>", m.supervised);
    }
  }
  return w.take();
}

std::vector<TextPiece> render_granite3(const std::vector<Message>& msgs, PieceWriter& w) {
  for (const Message& m : msgs) {
    w.control("<|start_of_role|>", false);
    w.text(m.role, false);
    w.control("<|end_of_role|>", false);
    w.text(m.content, m.supervised);
    w.control("<|end_of_text|>", m.supervised);
    w.text("\n", false);
  }
  return w.take();
}

}  // namespace

void apply_loss_mask(std::vector<Message>& messages, ChatLossMask mask) {
  int last_assistant = -1;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "assistant") last_assistant = static_cast<int>(i);
  for (size_t i = 0; i < messages.size(); ++i) {
    const bool assistant = messages[i].role == "assistant";
    switch (mask) {
      case ChatLossMask::kAssistant: messages[i].supervised = assistant; break;
      case ChatLossMask::kLastAssistant: messages[i].supervised = static_cast<int>(i) == last_assistant; break;
      case ChatLossMask::kAll: messages[i].supervised = true; break;
    }
  }
}

std::vector<TextPiece> render_chat(ChatTemplateKind kind, const std::vector<Message>& messages,
                                   bool supervise_all) {
  PieceWriter w;
  w.all = supervise_all;
  switch (kind) {
    case ChatTemplateKind::kLlama3: return render_llama3(messages, w);
    case ChatTemplateKind::kLlama2: return render_llama2(messages, w);
    case ChatTemplateKind::kMistral: return render_mistral(messages, w);
    case ChatTemplateKind::kGranite3: return render_granite3(messages, w);
    case ChatTemplateKind::kAuto:
    case ChatTemplateKind::kNone: break;
  }
  throw std::logic_error(std::string("render_chat: no renderer for chat template '") + common::enum_name(kind) + "'");
}

std::string join_pieces(const std::vector<TextPiece>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p.text;
  return out;
}

ChatTemplateKind detect_chat_template(std::string_view src) {
  auto has = [&](const char* s) { return src.find(s) != std::string_view::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>")) return ChatTemplateKind::kLlama3;
  if (has("<|start_of_role|>") && has("<|end_of_role|>")) return ChatTemplateKind::kGranite3;
  if (has("[INST]")) return has("<<SYS>>") ? ChatTemplateKind::kLlama2 : ChatTemplateKind::kMistral;
  return ChatTemplateKind::kNone;
}

std::optional<std::string> read_chat_template(const std::filesystem::path& dir) {
  const auto path = dir / "tokenizer_config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(path.string() + ": not valid JSON: " + e.what());
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    // transformers 5 may save the template next to the config.
    std::ifstream jinja(dir / "chat_template.jinja");
    if (!jinja) return std::nullopt;
    return std::string(std::istreambuf_iterator<char>(jinja), {});
  }
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template"))
        return entry["template"].get<std::string>();
  }
  throw std::runtime_error(path.string() + ": key 'chat_template' is neither a string nor a list with a "
                           "'default' template");
}

ChatTemplateKind resolve_chat_template(ChatTemplateKind configured, const std::filesystem::path& dir) {
  if (configured != ChatTemplateKind::kAuto) return configured;
  if (dir.empty()) return ChatTemplateKind::kNone;
  auto source = read_chat_template(dir);
  return source ? detect_chat_template(*source) : ChatTemplateKind::kNone;
}

std::string python_strip(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    size_t len = 0;
    if (!is_python_space(decode_at(s, begin, len))) break;
    begin += len;
  }
  while (end > begin) {
    size_t start = end - 1;  // back up to the first byte of the last code point
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    if (!is_python_space(decode_at(s, start, len))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

}  // namespace fptrain::data
