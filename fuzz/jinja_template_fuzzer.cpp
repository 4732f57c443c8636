// Fuzz target jinja_template: a chat template's source (everything before the
// first line "#context") compiled by our Jinja interpreter and rendered with a
// fixed conversation, or with the JSON after that line as the variables. A
// template the interpreter cannot run must come out as jinja::Error (a bad
// template, or a bad line at training time); anything else escaping, a crash,
// a hang or a sanitizer report is a bug.
#include <nlohmann/json.hpp>

#include "common/json_input.h"
#include "fuzz/fuzz_util.h"
#include "jinja/template.h"

using namespace fptrain;

namespace {

const nlohmann::ordered_json& default_messages() {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi \u00e9 \u6771"},
    {"role": "assistant", "content": " 4. ", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "user", "content": ""}])");
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::as_text(data, size);
  const size_t split = input.find("\n#context\n");
  const std::string_view source = input.substr(0, split);
  nlohmann::ordered_json variables;
  if (split != std::string_view::npos) {
    try {
      variables = common::parse_ordered_json(input.substr(split + 10), "context");
    } catch (const std::invalid_argument&) {
      return 0;  // the context is the harness's input, not the template's
    }
  }
  try {
    const jinja::Template tmpl(source, "fuzz");
    jinja::Context ctx = jinja::chat_context(default_messages(), /*add_generation_prompt=*/true, nullptr, nullptr,
                                             {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    if (variables.is_object())
      for (const auto& [k, v] : variables.items()) ctx.variables[k] = v;
    ctx.now = [] { return std::tm{}; };
    (void)tmpl.render(ctx);
  } catch (const jinja::Error&) {
  }
  return 0;
}
