#include "jinja/str_ops.h"

#include <algorithm>

#include "jinja/utf8.h"

namespace fptrain::jinja {

namespace {

// Code point boundaries of a string (identity for ASCII, which skips the work).
class Offsets {
 public:
  explicit Offsets(const StrData& s) : ascii_(s.ascii), size_(s.s.size()) {
    if (!ascii_) offs_ = utf8::offsets(s.s.text());
  }
  int64_t length() const { return ascii_ ? static_cast<int64_t>(size_) : static_cast<int64_t>(offs_.size()) - 1; }
  size_t byte(int64_t cp) const { return ascii_ ? static_cast<size_t>(cp) : offs_[static_cast<size_t>(cp)]; }
  int64_t index_of_byte(size_t byte) const {
    if (ascii_) return static_cast<int64_t>(byte);
    return std::lower_bound(offs_.begin(), offs_.end(), byte) - offs_.begin();
  }

 private:
  bool ascii_;
  size_t size_;
  std::vector<size_t> offs_;
};

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(utf8::decode(s, i));
  return out;
}

// Line break length at s[i] (0 if none), as str.splitlines sees them.
size_t line_break(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == '\r') return (i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
  if (c == '\n' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E) return 1;
  if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) return 2;
  if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
      (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9))
    return 3;
  return 0;
}

// Byte length of the whitespace code point at s[i], 0 if it is not whitespace.
size_t space_at(std::string_view s, size_t i) {
  size_t j = i;
  return utf8::is_space(utf8::decode(s, j)) ? j - i : 0;
}

}  // namespace

TaggedString py_strip(const TaggedString& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::string& t = s.text();
  size_t begin = 0, end = t.size();
  if (!chars) {
    if (left) begin = utf8::leading_space(t);
    if (right && begin < end) end -= utf8::trailing_space(std::string_view(t).substr(begin));
    return s.substr(begin, end - begin);
  }
  const std::vector<char32_t> set = code_points(*chars);
  auto in_set = [&](char32_t c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  const std::vector<size_t> offs = utf8::offsets(t);
  size_t first = 0, last = offs.size() - 1;  // code point range [first, last)
  auto cp_at = [&](size_t k) {
    size_t i = offs[k];
    return utf8::decode(t, i);
  };
  if (left)
    while (first < last && in_set(cp_at(first))) ++first;
  if (right)
    while (last > first && in_set(cp_at(last - 1))) --last;
  return s.substr(offs[first], offs[last] - offs[first]);
}

TaggedString py_replace(const TaggedString& s, std::string_view old, const TaggedString& repl, int64_t count) {
  const std::string& t = s.text();
  TaggedString out;
  if (old.empty()) {
    size_t i = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
      out.append(repl);
      ++done;
      if (i >= t.size()) break;
      const size_t start = i;
      utf8::decode(t, i);
      out.append(s.substr(start, i - start));
    }
    out.append(s.substr(i));
    return out;
  }
  size_t prev = 0;
  int64_t done = 0;
  for (size_t pos = t.find(old); pos != std::string::npos && (count < 0 || done < count); pos = t.find(old, prev)) {
    out.append(s.substr(prev, pos - prev));
    out.append(repl);
    prev = pos + old.size();
    ++done;
  }
  out.append(s.substr(prev));
  return out;
}

std::vector<TaggedString> py_split(const TaggedString& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  const std::string& t = s.text();
  std::vector<TaggedString> out;
  if (sep) {
    if (sep->empty()) runtime_error("empty separator");
    size_t prev = 0;
    for (size_t pos = t.find(*sep); pos != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit);
         pos = t.find(*sep, prev)) {
      out.push_back(s.substr(prev, pos - prev));
      prev = pos + sep->size();
    }
    out.push_back(s.substr(prev));
    return out;
  }
  size_t i = 0;
  while (true) {
    while (i < t.size() && space_at(t, i)) i += space_at(t, i);
    if (i >= t.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(s.substr(i));
      break;
    }
    const size_t start = i;
    while (i < t.size() && !space_at(t, i)) utf8::decode(t, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::vector<TaggedString> py_rsplit(const TaggedString& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  const std::string& t = s.text();
  std::vector<TaggedString> out;
  if (sep) {
    if (sep->empty()) runtime_error("empty separator");
    size_t end = t.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t pos = t.rfind(*sep, end - sep->size());
      if (pos == std::string::npos) break;
      out.push_back(s.substr(pos + sep->size(), end - pos - sep->size()));
      end = pos;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  // Whitespace: work on code points from the right.
  const std::vector<size_t> offs = utf8::offsets(t);
  auto is_ws = [&](size_t k) { return space_at(t, offs[k]) > 0; };
  size_t end = offs.size() - 1;  // in code points
  while (true) {
    while (end > 0 && is_ws(end - 1)) --end;
    if (end == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(s.substr(0, offs[end]));
      break;
    }
    size_t start = end;
    while (start > 0 && !is_ws(start - 1)) --start;
    out.push_back(s.substr(offs[start], offs[end] - offs[start]));
    end = start;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<TaggedString> py_splitlines(const TaggedString& s, bool keepends) {
  const std::string& t = s.text();
  std::vector<TaggedString> out;
  size_t start = 0;
  for (size_t i = 0; i < t.size();) {
    const size_t br = line_break(t, i);
    if (br == 0) {
      ++i;
      continue;
    }
    out.push_back(s.substr(start, (keepends ? i + br : i) - start));
    i += br;
    start = i;
  }
  if (start < t.size()) out.push_back(s.substr(start));
  return out;
}

TaggedString py_join(const TaggedString& sep, const std::vector<TaggedString>& parts) {
  TaggedString out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out.append(sep);
    out.append(parts[i]);
  }
  return out;
}

TaggedString py_pad(const TaggedString& s, int64_t width, char align, std::string_view fill) {
  const auto len = static_cast<int64_t>(utf8::length(s.text()));
  if (width <= len) return s;
  check_size(static_cast<double>(width) * static_cast<double>(fill.size()));
  const int64_t marg = width - len;
  int64_t left = 0;
  if (align == '>') left = marg;
  if (align == '^') left = marg / 2 + (marg & width & 1);
  const int64_t right = marg - left;
  TaggedString out;
  for (int64_t i = 0; i < left; ++i) out.append(fill);
  out.append(s);
  for (int64_t i = 0; i < right; ++i) out.append(fill);
  return out;
}

TaggedString retag(const TaggedString& original, std::string new_text) { return original.with_text(std::move(new_text)); }

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::decode(s, i);
    if (previous_cased)
      utf8::append_lower(c, out);
    else if (c == 0xDF)
      out += "Ss";  // the title case of "ß"
    else
      utf8::append_upper(c, out);
    previous_cased = utf8::is_cased_lower(c) || utf8::is_cased_upper(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = utf8::decode(s, i);
    if (start == 0) {
      if (c == 0xDF) {
        out += "Ss";
      } else {
        utf8::append_upper(c, out);
      }
    } else {
      utf8::append_lower(c, out);
    }
  }
  return out;
}

std::string py_swapcase(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::decode(s, i);
    if (utf8::is_cased_upper(c))
      utf8::append_lower(c, out);
    else if (utf8::is_cased_lower(c))
      utf8::append_upper(c, out);
    else
      utf8::encode(c, out);
  }
  return out;
}

bool py_islower(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::decode(s, i);
    if (utf8::is_cased_upper(c)) return false;
    cased = cased || utf8::is_cased_lower(c);
  }
  return cased;
}

bool py_isupper(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::decode(s, i);
    if (utf8::is_cased_lower(c)) return false;
    cased = cased || utf8::is_cased_upper(c);
  }
  return cased;
}

