// GPT-2's reversible byte <-> printable-character mapping used by byte-level
// BPE vocabularies (Llama 3, Granite): printable Latin-1 bytes map to
// themselves, the other bytes to U+0100 onwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fptrain::tokenizer::byte_level {

// Appends the mapped character (UTF-8) of every byte of `bytes`.
void encode_bytes(std::string_view bytes, std::string& out);

// The byte a mapped character stands for, if it is one.
std::optional<uint8_t> char_to_byte(uint32_t cp);

// Maps the characters of `token` back to bytes; false (out untouched) when
// some character is not a mapped byte.
bool decode_token(std::string_view token, std::string& out);

}  // namespace fptrain::tokenizer::byte_level
