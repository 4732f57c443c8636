#include "data/example_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "common/json_input.h"
#include "data/utf8_check.h"

namespace fptrain::data {
namespace {

// Key order is kept: the chat template sees messages as the line wrote them
// (tojson of a tool call prints its keys in that order).
using json = nlohmann::ordered_json;

const char* json_type(const json& v) { return v.type_name(); }

const json& field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null())
    throw BadLine(SkipReason::kMissingField, std::string("missing field '") + key + "'");
  return *it;
}

std::string string_field(const json& obj, const char* key, bool optional = false) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (optional) return {};
    throw BadLine(SkipReason::kMissingField, std::string("missing field '") + key + "'");
  }
  if (!it->is_string())
    throw BadLine(SkipReason::kWrongType, std::string("field '") + key + "' must be a string, got " +
                                              json_type(*it));
  return it->get<std::string>();
}

// Roles of the ShareGPT convention ({"from": "human", "value": ...}) mapped to ours.
const char* sharegpt_role(const std::string& from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant" || from == "model") return "assistant";
  if (from == "system") return "system";
  return nullptr;
}

// A list of {"role", "content"} messages, or ShareGPT's {"from", "value"}.
std::vector<Message> parse_messages(const json& list, const char* key) {
  if (!list.is_array())
    throw BadLine(SkipReason::kWrongType,
                  std::string("field '") + key + "' must be a list of messages, got " + json_type(list));
  std::vector<Message> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!m.is_object())
      throw BadLine(SkipReason::kWrongType, where + " must be an object, got " + json_type(m));
    const bool sharegpt = !m.contains("role") && m.contains("from");
    const char* role_key = sharegpt ? "from" : "role";
    const char* content_key = sharegpt ? "value" : "content";
    auto role = m.find(role_key);
    auto content = m.find(content_key);
    if (role == m.end()) throw BadLine(SkipReason::kMissingField, where + ": missing field 'role'");
    if (!role->is_string())
      throw BadLine(SkipReason::kWrongType,
                    where + "." + role_key + " must be a string, got " + json_type(*role));
    // Content is text; an assistant message that only calls tools may have none
    // (null or absent), and content may be a list of blocks (the template reads them).
    const bool calls_tools = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if ((content == m.end() || content->is_null()) && !calls_tools)
      throw BadLine(SkipReason::kMissingField, where + ": missing field '" + content_key + "'");
    if (content != m.end() && !content->is_null() && !content->is_string() && !(content->is_array() && !sharegpt))
      throw BadLine(SkipReason::kWrongType,
                    where + "." + content_key + " must be a string, got " + json_type(*content));
    Message msg{role->get<std::string>(), "", false, json()};
    if (content != m.end() && content->is_string()) msg.content = content->get<std::string>();
    if (content != m.end() && content->is_array())
      for (const json& block : *content)
        if (block.is_object() && block.contains("text") && block["text"].is_string())
          msg.content += block["text"].get<std::string>();
    if (sharegpt) {
      const char* mapped = sharegpt_role(msg.role);
      if (!mapped)
        throw BadLine(SkipReason::kInvalidValue,
                      where + ".from '" + common::cut_text(msg.role, 80) + "' is not one of system, human, gpt");
      msg.role = mapped;
      msg.fields = json{{"role", msg.role}, {"content", msg.content}};
    } else {
      static const char* const kRoles[] = {"system", "user", "assistant", "tool", "ipython", "function", "developer"};
      if (std::find_if(std::begin(kRoles), std::end(kRoles), [&](const char* r) { return msg.role == r; }) ==
          std::end(kRoles))
        throw BadLine(SkipReason::kInvalidValue,
                      where + ".role '" + common::cut_text(msg.role, 80) +
                          "' is not one of system, user, assistant, tool, ipython, function, developer");
      msg.fields = m;
    }
    out.push_back(std::move(msg));
  }
  if (out.empty()) throw BadLine(SkipReason::kInvalidValue, std::string("field '") + key + "' is empty");
  return out;
}

