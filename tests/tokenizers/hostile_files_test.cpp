// Hostile tokenizer files: JSON nested far deeper than any real file (a stack
// overflow once), ids near 2^30 and protobuf lengths beyond the file (huge
// allocations once), values of the wrong type (a bare nlohmann type_error once)
// and huge values quoted in messages. Each must fail with a message naming the
// file and the key, quickly and in bounded memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using fptrain::tokenizer::load_tokenizer;

class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = fs::temp_directory_path() / ("fptrain_tok_hostile_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path_ / name, std::ios::binary) << bytes;
  }
  void remove(const std::string& name) const { fs::remove(path_ / name); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs `fn` in a child process limited to `limit_mb` of address space and 60
// seconds, and returns what it threw: a regression to a huge allocation or an
// endless loop shows up as a wrong message instead of taking the machine down.
std::string error_in_bounded_child(const std::function<void()>& fn, size_t limit_mb = 2048) {
  int fds[2];
  if (::pipe(fds) != 0) return "<pipe failed>";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const rlimit limit{limit_mb << 20, limit_mb << 20};
    ::setrlimit(RLIMIT_AS, &limit);
    ::alarm(60);
    std::string message = "<no error>";
    try {
      fn();
    } catch (const std::exception& e) {
      message = e.what();
    }
    const ssize_t ignored = ::write(fds[1], message.data(), message.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "<killed by signal " + std::to_string(WTERMSIG(status)) + "> " + out;
  return out;
}

std::string load_error(const fs::path& dir) {
  return error_in_bounded_child([&] { load_tokenizer(dir); });
}

std::string deep(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A minimal byte-level BPE tokenizer.json: `model` and `added_tokens` given,
// the rest fixed.
std::string tokenizer_json(const std::string& model, const std::string& added = "[]",
                           const std::string& extra = "") {
  return "{\"version\": \"1.0\", \"added_tokens\": " + added +
         ", \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, "
         "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": " + model + extra + "}";
}

const std::string kModel = R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

#define EXPECT_HAS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text).substr(0, 2000)

TEST(TokenizerHostileFiles, DeeplyNestedJsonNamesTheFile) {
  TempDir dir("deep");
  dir.write("tokenizer.json", tokenizer_json(kModel, "[]", ", \"x\": " + deep(100000)));
  std::string e = load_error(dir.path());
  EXPECT_HAS(e, (dir.path() / "tokenizer.json").string() + ": invalid JSON: nested deeper than");
  EXPECT_LT(e.size(), 500u);

  dir.write("tokenizer.json", tokenizer_json(kModel));
  dir.write("tokenizer_config.json", "{\"bos_token\": " + deep(100000) + "}");
  e = load_error(dir.path());
  EXPECT_HAS(e, (dir.path() / "tokenizer_config.json").string() + ": invalid JSON: nested deeper than");

  dir.remove("tokenizer_config.json");
  dir.write("special_tokens_map.json", "{\"bos_token\": " + deep(100000) + "}");
  e = load_error(dir.path());
  EXPECT_HAS(e, (dir.path() / "special_tokens_map.json").string() + ": invalid JSON: nested deeper than");

  // Nesting at real depths loads.
  dir.remove("special_tokens_map.json");
  dir.write("tokenizer.json", tokenizer_json(kModel, "[]", ", \"x\": " + deep(60)));
  EXPECT_NO_THROW(load_tokenizer(dir.path()));
}

TEST(TokenizerHostileFiles, IdsFarBeyondTheVocabularyAreErrorsNotAllocations) {
  TempDir dir("ids");
  const std::string file = (dir.path() / "tokenizer.json").string();
  dir.write("tokenizer.json",
            tokenizer_json(R"({"type": "BPE", "vocab": {"a": 0, "b": 1073741824, "ab": 2}, "merges": ["a b"]})"));
  std::string e = load_error(dir.path());
  EXPECT_HAS(e, file + ": model.vocab[\"b\"]: 1073741824 is outside [0, ");
  EXPECT_HAS(e, "corrupt file");

  dir.write("tokenizer.json", tokenizer_json(kModel, R"([{"id": 1073741800, "content": "<s>", "special": true}])"));
  e = load_error(dir.path());
  EXPECT_HAS(e, file + ": added_tokens[0].id: 1073741800 is outside [0, ");

  dir.write("tokenizer.json", tokenizer_json(kModel, R"([{"id": 99999999999999, "content": "<s>"}])"));
  e = load_error(dir.path());
  EXPECT_HAS(e, file + ": added_tokens[0].id: 99999999999999 is outside");

  dir.write("tokenizer.json", tokenizer_json(R"({"type": "BPE", "vocab": {"a": -1}, "merges": []})"));
  e = load_error(dir.path());
  EXPECT_HAS(e, file + ": model.vocab[\"a\"]: -1 is outside");

  // Gaps of real vocabularies are fine: added tokens right after the vocabulary.
  dir.write("tokenizer.json", tokenizer_json(kModel, R"([{"id": 3, "content": "<s>", "special": true},
                                                        {"id": 900, "content": "</s>", "special": true}])"));
  const auto tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->vocab_size(), 901);
}

TEST(TokenizerHostileFiles, TypeErrorsNameTheFileAndTheKeyPath) {
  struct Case {
    std::string json;
    std::string expected;  // after "<file>: "
  };
  const std::string model_bad_id = R"({"type": "BPE", "vocab": {"a": 0, "abc": "x"}, "merges": []})";
  const std::vector<Case> cases = {
      {tokenizer_json(model_bad_id), "model.vocab[\"abc\"]: expected an integer, got a string"},
      {tokenizer_json(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [], "byte_fallback": "yes"})"),
       "model.byte_fallback: expected true or false, got a string"},
      {tokenizer_json(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": "0.1"})"),
       "model.dropout: expected a number, got a string"},
      {tokenizer_json(R"({"type": "BPE", "vocab": [], "merges": []})"), "model.vocab: expected an object, got an array"},
      {tokenizer_json(R"({"type": "BPE", "vocab": {"a": 0}, "merges": {}})"), "model.merges: expected an array"},
      {tokenizer_json(R"({"type": 3, "vocab": {"a": 0}, "merges": []})"), "model.type: expected a string, got an integer"},
      {tokenizer_json(kModel, R"([{"id": "5", "content": "<s>"}])"), "added_tokens[0].id: expected an integer, got a string"},
      {tokenizer_json(kModel, R"([{"id": 5, "content": 5}])"), "added_tokens[0].content: expected a string"},
      {tokenizer_json(kModel, R"([{"id": 5, "content": "<s>", "special": "true"}])"),
       "added_tokens[0].special: expected true or false, got a string"},
      {tokenizer_json(kModel, R"([{"content": "<s>"}])"), "added_tokens[0]: missing \"id\""},
      {tokenizer_json(kModel, "[]", R"(, "normalizer": {"type": "Strip", "strip_left": 1})"),
       "normalizer.strip_left: expected true or false, got an integer"},
      {tokenizer_json(kModel, "[]", R"(, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": 1}]})"),
       "normalizer.normalizers[0].prepend: expected a string"},
      {tokenizer_json(kModel, "[]", R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel", "use_regex": "no"}]})"),
       "pre_tokenizer.pretokenizers[0].use_regex: expected true or false, got a string"},
      {tokenizer_json(kModel, "[]", R"(, "pre_tokenizer": {"type": "Metaspace", "prepend_scheme": 1})"),
       "pre_tokenizer.prepend_scheme: expected a string"},
      {tokenizer_json(kModel, "[]", R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": 5}})"),
       "pre_tokenizer.pattern.Regex: expected a string"},
      {tokenizer_json(kModel, "[]", R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": {"type": "ByteLevel"}})"),
       "pre_tokenizer.pretokenizers: expected an array, got an object"},
      {tokenizer_json(kModel, "[]", R"(, "decoder": {"type": "Strip", "content": " ", "start": "1"})"),
       "decoder.start: expected a non-negative integer, got a string"},
      {tokenizer_json(kModel, "[]", R"(, "decoder": {"type": "Metaspace", "add_prefix_space": "true"})"),
       "decoder.add_prefix_space: expected true or false"},
      {tokenizer_json(kModel, "[]",
                      R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                          "special_tokens": {"<s>": {"ids": ["1"]}}})"),
       "post_processor.special_tokens[\"<s>\"].ids[0]: expected an integer, got a string"},
      {tokenizer_json(kModel, "[]", R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": 1}}], "special_tokens": {}})"),
       "post_processor.single[0].Sequence.id: expected a string"},
      {tokenizer_json(kModel, "[]", R"(, "decoder": {"type": ["ByteLevel"]})"), "decoder.type: expected a string, got an array"},
  };
  for (const auto& c : cases) {
    TempDir dir("types");
    dir.write("tokenizer.json", c.json);
    const std::string e = load_error(dir.path());
    EXPECT_HAS(e, (dir.path() / "tokenizer.json").string() + ": " + c.expected);
    EXPECT_EQ(e.find("type_error"), std::string::npos) << e;
  }
}

