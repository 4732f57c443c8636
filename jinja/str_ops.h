// Python str operations on tagged strings, shared by the filters and the str
// methods. Everything indexes by code point, as Python does, and keeps the
// tags of the characters it keeps (strip, split, replace, slicing, padding).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/tagged_string.h"
#include "jinja/value.h"

namespace fptrain::jinja {

// chars: the set of code points to strip; nullopt strips whitespace.
TaggedString py_strip(const TaggedString& s, const std::optional<std::string>& chars, bool left, bool right);
// count < 0: all occurrences. An empty `old` inserts `repl` between characters, as Python does.
TaggedString py_replace(const TaggedString& s, std::string_view old, const TaggedString& repl, int64_t count);
// sep nullopt: split on runs of whitespace. maxsplit < 0: no limit.
std::vector<TaggedString> py_split(const TaggedString& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<TaggedString> py_rsplit(const TaggedString& s, const std::optional<std::string>& sep, int64_t maxsplit);
// Splits at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029.
std::vector<TaggedString> py_splitlines(const TaggedString& s, bool keepends);
TaggedString py_join(const TaggedString& sep, const std::vector<TaggedString>& parts);
// center / ljust / rjust: align '^', '<', '>'.
TaggedString py_pad(const TaggedString& s, int64_t width, char align, std::string_view fill);

// Case changes; `with_tags_of` keeps the original tags when the byte length did not change.
TaggedString retag(const TaggedString& original, std::string new_text);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_swapcase(std::string_view s);
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);

// s[start:stop:step] on code points; missing parts are nullopt. Throws for step 0.
TaggedString py_slice_str(const StrData& s, std::optional<int64_t> start, std::optional<int64_t> stop,
                          std::optional<int64_t> step);
// The code point at `index` (negative counts from the end); nullopt when out of range.
std::optional<TaggedString> py_char_at(const StrData& s, int64_t index);
// find / rfind / count over [start, end) code points (Python slice bounds); find returns -1 if absent.
int64_t py_find(const StrData& s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
                bool reverse);
int64_t py_count(const StrData& s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end);

// Python's slice.indices(): clamps start/stop for a sequence of `length`; returns the number of items.
int64_t slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step,
                      int64_t& first);

}  // namespace fptrain::jinja
