#include "tokenizer/regex.h"

#include <pcre2.h>

#include <stdexcept>

#include "common/json_input.h"
#include "tokenizer/unicode.h"

namespace fptrain::tokenizer {
namespace {

// Per-thread scratch: one match-data block and one JIT stack serve every Regex,
// since a thread runs one match at a time.
struct ThreadScratch {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() {
    if (!match_data || !context) throw std::runtime_error("PCRE2: out of memory creating match data");
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}

// The Rust regex crate and Oniguruma (which tokenizers uses) define \s as the
// Unicode White_Space property and \w as UTS #18's word characters; PCRE2's
// UCP classes differ at the edges (\s takes U+180E, \w takes all numbers but
// no marks). Spelling the classes out makes PCRE2 split where tokenizers does.
const char* const kSpace = "\\t-\\r\\x{85}\\p{Z}";
const char* const kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";

std::string with_unicode_perl_classes(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const bool space = e == 's' || e == 'S', word = e == 'w' || e == 'W';
      const bool negated = e == 'S' || e == 'W';
      if ((space || word) && !(in_class && negated)) {
        const char* body = space ? kSpace : kWord;
        out += in_class ? std::string(body) : std::string(negated ? "[^" : "[") + body + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(pattern, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2 rejects UCP together with LITERAL; a literal needs no character classes.
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_NO_UTF_CHECK | PCRE2_LITERAL)
                                   : (PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK);
  const std::string compiled = literal ? pattern : with_unicode_perl_classes(pattern);
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options, &error,
                             &error_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw std::invalid_argument("invalid regex '" + common::cut_text(pattern) + "' at offset " +
                                std::to_string(error_offset) + ": " +
                                reinterpret_cast<const char*>(message));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::search(std::string_view s, size_t from, size_t& begin, size_t& end) const {
  auto& tls = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  auto* code = static_cast<pcre2_code*>(code_);
  const int rc = jit_ ? pcre2_jit_match(code, subject, s.size(), from, 0, tls.match_data, tls.context)
                      : pcre2_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK, tls.match_data, tls.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    throw std::runtime_error("regex '" + common::cut_text(pattern_) + "' failed: " +
                             reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(tls.match_data);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  size_t from = 0;
  size_t begin = 0, end = 0;
  while (from <= s.size() && search(s, from, begin, end)) {
    out.emplace_back(begin, end);
    if (end > begin) {
      from = end;
    } else {
      if (end >= s.size()) break;
      from = end + unicode::sequence_length(static_cast<unsigned char>(s[end]));
    }
  }
}

bool Regex::matches(std::string_view s) const {
  size_t begin = 0, end = 0;
  return search(s, 0, begin, end);
}

}  // namespace fptrain::tokenizer
