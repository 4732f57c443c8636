#include "data/chat_template.h"

#include "common/json_input.h"
#include "data/builtin_chat_templates.h"
#include "jinja/template.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <stdexcept>

namespace fptrain::data {
namespace fs = std::filesystem;
namespace {

using ordered_json = nlohmann::ordered_json;

std::optional<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool has_generation_blocks(const std::string& source) {
  static const std::regex generation(R"(\{%-?\s*generation\s*-?%\})");
  return std::regex_search(source, generation);
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// Whether the tokenizer writes a space as the word-boundary marker "\u2581"
// that begins the next word (SentencePiece's dummy prefix and whitespace
// escaping; tokenizers' Metaspace): then "a b" and "a\u2581b" are one token
// sequence, and "ab" another. Byte-level BPE spells the marker U+2581 as its
// three bytes, so it fails the first test.
bool space_starts_word(const tokenizer::Tokenizer& tok) {
  const auto spaced = tok.encode("a b", false);
  return spaced == tok.encode("a\xE2\x96\x81" "b", false) && spaced != tok.encode("ab", false);
}

// The message as the template sees it: what the line gave (keys with a null
// value dropped, as transformers does), or role + content for messages the
// parser built (Alpaca, ShareGPT).
ordered_json message_json(const Message& m) {
  ordered_json out = ordered_json::object();
  if (m.fields.is_object()) {
    for (const auto& [k, v] : m.fields.items())
      if (!v.is_null()) out[k] = v;
  } else {
    out["role"] = m.role;
    out["content"] = m.content;
  }
  return out;
}

// FPTRAIN_CHAT_TEMPLATE_DATE=YYYY-MM-DD as strftime_now's clock (midnight); nullopt when unset.
std::optional<std::tm> fixed_date() {
  const char* value = std::getenv("FPTRAIN_CHAT_TEMPLATE_DATE");
  if (value == nullptr || *value == '\0') return std::nullopt;
  int year = 0, month = 0, day = 0, used = 0;
  std::tm tm{};
  if (std::sscanf(value, "%4d-%2d-%2d%n", &year, &month, &day, &used) == 3 && value[used] == '\0' &&
      year >= 1900 && month >= 1 && month <= 12 && day >= 1 && day <= 31) {
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day;
    const std::time_t t = timegm(&tm);  // fills tm_wday and tm_yday, normalizes
    if (t != static_cast<std::time_t>(-1) && tm.tm_mday == day) return tm;
  }
  throw std::runtime_error(std::string("FPTRAIN_CHAT_TEMPLATE_DATE='") + value +
                           "': expected a date as YYYY-MM-DD (strftime_now's date in chat templates)");
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

std::string join_pieces(const std::vector<TextPiece>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p.text;
  return out;
}

// ---- where templates come from ---------------------------------------------

ChatTemplateFiles read_chat_templates(const fs::path& dir) {
  ChatTemplateFiles out;
  const fs::path config_path = dir / "tokenizer_config.json";
  if (auto text = read_text(config_path)) {
    const std::string file = config_path.string();
    nlohmann::json config;
    try {
      config = common::parse_json(*text, file);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(e.what());  // "<file>: invalid JSON: ..."
    }
    auto it = config.find("chat_template");  // end() for a non-object
    if (it != config.end() && !it->is_null()) {
      if (it->is_string()) {
        out.templates["default"] = it->get<std::string>();
      } else if (it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i) {
          const nlohmann::json& entry = (*it)[i];
          auto name = entry.is_object() ? entry.find("name") : entry.end();
          if (!entry.is_object() || name == entry.end() || !name->is_string()) continue;
          auto tmpl = entry.find("template");
          if (tmpl == entry.end() || !tmpl->is_string())
            throw std::runtime_error(file + ": chat_template[" + std::to_string(i) +
                                     "].template: expected a string, got " +
                                     (tmpl == entry.end() ? std::string("nothing") : common::json_excerpt(*tmpl)));
          out.templates[name->get<std::string>()] = tmpl->get<std::string>();
        }
      } else {
        throw std::runtime_error(file + ": key 'chat_template' is neither a string nor a list of named templates");
      }
      out.origin = file;
    }
  }
  // Template files take priority over the config's entries (transformers 5).
  if (auto text = read_text(dir / "chat_template.jinja")) {
    out.templates["default"] = *text;
    out.origin = (dir / "chat_template.jinja").string();
  }
  const fs::path extra = dir / "additional_chat_templates";
  std::error_code ec;
  if (fs::is_directory(extra, ec)) {
    for (const auto& e : fs::directory_iterator(extra)) {
      if (e.path().extension() != ".jinja") continue;
      if (auto text = read_text(e.path())) out.templates[e.path().stem().string()] = *text;
    }
  }
  return out;
}

std::optional<std::string> read_chat_template(const fs::path& dir) {
  ChatTemplateFiles files = read_chat_templates(dir);
  auto it = files.templates.find("default");
  if (it != files.templates.end()) return it->second;
  if (!files.templates.empty())
    throw std::runtime_error(files.origin + ": the chat templates have no 'default' one");
  return std::nullopt;
}

std::string_view builtin_chat_template(ChatTemplateKind kind) {
  const char* name = common::enum_name(kind);
  for (const auto& [n, source] : builtin_chat_templates())
    if (n == name) return source;
  throw std::logic_error(std::string("no shipped chat template named '") + name + "'");
}

// ---- the template -----------------------------------------------------------

ChatTemplate::ChatTemplate(std::map<std::string, std::string> sources, std::string label,
                           const tokenizer::Tokenizer* tokenizer)
    : label_(std::move(label)) {
  if (sources.empty()) throw std::logic_error("ChatTemplate: no template source");
  fingerprint_ = 1469598103934665603ull;
  for (const auto& [name, source] : sources) {
    fingerprint_ = fnv1a(fnv1a(fingerprint_, name), source);
    const std::string where = sources.size() == 1 ? label_ : label_ + " (" + name + ")";
    try {
      templates_[name] = std::make_shared<jinja::Template>(source, where);
    } catch (const jinja::Error& e) {
      throw std::runtime_error(std::string("chat template: ") + e.what());
    }
    has_generation_[name] = has_generation_blocks(source);
  }
  date_ = fixed_date();
  if (!templates_.count("default") && templates_.size() > 1)
    throw std::runtime_error(label_ + ": several chat templates and none named 'default'");
  special_tokens_map_ = ordered_json::object();
  if (tokenizer) {
    for (const auto& [k, v] : tokenizer->special_tokens_map()) special_tokens_map_[k] = v;
    special_tokens_ = tokenizer->special_tokens();
    std::sort(special_tokens_.begin(), special_tokens_.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    special_tokens_.erase(std::remove(special_tokens_.begin(), special_tokens_.end(), std::string()),
                          special_tokens_.end());
    for (const auto& st : special_tokens_) starts_special_[static_cast<unsigned char>(st[0])] = true;
    space_starts_word_ = space_starts_word(*tokenizer);
  }
}

ChatTemplate::~ChatTemplate() = default;

std::shared_ptr<const ChatTemplate> ChatTemplate::resolve(ChatTemplateKind kind, const fs::path& tokenizer_dir,
                                                          const tokenizer::Tokenizer* tokenizer) {
  switch (kind) {
    case ChatTemplateKind::kNone: return nullptr;
    case ChatTemplateKind::kAuto: {
      if (tokenizer_dir.empty()) return nullptr;
      ChatTemplateFiles files = read_chat_templates(tokenizer_dir);
      if (files.templates.empty()) return nullptr;
      return std::make_shared<ChatTemplate>(std::move(files.templates), files.origin, tokenizer);
    }
    default: {
      // A shipped convention: the tokenizer must know its control tokens, or
      // the model would be trained on them spelled out as text.
      const std::vector<const char*> needed =
          kind == ChatTemplateKind::kLlama3     ? std::vector<const char*>{"<|eot_id|>", "<|start_header_id|>"}
          : kind == ChatTemplateKind::kGranite3 ? std::vector<const char*>{"<|end_of_text|>", "<|start_of_role|>"}
                                                : std::vector<const char*>{};
      if (tokenizer) {
        for (const char* t : needed)
          if (!tokenizer->token_to_id(t))
            throw std::runtime_error(std::string("chat template '") + common::enum_name(kind) + "' needs the token " +
                                     t + ", which the tokenizer does not have; set data.chat_template to the "
                                     "model's convention (or auto, to use the tokenizer's own template)");
        if ((kind == ChatTemplateKind::kLlama2 || kind == ChatTemplateKind::kMistral) && !tokenizer->eos_id())
          throw std::runtime_error(std::string("chat template '") + common::enum_name(kind) +
                                   "' ends turns with the tokenizer's EOS token, and the tokenizer has none");
      }
      return std::make_shared<ChatTemplate>(
          std::map<std::string, std::string>{{"default", std::string(builtin_chat_template(kind))}},
          common::enum_name(kind), tokenizer);
    }
  }
}

const jinja::Template& ChatTemplate::pick(bool has_tools, bool& generation) const {
  auto it = has_tools ? templates_.find("tool_use") : templates_.end();
  if (it == templates_.end()) it = templates_.find("default");
  if (it == templates_.end()) it = templates_.begin();  // the only one
  generation = has_generation_.at(it->first);
  return *it->second;
}

std::vector<TextPiece> ChatTemplate::render(const RawExample& ex, bool supervise_all) const {
  const bool has_tools = !ex.tools.is_null();  // as transformers: "tools is not None"
  bool generation_blocks = false;
  const jinja::Template& tmpl = pick(has_tools, generation_blocks);

  // The variables apply_chat_template passes; each message's content is tagged with its index.
  ordered_json messages = ordered_json::array();
  for (const Message& m : ex.messages) messages.push_back(message_json(m));
  jinja::Context ctx =
      jinja::chat_context(messages, /*add_generation_prompt=*/false, ex.tools, ex.documents, special_tokens_map_);
  if (date_) ctx.now = [date = *date_] { return date; };
  jinja::RenderOutput out;
  try {
    out = tmpl.render(ctx);
  } catch (const jinja::Error& e) {
    throw BadLine(SkipReason::kInvalidValue, std::string("the chat template cannot render this conversation: ") +
                                                 e.what());
  }
  const std::string& text = out.text;
  std::vector<char> supervised(text.size(), supervise_all ? 1 : 0);

  if (!supervise_all && generation_blocks) {
    // The blocks that hold a supervised message; untagged blocks by order.
    std::vector<size_t> assistants;
    for (size_t i = 0; i < ex.messages.size(); ++i)
      if (ex.messages[i].role == "assistant") assistants.push_back(i);
    const bool by_order = out.generation.size() == assistants.size();
    for (size_t g = 0; g < out.generation.size(); ++g) {
      // transformers reports blocks inside macros or set blocks at misplaced
      // offsets that may run past the text; so do we: clamp. A misplaced range
      // (in bytes) can also cut a character, whose halves the tokenizer could
      // not take: widen it to whole characters, as transformers' character
      // ranges are.
      auto continuation = [&](size_t b) {
        return b < text.size() && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80;
      };
      size_t begin = std::min(out.generation[g].first, text.size());
      size_t end = std::min(std::max(out.generation[g].second, begin), text.size());
      while (begin > 0 && continuation(begin)) --begin;
      while (continuation(end)) ++end;
      bool on = by_order && ex.messages[assistants[g]].supervised;
      if (!by_order)
        for (size_t b = begin; b < end && !on; ++b)
          on = out.tags[b] >= 0 && ex.messages[static_cast<size_t>(out.tags[b])].supervised;
      if (on) std::fill(supervised.begin() + begin, supervised.begin() + end, 1);
    }
  } else if (!supervise_all) {
    // Provenance: the supervised messages' characters and their end-of-turn text.
    size_t b = 0;
    while (b < text.size()) {
      const int32_t tag = out.tags[b];
      if (tag < 0 || !ex.messages[static_cast<size_t>(tag)].supervised) {
        ++b;
        continue;
      }
      size_t e = b;
      while (e < text.size() && out.tags[e] == tag) supervised[e++] = 1;
      // The template's spaces right before the reply, when the tokenizer
      // spells them as the reply's first word marker: the model must emit it.
      for (size_t s = b; space_starts_word_ && s > 0 && text[s - 1] == ' ' && out.tags[s - 1] < 0; --s)
        supervised[s - 1] = 1;
      size_t stretch = e;  // the template's own text that follows
      while (stretch < text.size() && out.tags[stretch] < 0) ++stretch;
      const std::string_view after(text.data() + e, stretch - e);
      size_t best = std::string_view::npos, best_len = 0;
      for (const auto& st : special_tokens_) {
        const size_t at = after.find(st);
        if (at != std::string_view::npos && (at < best || (at == best && st.size() > best_len))) best = at, best_len = st.size();
      }
      if (best != std::string_view::npos && is_blank(after.substr(0, best)))
        std::fill(supervised.begin() + e, supervised.begin() + e + best + best_len, 1);
      b = e;
    }
  }

  // Pieces: cut at special tokens (control) and where supervision changes.
  std::vector<TextPiece> pieces;
  auto emit = [&](size_t begin, size_t end, bool control) {
    for (size_t p = begin; p < end;) {
      size_t q = p + 1;
      while (q < end && supervised[q] == supervised[p]) ++q;
      if (!pieces.empty() && !control && !pieces.back().control && pieces.back().supervised == (supervised[p] != 0))
        pieces.back().text.append(text, p, q - p);
      else
        pieces.push_back({text.substr(p, q - p), control, supervised[p] != 0});
      p = q;
    }
  };
  size_t plain_begin = 0;
  for (size_t p = 0; p < text.size();) {
    size_t match = 0;
    if (starts_special_[static_cast<unsigned char>(text[p])])
      for (const auto& st : special_tokens_)
      if (text.compare(p, st.size(), st) == 0) {
        match = st.size();
        break;  // longest first
      }
    if (match == 0) {
      ++p;
      continue;
    }
    emit(plain_begin, p, false);
    // A control piece keeps one supervision flag (the token is one token).
    pieces.push_back({text.substr(p, match), true, supervised[p] != 0});
    p += match;
    plain_begin = p;
  }
  emit(plain_begin, text.size(), false);
  return pieces;
}

}  // namespace fptrain::data