TEST(TokenizerHostileFiles, TokenizerConfigTypeErrorsNameTheFileAndTheKeyPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"add_bos_token": "yes"})", "add_bos_token: expected true or false, got a string"},
      {R"({"legacy": 0})", "legacy: expected true or false, got an integer"},
      {R"({"bos_token": {"content": "<s>", "lstrip": "no"}})", "bos_token.lstrip: expected true or false, got a string"},
      {R"({"bos_token": {"content": 1}})", "bos_token.content: expected a string, got an integer"},
      {R"({"eos_token": 12})", "eos_token: must be a string or an AddedToken object"},
      {R"({"additional_special_tokens": ["<a>", 3]})", "additional_special_tokens[1]: must be a string or an AddedToken"},
      {R"({"added_tokens_decoder": {"5": {"content": "<s>", "special": "yes"}}})",
       "added_tokens_decoder[\"5\"].special: expected true or false, got a string"},
      {R"({"added_tokens_decoder": {"x5": {"content": "<s>"}}})", "added_tokens_decoder[\"x5\"]: the key is not a token id"},
      {R"({"added_tokens_decoder": {"99999999999": {"content": "<s>"}}})",
       "added_tokens_decoder[\"99999999999\"]: the key is not a token id"},
  };
  for (const auto& [config, expected] : cases) {
    TempDir dir("config");
    dir.write("tokenizer.json", tokenizer_json(kModel));
    dir.write("tokenizer_config.json", config);
    const std::string e = load_error(dir.path());
    EXPECT_HAS(e, (dir.path() / "tokenizer_config.json").string() + ": " + expected);
    EXPECT_EQ(e.find("type_error"), std::string::npos) << e;
  }
}

