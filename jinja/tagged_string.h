// Text that remembers where its bytes came from. Every byte carries a tag:
// the id the caller gave the input string it was copied from (e.g. a message
// index), or kNoTag for template literals and computed text. Tags are stored
// as runs, so an untagged string costs nothing and a copied message is one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fptrain::jinja {

inline constexpr int32_t kNoTag = -1;

class TaggedString {
 public:
  TaggedString() = default;
  explicit TaggedString(std::string text, int32_t tag = kNoTag);

  const std::string& text() const { return text_; }
  size_t size() const { return text_.size(); }
  bool empty() const { return text_.empty(); }
  bool has_tags() const { return !runs_.empty(); }
  int32_t tag_at(size_t byte) const;

  void append(const TaggedString& other);
  void append(std::string_view text, int32_t tag = kNoTag);
  // Bytes [pos, pos + n) with their tags (n is clamped to the end).
  TaggedString substr(size_t pos, size_t n = std::string::npos) const;
  // The same tags over new text of the same byte length (a case change); untagged otherwise.
  TaggedString with_text(std::string text) const;
  // Appends one tag per byte to `out`.
  void expand_tags(std::vector<int32_t>& out) const;

 private:
  struct Run {
    size_t end;  // the run covers [previous run's end, end)
    int32_t tag;
  };
  void append_run(size_t end, int32_t tag);
  void drop_if_untagged();

  std::string text_;
  std::vector<Run> runs_;  // empty: every byte is kNoTag; else covers all of text_
};

}  // namespace fptrain::jinja
