// One convention for enums that appear in configuration files and messages:
// each enum specialises EnumNames<E> next to its declaration with a table of
// (value, name) pairs, and everything else — parsing with an error that lists
// the choices, printing, the YAML choice list — is derived from that table.
#pragma once

#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace fptrain::common {

template <class E>
struct EnumEntry {
  E value;
  const char* name;
  bool alias = false;  // accepted when parsing, not printed or listed
};

// Specialise with `static constexpr std::array<EnumEntry<E>, N> table = {...};`.
template <class E>
struct EnumNames;

template <class E>
const char* enum_name(E value) {
  for (const auto& e : EnumNames<E>::table)
    if (e.value == value && !e.alias) return e.name;
  return "?";
}

// "a | b | c": the names a user may write (aliases left out).
template <class E>
std::string enum_choices() {
  std::string s;
  for (const auto& e : EnumNames<E>::table)
    if (!e.alias) s += (s.empty() ? "" : " | ") + std::string(e.name);
  return s;
}

// Throws std::invalid_argument "<key>: 'x' is not one of a | b | c".
template <class E>
E parse_enum(std::string_view text, std::string_view key) {
  for (const auto& e : EnumNames<E>::table)
    if (std::string_view(e.name) == text) return e.value;
  throw std::invalid_argument(std::string(key) + ": '" + std::string(text) + "' is not one of " + enum_choices<E>());
}

}  // namespace fptrain::common