TEST(TokenizerHostileFiles, LongValuesInMessagesAreCut) {
  const std::string huge(100000, 'x');
  const std::vector<std::string> files = {
      tokenizer_json(kModel, "[]", ", \"pre_tokenizer\": {\"type\": \"" + huge + "\"}"),
      tokenizer_json(kModel, "[]", ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(" + huge + "\"}}"),
      tokenizer_json(kModel, "[]", ", \"pre_tokenizer\": {\"type\": \"Metaspace\", \"prepend_scheme\": \"" + huge + "\"}"),
      tokenizer_json("{\"type\": \"BPE\", \"vocab\": {\"" + huge + "\": \"1\"}, \"merges\": []}"),
      tokenizer_json("{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a " + huge + "\"]}"),
      tokenizer_json("{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\", 1, \"" + huge + "\"]]}"),
      tokenizer_json(kModel, "[]", ", \"x\": \"" + huge),  // never closed
  };
  for (const auto& f : files) {
    TempDir dir("long");
    dir.write("tokenizer.json", f);
    const std::string e = load_error(dir.path());
    EXPECT_HAS(e, "tokenizer.json");
    EXPECT_LT(e.size(), 1000u) << e.substr(0, 2000);
  }
}

// ---- tokenizer.model ----------------------------------------------------------


std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TokenizerHostileFiles, SentencePieceLengthsBeyondTheFileAreErrors) {
  const std::string piece = "\x0a\x03\x0a\x01" "a";  // pieces { piece: "a" }, well formed
  const std::string bad_piece = "\x0a" + varint(1ull << 40) + "ab";  // piece: a string of 2^40 bytes
  const std::vector<std::pair<std::string, std::string>> cases = {
      // A top-level length that wraps the read position around (the old 17 GB case).
      {piece + "\x0a" + varint(~0ull) + "abc", "has length 18446744073709551615"},
      {piece + "\x0a" + varint(~0ull - 3) + "abc", "has length 18446744073709551612"},
      {"\x12" + varint(1ull << 62) + "abc", "has length 4611686018427387904"},
      {"\x12" + varint(1000) + "abcdefghij", "has length 1000 but its message has 10 bytes left"},
      // An absurd length inside a piece message.
      {"\x0a" + varint(bad_piece.size()) + bad_piece, "has length 1099511627776 but its message has 2 bytes left"},
      // Fixed-width fields cut short.
      {piece + "\x0d\x01", "has length 4 but its message has 1 bytes left"},
      {piece + "\x09\x01\x02", "has length 8 but its message has 2 bytes left"},
  };
  for (const auto& [bytes, expected] : cases) {
    TempDir dir("spm");
    dir.write("tokenizer.model", bytes);
    const std::string e = load_error(dir.path());
    EXPECT_HAS(e, (dir.path() / "tokenizer.model").string() + ": corrupt SentencePiece model");
    EXPECT_HAS(e, expected);
  }
}

