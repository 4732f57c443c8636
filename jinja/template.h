// The public interface: a Jinja2 template interpreter for Hugging Face chat
// templates, rendering exactly as transformers' apply_chat_template does
// (jinja2 3.1, ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, {% generation %}, tojson / raise_exception / strftime_now),
// and remembering where each output byte came from.
//
//   jinja::Template t(chat_template_source, "chat_template");   // parses; throws jinja::Error
//   jinja::Context ctx = jinja::chat_context(messages_json, /*add_generation_prompt=*/false,
//                                            tools_json, nullptr, {{"bos_token", "<s>"}});
//   // (or fill ctx.variables and ctx.tag("/messages/3/content", 3) yourself)
//   jinja::RenderOutput out = t.render(ctx);                     // throws jinja::Error
//   // out.text; out.tags[b] = message index byte b was copied from, or -1;
//   // out.generation = [begin, end) byte ranges of {% generation %} blocks.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/error.h"

namespace fptrain::jinja {

struct Program;

struct Context {
  // The template's variables: a JSON object (messages, tools, bos_token, ...).
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  // Provenance: every string at or below a JSON pointer into `variables`
  // carries that tag (the deepest listed pointer wins), e.g. {"/messages/3", 3}.
  std::map<std::string, int32_t> tags;
  // strftime_now's clock; empty means the local time now.
  std::function<std::tm()> now;

  void tag(std::string json_pointer, int32_t tag) { tags[std::move(json_pointer)] = tag; }
};

struct RenderOutput {
  std::string text;
  std::vector<int32_t> tags;  // one per byte of text: the tag it was copied from, or -1
  // The [begin, end) byte ranges of {% generation %} blocks, as transformers'
  // return_assistant_tokens_mask computes them (in bytes rather than characters).
  // A block inside a macro, {% set %} / {% filter %} block or recursive loop gets
  // transformers' misplaced range, which may even end past the text: clamp before use.
  std::vector<std::pair<size_t, size_t>> generation;
};

// The variables transformers' apply_chat_template gives a chat template, in
// its order: messages (reasoning fields aliased as transformers does:
// reasoning_content / thinking / reasoning fill both "thinking" and
// "reasoning_content"), tools and documents (null when absent),
// add_generation_prompt, then `extra` (bos_token, eos_token, any template
// kwargs). Each message's content is tagged with the message's index.
Context chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr, const nlohmann::ordered_json& documents = nullptr,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

class Template {
 public:
  // Parses (and checks, as jinja2 compiles) the source. Throws Error.
  explicit Template(std::string_view source, std::string name = "template");

  // Thread-safe: a Template can be rendered from several threads at once. Throws Error.
  RenderOutput render(const Context& context) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Program> program_;
};

}  // namespace fptrain::jinja
