#include "jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "jinja/error.h"
#include "jinja/string_literal.h"
#include "jinja/utf8.h"

namespace fptrain::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int count_newlines(std::string_view s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// jinja2 splits the source into lines on \r\n, \r or \n, drops a last empty
// line (the trailing newline) and joins with \n.
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out += '\n';
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool all_space(std::string_view s) { return !s.empty() && utf8::leading_space(s) == s.size(); }

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : src_(normalize_newlines(source)), name_(name) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) root();
    emit(TokenType::kEof, "");
    return std::move(out_);
  }

 private:
  [[noreturn]] void error(const std::string& message) {
    Error e(Error::Kind::kSyntax, message);
    e.locate(name_, line_);
    throw e;
  }

  Token& emit(TokenType type, std::string value) {
    out_.push_back(Token{type, std::move(value), 0, 0, line_});
    return out_.back();
  }

  bool at(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }
  size_t skip_space(size_t p) const { return p + utf8::leading_space(std::string_view(src_).substr(p)); }

  // Text up to the next tag, then the tag. `sign` is the tag's "-"/"+" marker.
  void root() {
    size_t p = pos_;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) break;
      ++p;
    }
    if (p == std::string::npos) {
      emit(TokenType::kData, src_.substr(pos_));
      line_ += count_newlines(out_.back().value);
      pos_ = src_.size();
      return;
    }
    const char kind = src_[p + 1];
    size_t after = p + 2;
    char sign = 0;
    const bool raw = kind == '%' && raw_begin(p, after, sign);
    if (!raw && after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
    emit_text(src_.substr(pos_, p - pos_), sign, /*lstrip_allowed=*/kind != '{');
    const std::string_view opener = std::string_view(src_).substr(p, after - p);
    line_starting_ = opener.back() == '\n';
    pos_ = after;
    if (kind == '#') {
      line_ += count_newlines(opener);
      return comment();
    }
    if (raw) {
      line_ += count_newlines(opener);
      return raw_body();
    }
    emit(kind == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin, "");
    line_ += count_newlines(opener);
    tag(kind == '%');
  }

  // The data before a tag, after "-" (strip all whitespace) or lstrip_blocks
  // (strip spaces between the last newline and the tag) apply.
  void emit_text(std::string text, char sign, bool lstrip_allowed) {
    int newlines_stripped = 0;
    if (sign == '-') {
      const size_t keep = text.size() - utf8::trailing_space(text);
      newlines_stripped = count_newlines(std::string_view(text).substr(keep));
      text.resize(keep);
    } else if (sign != '+' && lstrip_allowed) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(std::string_view(text).substr(l_pos))) text.resize(l_pos);
    }
    if (!text.empty()) emit(TokenType::kData, text);
    line_ += count_newlines(text) + newlines_stripped;
  }

  // {%(-|+|)\s*raw\s*(-%}\s*|%})
  bool raw_begin(size_t p, size_t& after, char& sign) const {
    size_t q = p + 2;
    char s = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) s = src_[q++];
    q = skip_space(q);
    if (!at(q, "raw")) return false;
    q = skip_space(q + 3);
    if (at(q, "-%}")) {
      q = skip_space(q + 3);
    } else if (at(q, "%}")) {
      q += 2;
    } else {
      return false;
    }
    after = q;
    sign = s;
    return true;
  }

  // A block end at p: +%}, -%} with following whitespace, or %} with one newline (trim_blocks).
  size_t block_end(size_t p) const {
    if (at(p, "+%}")) return p + 3;
    if (at(p, "-%}")) return skip_space(p + 3);
    if (at(p, "%}")) return p + 2 + (at(p + 2, "\n") ? 1 : 0);
    return std::string::npos;
  }

  void raw_body() {
    for (size_t p = src_.find("{%", pos_); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = skip_space(q);
      if (!at(q, "endraw")) continue;
      const size_t end = block_end(skip_space(q + 6));
      if (end == std::string::npos) continue;
      emit_text(src_.substr(pos_, p - pos_), sign, true);
      const std::string_view closer = std::string_view(src_).substr(p, end - p);
      line_ += count_newlines(closer);
      line_starting_ = closer.back() == '\n';
      pos_ = end;
      return;
    }
    error("missing end of raw directive");
  }

  void comment() {
    for (size_t r = src_.find("#}", pos_); r != std::string::npos; r = src_.find("#}", r + 1)) {
      const char before = r > pos_ ? src_[r - 1] : 0;
      size_t end = r + 2;
      if (before == '-')
        end = skip_space(end);
      else if (before != '+' && at(end, "\n"))
        ++end;
      line_ += count_newlines(std::string_view(src_).substr(pos_, end - pos_));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    error("missing end of comment tag");
  }

  // The tokens inside {{ }} or {% %}, up to and including the end marker.
  void tag(bool block) {
    while (pos_ < src_.size()) {
      if (balance_.empty()) {
        size_t end = std::string::npos;
        if (block) {
          end = block_end(pos_);
        } else if (at(pos_, "-}}")) {
          end = skip_space(pos_ + 3);
        } else if (at(pos_, "}}")) {
          end = pos_ + 2;
        }
        if (end != std::string::npos) {
          emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "");
          const std::string_view closer = std::string_view(src_).substr(pos_, end - pos_);
          line_ += count_newlines(closer);
          line_starting_ = closer.back() == '\n';
          pos_ = end;
          return;
        }
      }
      const size_t space = utf8::leading_space(std::string_view(src_).substr(pos_));
      if (space > 0) {
        const std::string_view ws = std::string_view(src_).substr(pos_, space);
        line_ += count_newlines(ws);
        line_starting_ = ws.back() == '\n';
        pos_ += space;
        continue;
      }
      line_starting_ = false;
      if (number() || name() || string_literal() || op()) continue;
      size_t i = pos_;
      std::string ch;
      utf8::encode(utf8::decode(src_, i), ch);
      error("unexpected char '" + ch + "' at " + std::to_string(pos_));
    }
  }

  // (\d+_)*\d+ : digits with single underscores between them.
  size_t digits(size_t p) const {
    if (p >= src_.size() || !is_digit(src_[p])) return std::string::npos;
    while (true) {
      while (p < src_.size() && is_digit(src_[p])) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_digit(src_[p + 1]))
        ++p;
      else
        return p;
    }
  }

  size_t exponent(size_t p) const {
    if (p >= src_.size() || (src_[p] != 'e' && src_[p] != 'E')) return std::string::npos;
    ++p;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    return digits(p);
  }

  bool number() {
    if (!is_digit(src_[pos_])) return false;
    const size_t int_end = digits(pos_);
    size_t float_end = std::string::npos;
    if (pos_ == 0 || src_[pos_ - 1] != '.') {  // a float never follows a dot: x.0.1
      const bool fraction = at(int_end, ".") && int_end + 1 < src_.size() && is_digit(src_[int_end + 1]);
      const size_t frac_end = fraction ? digits(int_end + 1) : std::string::npos;
      if (fraction) float_end = exponent(frac_end);
      if (float_end == std::string::npos) float_end = exponent(int_end);
      if (float_end == std::string::npos && fraction) float_end = frac_end;
    }
    if (float_end != std::string::npos) {
      std::string text = src_.substr(pos_, float_end - pos_);
      text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
      emit(TokenType::kFloat, text).float_value = std::strtod(text.c_str(), nullptr);
      pos_ = float_end;
      return true;
    }
    return integer();
  }

  bool integer() {
    int base = 10;
    size_t p = pos_;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char x = static_cast<char>(src_[p + 1] | 0x20);
      base = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 10;
    }
    auto valid = [&](char c) {
      if (base == 16) return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
      return c >= '0' && c < static_cast<char>('0' + std::min(base, 10));
    };
    std::string digits_text;
    if (base != 10) {
      p += 2;  // (_?digit)+
      while (p < src_.size()) {
        const size_t q = src_[p] == '_' ? p + 1 : p;
        if (q >= src_.size() || !valid(src_[q])) break;
        digits_text += src_[q];
        p = q + 1;
      }
      if (digits_text.empty()) {  // "0x" alone: just the integer 0
        base = 10;
        p = pos_ + 1;
        digits_text = "0";
      }
    } else {  // [1-9](_?\d)* or 0(_?0)*
      const bool zero = src_[p] == '0';
      digits_text += src_[p++];
      while (p < src_.size()) {
        const size_t q = src_[p] == '_' ? p + 1 : p;
        if (q >= src_.size() || !is_digit(src_[q]) || (zero && src_[q] != '0')) break;
        digits_text += src_[q];
        p = q + 1;
      }
    }
    errno = 0;
    const unsigned long long v = std::strtoull(digits_text.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      error("integer literal too large: " + src_.substr(pos_, p - pos_));
    emit(TokenType::kInteger, "").int_value = static_cast<int64_t>(v);
    pos_ = p;
    return true;
  }

  bool name() {
    if (!is_name_start(src_[pos_])) return false;
    size_t p = pos_;
    while (p < src_.size() && is_name_char(src_[p])) ++p;
    emit(TokenType::kName, src_.substr(pos_, p - pos_));
    pos_ = p;
    return true;
  }

  bool string_literal() {
    const char quote = src_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
    if (p >= src_.size()) return false;  // unterminated: reported as an unexpected char
    std::string problem;
    std::string value = decode_string_literal(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1), problem);
    if (!problem.empty()) error(problem);
    emit(TokenType::kString, std::move(value));
    line_ += count_newlines(std::string_view(src_).substr(pos_, p - pos_));
    pos_ = p + 1;
    return true;
  }

  bool op() {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* o : kTwo) {
      if (at(pos_, o)) {
        emit(TokenType::kOperator, o);
        pos_ += 2;
        return true;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) return false;
    if (c == '(' || c == '[' || c == '{') {
      balance_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance_.empty()) error(std::string("unexpected '") + c + "'");
      const char expected = balance_.back();
      balance_.pop_back();
      if (expected != c) error(std::string("unexpected '") + c + "', expected '" + expected + "'");
    }
    emit(TokenType::kOperator, std::string(1, c));
    ++pos_;
    return true;
  }

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the last thing lexed ended a line (lstrip_blocks' condition)
  std::vector<char> balance_;  // closing brackets expected, innermost last
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& template_name) {
  return Lexer(source, template_name).run();
}

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kData: return "template data";
    case TokenType::kVariableBegin: return "begin of print statement";
    case TokenType::kVariableEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kName: return "'" + token.value + "'";
    case TokenType::kString: return "string";
    case TokenType::kInteger: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOperator: return "'" + token.value + "'";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

}  // namespace fptrain::jinja