int64_t slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step,
                      int64_t& first) {
  if (step == 0) runtime_error("slice step cannot be zero");
  auto clamp = [&](int64_t v) {
    if (v < 0) {
      v += length;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= length) {
      v = step < 0 ? length - 1 : length;
    }
    return v;
  };
  const int64_t b = start ? clamp(*start) : (step < 0 ? length - 1 : 0);
  const int64_t e = stop ? clamp(*stop) : (step < 0 ? -1 : length);
  first = b;
  if (step < 0) return e < b ? (b - e - 1) / (-step) + 1 : 0;
  return b < e ? (e - b - 1) / step + 1 : 0;
}

TaggedString py_slice_str(const StrData& s, std::optional<int64_t> start, std::optional<int64_t> stop,
                          std::optional<int64_t> step) {
  const Offsets offs(s);
  int64_t first = 0;
  const int64_t st = step.value_or(1);
  const int64_t n = slice_indices(offs.length(), start, stop, st, first);
  if (n <= 0) return TaggedString();
  if (st == 1) return s.s.substr(offs.byte(first), offs.byte(first + n) - offs.byte(first));
  TaggedString out;
  for (int64_t k = 0, i = first; k < n; ++k, i += st) out.append(s.s.substr(offs.byte(i), offs.byte(i + 1) - offs.byte(i)));
  return out;
}

std::optional<TaggedString> py_char_at(const StrData& s, int64_t index) {
  const Offsets offs(s);
  if (index < 0) index += offs.length();
  if (index < 0 || index >= offs.length()) return std::nullopt;
  return s.s.substr(offs.byte(index), offs.byte(index + 1) - offs.byte(index));
}

namespace {

// Python's ADJUST_INDICES for find/count.
bool adjust(const Offsets& offs, std::optional<int64_t> start, std::optional<int64_t> end, int64_t& b, int64_t& e) {
  const int64_t len = offs.length();
  e = end.value_or(len);
  if (e > len) e = len;
  else if (e < 0) e = std::max<int64_t>(e + len, 0);
  b = start.value_or(0);
  if (b < 0) b = std::max<int64_t>(b + len, 0);
  return b <= len;
}

}  // namespace

int64_t py_find(const StrData& s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
                bool reverse) {
  const Offsets offs(s);
  int64_t b = 0, e = 0;
  if (!adjust(offs, start, end, b, e) || e < b) return -1;
  const std::string_view hay = std::string_view(s.s.text()).substr(offs.byte(b), offs.byte(e) - offs.byte(b));
  const size_t pos = reverse ? hay.rfind(sub) : hay.find(sub);
  if (pos == std::string_view::npos) return -1;
  return offs.index_of_byte(offs.byte(b) + pos);
}

int64_t py_count(const StrData& s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end) {
  const Offsets offs(s);
  int64_t b = 0, e = 0;
  if (!adjust(offs, start, end, b, e) || e < b) return 0;
  if (sub.empty()) return e - b + 1;
  const std::string_view hay = std::string_view(s.s.text()).substr(offs.byte(b), offs.byte(e) - offs.byte(b));
  int64_t n = 0;
  for (size_t pos = hay.find(sub); pos != std::string_view::npos; pos = hay.find(sub, pos + sub.size())) ++n;
  return n;
}

}  // namespace fptrain::jinja
