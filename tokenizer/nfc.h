// Unicode Normalization Form C (canonical decomposition, then canonical
// composition), as tokenizers' NFC normalizer applies it (Qwen's tokenizers).
// Tables: unicode_nfc_tables.inc (generated; its Unicode version in kNfcVersion).
#pragma once

#include <string>
#include <string_view>

namespace fptrain::tokenizer::unicode {

// NFC of UTF-8 text (invalid bytes become U+FFFD, as everywhere in the tokenizers).
std::string nfc(std::string_view text);

// The Unicode version of the tables.
const char* nfc_unicode_version();

}  // namespace fptrain::tokenizer::unicode
