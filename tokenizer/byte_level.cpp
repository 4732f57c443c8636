#include "tokenizer/byte_level.h"

#include <array>
#include <string>

#include "tokenizer/unicode.h"

namespace fptrain::tokenizer::byte_level {
namespace {

struct Tables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cp_to_byte{};  // every mapped code point is < 512
  Tables() {
    cp_to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      byte_to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      unicode::append_utf8(byte_to_utf8[b], byte_to_cp[b]);
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

void encode_bytes(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  out.reserve(out.size() + bytes.size() * 2);
  for (unsigned char b : bytes) out += t.byte_to_utf8[b];
}

std::optional<uint8_t> char_to_byte(uint32_t cp) {
  if (cp >= 512) return std::nullopt;
  const int16_t b = tables().cp_to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

bool decode_token(std::string_view token, std::string& out) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const auto b = char_to_byte(unicode::next_code_point(token, i));
    if (!b) return false;
    bytes.push_back(static_cast<char>(*b));
  }
  out += bytes;
  return true;
}

}  // namespace fptrain::tokenizer::byte_level
