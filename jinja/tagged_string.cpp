#include "jinja/tagged_string.h"

#include <algorithm>

namespace fptrain::jinja {

TaggedString::TaggedString(std::string text, int32_t tag) : text_(std::move(text)) {
  if (tag != kNoTag && !text_.empty()) runs_.push_back({text_.size(), tag});
}

int32_t TaggedString::tag_at(size_t byte) const {
  if (runs_.empty()) return kNoTag;
  auto it = std::upper_bound(runs_.begin(), runs_.end(), byte,
                             [](size_t b, const Run& r) { return b < r.end; });
  return it == runs_.end() ? kNoTag : it->tag;
}

void TaggedString::append_run(size_t end, int32_t tag) {
  if (!runs_.empty() && runs_.back().tag == tag)
    runs_.back().end = end;
  else
    runs_.push_back({end, tag});
}

void TaggedString::drop_if_untagged() {
  if (runs_.size() == 1 && runs_[0].tag == kNoTag) runs_.clear();
}

void TaggedString::append(std::string_view text, int32_t tag) {
  if (text.empty()) return;
  if (runs_.empty() && tag != kNoTag && !text_.empty()) runs_.push_back({text_.size(), kNoTag});
  text_.append(text);
  if (!runs_.empty() || tag != kNoTag) append_run(text_.size(), tag);
}

void TaggedString::append(const TaggedString& other) {
  if (other.runs_.empty()) return append(std::string_view(other.text_));
  if (runs_.empty() && !text_.empty()) runs_.push_back({text_.size(), kNoTag});
  const size_t base = text_.size();
  text_.append(other.text_);
  for (const Run& r : other.runs_) append_run(base + r.end, r.tag);
}

TaggedString TaggedString::substr(size_t pos, size_t n) const {
  TaggedString out;
  if (pos >= text_.size()) return out;
  n = std::min(n, text_.size() - pos);
  out.text_ = text_.substr(pos, n);
  if (runs_.empty() || n == 0) return out;
  const size_t end = pos + n;
  auto it = std::upper_bound(runs_.begin(), runs_.end(), pos,
                             [](size_t b, const Run& r) { return b < r.end; });
  for (; it != runs_.end(); ++it) {
    out.append_run(std::min(it->end, end) - pos, it->tag);
    if (it->end >= end) break;
  }
  out.drop_if_untagged();
  return out;
}

TaggedString TaggedString::with_text(std::string text) const {
  TaggedString out(std::move(text));
  if (out.text_.size() == text_.size()) out.runs_ = runs_;
  return out;
}

void TaggedString::expand_tags(std::vector<int32_t>& out) const {
  if (runs_.empty()) {
    out.insert(out.end(), text_.size(), kNoTag);
    return;
  }
  size_t begin = 0;
  for (const Run& r : runs_) {
    out.insert(out.end(), r.end - begin, r.tag);
    begin = r.end;
  }
}

}  // namespace fptrain::jinja
