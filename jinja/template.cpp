#include "jinja/template.h"

#include "jinja/interpreter.h"
#include "jinja/json.h"
#include "jinja/parser.h"

namespace fptrain::jinja {

namespace {

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

Context chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools, const nlohmann::ordered_json& documents,
                     const nlohmann::ordered_json& extra) {
  Context ctx;
  nlohmann::ordered_json& out = ctx.variables["messages"] = nlohmann::ordered_json::array();
  for (const auto& message : messages) {
    const nlohmann::ordered_json* reasoning = nullptr;
    if (message.is_object())
      for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
        auto it = message.find(field);
        if (it != message.end() && !it->is_null()) {
          reasoning = &*it;
          break;
        }
      }
    if (reasoning == nullptr) {
      out.push_back(message);
      continue;
    }
    // {"thinking": r, **message, "reasoning_content": r}, with Python's key order.
    nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
    aliased["thinking"] = *reasoning;
    for (auto it = message.begin(); it != message.end(); ++it) aliased[it.key()] = it.value();
    aliased["reasoning_content"] = *reasoning;
    out.push_back(std::move(aliased));
  }
  ctx.variables["tools"] = tools;
  ctx.variables["documents"] = documents;
  ctx.variables["add_generation_prompt"] = add_generation_prompt;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx.variables[it.key()] = it.value();
  for (size_t i = 0; i < messages.size(); ++i) ctx.tag("/messages/" + std::to_string(i) + "/content", static_cast<int32_t>(i));
  return ctx;
}

Template::Template(std::string_view source, std::string name)
    : name_(std::move(name)), program_(std::make_shared<Program>(parse(source, name_))) {}

RenderOutput Template::render(const Context& context) const {
  if (!context.variables.is_object()) {
    Error e(Error::Kind::kType, "the context variables must be a JSON object");
    e.locate(name_, 0);
    throw e;
  }
  Value variables;
  try {
    variables = from_json(context.variables, context.tags);
  } catch (Error& e) {
    e.locate(name_, 0);
    throw;
  }
  TaggedString text;
  RenderOutput out;
  {
    Interpreter interp(*program_, variables, context.now ? context.now : local_now);
    interp.run(text, out.generation);
  }
  out.tags.reserve(text.size());
  text.expand_tags(out.tags);
  out.text = text.text();
  return out;
}

}  // namespace fptrain::jinja