std::vector<int32_t> parse_ids(const json& list, const char* key, bool allow_ignore) {
  if (!list.is_array())
    throw BadLine(SkipReason::kWrongType,
                  std::string("field '") + key + "' must be a list of integers, got " + json_type(list));
  std::vector<int32_t> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& v = list[i];
    if (!v.is_number_integer())
      throw BadLine(SkipReason::kWrongType, std::string(key) + "[" + std::to_string(i) +
                                                "] must be an integer, got " + json_type(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      throw BadLine(SkipReason::kInvalidValue, std::string(key) + "[" + std::to_string(i) + "] = " +
                                                   std::to_string(v.get<uint64_t>()) + " is out of range");
    const int64_t x = v.get<int64_t>();
    const bool ok = (x >= 0 && x <= std::numeric_limits<int32_t>::max()) || (allow_ignore && x == -100);
    if (!ok)
      throw BadLine(SkipReason::kInvalidValue,
                    std::string(key) + "[" + std::to_string(i) + "] = " + std::to_string(x) + " is out of range");
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

ExampleFormat format_of_object(const json& obj) {
  if (obj.contains("messages") || obj.contains("conversations")) return ExampleFormat::kMessages;
  if (obj.contains("input_ids")) return ExampleFormat::kTokens;
  if (obj.contains("prompt") && obj.contains("completion")) return ExampleFormat::kPromptCompletion;
  if (obj.contains("instruction") && obj.contains("output")) return ExampleFormat::kAlpaca;
  if (obj.contains("text")) return ExampleFormat::kText;
  return ExampleFormat::kAuto;
}

}  // namespace

ExampleFormat format_of_keys(std::string_view line) {
  if (common::json_nesting_exceeds(line, common::kMaxJsonDepth)) return ExampleFormat::kAuto;
  json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!obj.is_object()) return ExampleFormat::kAuto;
  return format_of_object(obj);
}

ExampleFormat detect_format(const JsonlFile& file) {
  const size_t probe = std::min<size_t>(file.num_lines(), 64);
  for (size_t i = 0; i < probe; ++i) {
    const ExampleFormat f = format_of_keys(file.read_line(i));
    if (f != ExampleFormat::kAuto) return f;
  }
  throw std::runtime_error(
      file.path().string() + ": cannot detect the data format: none of the first " + std::to_string(probe) +
      " lines is a JSON object with 'messages', 'prompt'+'completion', 'instruction'+'output', 'text' or "
      "'input_ids'; set the file's format in the config");
}

RawExample parse_example(std::string_view line, ExampleFormat format) {
  const size_t bad = find_invalid_utf8(line);
  if (bad != std::string_view::npos)
    throw BadLine(SkipReason::kInvalidUtf8, "invalid UTF-8 at byte " + std::to_string(bad));
  // Nesting is bounded first: a line nested 100000 deep is a bad line, not a stack overflow.
  if (common::json_nesting_exceeds(line, common::kMaxJsonDepth))
    throw BadLine(SkipReason::kMalformedJson,
                  "malformed JSON: nested deeper than " + std::to_string(common::kMaxJsonDepth) + " levels");
  json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) {
    // Parse again for the parser's own description of the problem (which
    // quotes the token it stopped at: cut, it may be a whole long string).
    try {
      const json again = json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      throw BadLine(SkipReason::kMalformedJson, "malformed JSON: " + common::cut_text(e.what(), 300));
    }
    throw BadLine(SkipReason::kMalformedJson, "malformed JSON");
  }
  if (!obj.is_object())
    throw BadLine(SkipReason::kWrongType, std::string("line must be a JSON object, got ") + json_type(obj));

  RawExample ex;
  ex.format = format;
  switch (format) {
    case ExampleFormat::kMessages:
      if (!obj.contains("messages") && obj.contains("conversations"))  // ShareGPT
        ex.messages = parse_messages(field(obj, "conversations"), "conversations");
      else
        ex.messages = parse_messages(field(obj, "messages"), "messages");
      // Tool schemas and documents go to the chat template as transformers passes them.
      for (const char* key : {"tools", "documents"}) {
        auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) continue;
        if (!it->is_array())
          throw BadLine(SkipReason::kWrongType,
                        std::string("field '") + key + "' must be a list, got " + json_type(*it));
        (std::string(key) == "tools" ? ex.tools : ex.documents) = *it;
      }
      break;
    case ExampleFormat::kPromptCompletion: {
      const json& prompt = field(obj, "prompt");
      const json& completion = field(obj, "completion");
      if (prompt.is_array() || completion.is_array()) {
        // Conversational prompt/completion: turns of the completion are supervised.
        ex.messages = parse_messages(prompt, "prompt");
        auto tail = parse_messages(completion, "completion");
        for (auto& m : tail) m.supervised = m.role == "assistant";
        ex.messages.insert(ex.messages.end(), tail.begin(), tail.end());
      } else {
        ex.prompt = string_field(obj, "prompt");
        ex.completion = string_field(obj, "completion");
      }
      break;
    }
    case ExampleFormat::kAlpaca: {
      const std::string instruction = string_field(obj, "instruction");
      const std::string input = string_field(obj, "input", /*optional=*/true);
      const std::string output = string_field(obj, "output");
      // Kept as a two-turn conversation; the encoder renders it with the chat
      // template, or with the Alpaca prompt when there is none.
      ex.messages = {{"user", input.empty() ? instruction : instruction + "\n\n" + input, false},
                     {"assistant", output, true}};
      ex.prompt = instruction;
      ex.text = input;
      ex.completion = output;
      break;
    }
    case ExampleFormat::kText:
      ex.text = string_field(obj, "text");
      break;
    case ExampleFormat::kTokens: {
      ex.input_ids = parse_ids(field(obj, "input_ids"), "input_ids", false);
      auto it = obj.find("labels");
      if (it != obj.end() && !it->is_null()) {
        ex.labels = parse_ids(*it, "labels", true);
        if (ex.labels.size() != ex.input_ids.size())
          throw BadLine(SkipReason::kInvalidValue, "labels has " + std::to_string(ex.labels.size()) +
                                                       " entries but input_ids has " +
                                                       std::to_string(ex.input_ids.size()));
      }
      if (ex.input_ids.empty()) throw BadLine(SkipReason::kInvalidValue, "input_ids is empty");
      break;
    }
    case ExampleFormat::kAuto:
      throw std::logic_error("parse_example: format must be resolved first");
  }
  return ex;
}

}  // namespace fptrain::data
