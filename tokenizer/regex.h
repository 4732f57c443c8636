// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for the tokenizers'
// Split pre-tokenizers and Replace normalizers. Matching is thread-safe: match
// data and the JIT stack live in thread-local storage.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fptrain::tokenizer {

class Regex {
 public:
  // `literal` matches the pattern text verbatim (tokenizers' {"String": ...} patterns).
  explicit Regex(const std::string& pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match, left to right, as [begin, end) byte offsets.
  // After an empty match the search resumes one character later (as Rust's
  // find_iter does). `s` must be valid UTF-8 (not re-checked, for speed).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

  // True when the pattern matches somewhere in `s`.
  bool matches(std::string_view s) const;

  const std::string& pattern() const { return pattern_; }

 private:
  // Returns false when there is no match at or after `from`.
  bool search(std::string_view s, size_t from, size_t& begin, size_t& end) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so pcre2.h stays out of headers
  bool jit_ = false;
};

}  // namespace fptrain::tokenizer