// Found by the sentencepiece_model fuzzer: a piece starting with a NUL byte
// made libsentencepiece's trie builder throw Darts::Details::Exception
// ("zero-length key") through load_tokenizer, which no caller expects.
TEST(TokenizerHostileFiles, EmptyOrNulSentencePieceIsAnError) {
  const std::string unk("\x0a\x09\x0a\x05<unk>\x18\x02", 11);  // pieces { piece: "<unk>" type: UNKNOWN }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {unk + std::string("\x0a\x04\x0a\x00\x18\x01", 6), "piece 1 (at byte 11) is empty"},   // piece: ""
      {unk + std::string("\x0a\x02\x18\x01", 4), "piece 1 (at byte 11) is empty"},             // no piece field
      {unk + std::string("\x0a\x06\x0a\x02\x00x\x18\x01", 8), "piece 1 (at byte 11) is not text"},  // "\0x"
  };
  for (const auto& [bytes, expected] : cases) {
    TempDir dir("spm_empty");
    dir.write("tokenizer.model", bytes);
    EXPECT_HAS(load_error(dir.path()),
               (dir.path() / "tokenizer.model").string() + ": corrupt SentencePiece model: " + expected);
  }
  const fs::path found = fs::path(FPTRAIN_SOURCE_DIR) / "fuzz/corpus/sentencepiece_model/regress-nul-piece-throws-from-darts";
  TempDir dir("spm_found");
  dir.write("tokenizer.model", read_bytes(found));
  EXPECT_HAS(load_error(dir.path()), "tokenizer.model: corrupt SentencePiece model: piece 2 (at byte 30) is not text");
}

TEST(TokenizerHostileFiles, CorruptLengthInARealSentencePieceModel) {
  const std::string model = read_bytes(fs::path(FPTRAIN_FIXTURE_DIR) / "spm_llama2" / "tokenizer.model");
  ASSERT_GT(model.size(), 100u);
  ASSERT_EQ(model[0], '\x0a');  // the first field: a piece
  size_t pos = 1;
  while (static_cast<unsigned char>(model[pos]) & 0x80) ++pos;
  const std::string rest = model.substr(pos + 1);
  for (uint64_t length : std::vector<uint64_t>{~0ull, ~0ull - 1, 1ull << 34, model.size()}) {
    TempDir dir("spm_real");
    dir.write("tokenizer.model", "\x0a" + varint(length) + rest);
    const std::string e = load_error(dir.path());
    EXPECT_HAS(e, "tokenizer.model: corrupt SentencePiece model: field 1 at byte 0 has length " +
                      std::to_string(length));
  }
}

}  // namespace
