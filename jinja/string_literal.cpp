#include "jinja/string_literal.h"

#include <cstdio>

#include "jinja/utf8.h"

namespace fptrain::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::string decode_string_literal(std::string_view s, std::string& problem) {
  std::string out;
  problem.clear();
  auto hex_value = [&](size_t at, size_t n, char32_t& cp) {
    if (at + n > s.size()) return false;
    cp = 0;
    for (size_t k = 0; k < n; ++k) {
      const char c = s[at + k];
      int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) return false;
      cp = cp * 16 + static_cast<char32_t>(d);
    }
    return true;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    char32_t cp = 0;
    switch (c) {
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (!hex_value(i + 1, n, cp) || cp > 0x10FFFF) {
          problem = std::string("truncated \\") + c + " escape";
          return out;
        }
        utf8::encode(cp, out);
        i += n;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          size_t n = 0;
          while (n < 3 && i + n < s.size() && s[i + n] >= '0' && s[i + n] <= '7') cp = cp * 8 + (s[i + n++] - '0');
          utf8::encode(cp, out);
          i += n - 1;
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // Python first backslash-escapes non-ASCII text, so "\é" becomes the text "\xe9".
          size_t j = i;
          const char32_t nc = utf8::decode(s, j);
          char buf[16];
          std::snprintf(buf, sizeof(buf), nc < 0x100 ? "\\x%02x" : nc < 0x10000 ? "\\u%04x" : "\\U%08x",
                        static_cast<unsigned>(nc));
          out += buf;
          i = j - 1;
        } else if (c == 'N') {  // \N{NAME} needs Unicode's name table, which we do not carry
          problem = "\\N{...} escapes are not supported";
          return out;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

}  // namespace fptrain::jinja
