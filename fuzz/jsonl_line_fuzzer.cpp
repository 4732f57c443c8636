// Fuzz target jsonl_line: one line of a JSONL data file through the example
// parser in every format, and through format detection. A bad line must come
// out as data::BadLine (skipped or reported with file:line); anything else
// escaping, a crash or a sanitizer report is a bug.
#include "data/example_parser.h"
#include "fuzz/fuzz_util.h"

using namespace fptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line = fuzz::as_text(data, size);
  (void)data::format_of_keys(line);
  for (const data::ExampleFormat format :
       {data::ExampleFormat::kMessages, data::ExampleFormat::kPromptCompletion, data::ExampleFormat::kAlpaca,
        data::ExampleFormat::kText, data::ExampleFormat::kTokens}) {
    try {
      const data::RawExample example = data::parse_example(line, format);
      (void)example;
    } catch (const data::BadLine&) {
    }
  }
  return 0;
}
