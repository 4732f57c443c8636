// The chat templates fptrain ships (data/chat_templates/*.jinja), compiled
// into the library by CMake: (name, Jinja source) pairs, name = file stem.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace fptrain::data {

const std::vector<std::pair<std::string_view, std::string_view>>& builtin_chat_templates();

}  // namespace fptrain::data
