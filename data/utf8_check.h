// UTF-8 validation of raw JSONL lines (the JSON parser accepts some byte
// sequences we want to report as "invalid UTF-8" by name).
#pragma once

#include <cstddef>
#include <string_view>

namespace fptrain::data {

// Returns the byte offset of the first invalid sequence, or npos if `text`
// is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
size_t find_invalid_utf8(std::string_view text);

}  // namespace fptrain::data
