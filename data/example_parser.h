// JSONL line -> RawExample for each supported format, and per-file format
// detection.
#pragma once

#include <string_view>

#include "data/jsonl_file.h"
#include "data/raw_example.h"

namespace fptrain::data {

// Throws BadLine (invalid UTF-8, malformed JSON, missing or mistyped field).
RawExample parse_example(std::string_view line, ExampleFormat format);

// The format of a JSON object from its keys; kAuto when none matches.
ExampleFormat format_of_keys(std::string_view line);

// Detects the format from the first lines of the file that parse as JSON
// objects; throws naming the file when none is recognizable.
ExampleFormat detect_format(const JsonlFile& file);

}  // namespace fptrain::data
