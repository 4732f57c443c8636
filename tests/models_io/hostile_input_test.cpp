// Hostile model files: config.json, a safetensors header and
// model.safetensors.index.json nested far deeper than any real file (a stack
// overflow once), huge values quoted in messages, absurd integers, and
// safetensors shapes whose size overflows 64 bits (once "needs 0 bytes") or
// holds 2^64-1 (once printed as -1). Each gives a clear error naming the file.
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/safetensors.h"
#include "tests/models_io/io_test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace fptrain::models {
namespace {

using nlohmann::json;
using namespace fptrain::models::testing;

std::string deep(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_HAS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text).substr(0, 2000)

// The fixture's config.json with `key` set to the raw JSON text `value`.
std::string config_with(const std::string& key, const std::string& value) {
  std::string text = read_json(fixture("llama/config.json")).dump();
  return text.substr(0, text.size() - 1) + ", \"" + key + "\": " + value + "}";
}

TEST(HostileModelFiles, DeeplyNestedConfigJson) {
  ScratchDir dir("deep_config");
  write_bytes(dir / "config.json", config_with("x", deep(100000)));
  const std::string e = error_of([&] { load_model_config(dir / "config.json"); });
  EXPECT_HAS(e, (dir / "config.json").string() + ": invalid JSON: nested deeper than");
  write_bytes(dir / "config.json", config_with("x", deep(40)));
  EXPECT_NO_THROW(load_model_config(dir / "config.json"));
}

TEST(HostileModelFiles, ConfigValuesInMessagesAreCut) {
  ScratchDir dir("long_config");
  const std::string huge = "\"" + std::string(100000, '7') + "\"";
  for (const std::string& key : {"vocab_size", "hidden_act", "rope_scaling", "dtype", "architectures"}) {
    write_bytes(dir / "config.json", config_with(key, key == "rope_scaling" ? "{\"rope_type\": " + huge + "}" : huge));
    const std::string e = error_of([&] { load_model_config(dir / "config.json"); });
    EXPECT_HAS(e, (dir / "config.json").string());
    EXPECT_HAS(e, key);
    EXPECT_HAS(e, "7777777");
    EXPECT_LT(e.size(), 600u) << key;
  }
  // A nested value is printed cut too (not recursively in full).
  write_bytes(dir / "config.json", config_with("vocab_size", "[\"" + std::string(50000, '1') + "\", [[[[1]]]]]"));
  const std::string e = error_of([&] { load_model_config(dir / "config.json"); });
  EXPECT_HAS(e, "'vocab_size'");
  EXPECT_LT(e.size(), 600u);
}

TEST(HostileModelFiles, IntegersOutOfRangeAreErrors) {
  ScratchDir dir("range_config");
  for (const std::string& value : {"1e300", "-1e300", "18446744073709551615", "9.3e18"}) {
    write_bytes(dir / "config.json", config_with("num_hidden_layers", value));
    const std::string e = error_of([&] { load_model_config(dir / "config.json"); });
    EXPECT_HAS(e, "'num_hidden_layers'");
    EXPECT_HAS(e, "out of range");
  }
  write_bytes(dir / "config.json", config_with("eos_token_id", "[2, 18446744073709551615]"));
  EXPECT_HAS(error_of([&] { load_model_config(dir / "config.json"); }), "'eos_token_id'");
}

// Found through the config_json harness: sizes no model has made the checkpoint
// loader's shape arithmetic overflow (heads x head_dim) or loop for minutes
// building names for 10^8 layers.
TEST(HostileModelFiles, ImplausibleSizesAreErrors) {
  ScratchDir dir("sizes");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"num_hidden_layers", "100000000"}, {"num_attention_heads", "1099511627776"}, {"head_dim", "1099511627776"},
      {"hidden_size", "1099511627776"},   {"vocab_size", "4294967296"},            {"intermediate_size", "2e12"},
      {"num_key_value_heads", "1099511627776"}};
  for (const auto& [key, value] : cases) {
    write_bytes(dir / "config.json", config_with(key, value));
    const std::string e = error_of([&] { load_model_config(dir / "config.json"); });
    EXPECT_HAS(e, "'" + key + "'");
    EXPECT_HAS(e, "larger than any model fptrain can load");
  }
}

// A safetensors file from raw header text and data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(HostileModelFiles, DeeplyNestedSafetensorsHeader) {
  ScratchDir dir("deep_header");
  const fs::path path = dir / "x.safetensors";
  write_bytes(path, safetensors_bytes("{\"__metadata__\": " + deep(100000) + "}"));
  const std::string e = error_of([&] { SafetensorsFile f(path); });
  EXPECT_HAS(e, path.string() + ": header: invalid JSON: nested deeper than");
}

TEST(HostileModelFiles, SafetensorsShapesThatOverflow) {
  ScratchDir dir("overflow");
  const fs::path path = dir / "x.safetensors";
  struct Case {
    std::string shape;
    std::string dtype;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      // 2^31 * 2^31 elements of 4 bytes: 2^64 bytes (the byte count once wrapped to "needs 0 bytes").
      {"[2147483648, 2147483648]", "F32",
       {"shape [2147483648, 2147483648] of F32: the byte size overflows 64 bits"}},
      {"[4611686018427387904, 2]", "F64", {"shape [4611686018427387904, 2] of F64: the byte size overflows 64 bits"}},
      // 2^65 elements.
      {"[4294967296, 4294967296, 2]", "U8", {"the element count overflows 64 bits"}},
      // 2^64-1 is printed as written, not as -1.
      {"[18446744073709551615, 0]", "F32", {"shape [18446744073709551615, 0] has a dimension above 2^63-1"}},
      {"[9223372036854775808]", "U8", {"[9223372036854775808]", "above 2^63-1"}},
  };
  for (const auto& c : cases) {
    write_bytes(path, safetensors_bytes("{\"w\": {\"dtype\": \"" + c.dtype + "\", \"shape\": " + c.shape +
                                        ", \"data_offsets\": [0, 0]}}"));
    const std::string e = error_of([&] { SafetensorsFile f(path); });
    EXPECT_HAS(e, path.string() + ": tensor 'w': ");
    for (const auto& n : c.needles) EXPECT_HAS(e, n);
    EXPECT_EQ(e.find("[-1"), std::string::npos) << e;
    EXPECT_EQ(e.find(", -1"), std::string::npos) << e;
    EXPECT_EQ(e.find("needs 0 bytes"), std::string::npos) << e;
  }
  // An empty tensor with a large (valid) dimension is fine.
  write_bytes(path, safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [4294967296, 0], "data_offsets": [0, 0]}})"));
  SafetensorsFile f(path);
  EXPECT_EQ(f.at("w").shape, (std::vector<int64_t>{4294967296, 0}));
}

TEST(HostileModelFiles, SafetensorsNamesInMessagesAreCut) {
  ScratchDir dir("long_names");
  const fs::path path = dir / "x.safetensors";
  const std::string huge(100000, 'n');
  for (const std::string& header :
       {"{\"" + huge + "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 8]}}",
        "{\"w\": {\"dtype\": \"" + huge + "\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [\"" + huge + "\"], \"data_offsets\": [0, 4]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": \"" + huge + "\"}}",
        "{\"__metadata__\": {\"" + huge + "\": 1}}", "{\"w\": \"" + huge}) {
    write_bytes(path, safetensors_bytes(header, std::string(8, '\0')));
    const std::string e = error_of([&] { SafetensorsFile f(path); });
    EXPECT_HAS(e, path.string());
    EXPECT_LT(e.size(), 800u) << e.substr(0, 1000);
  }
}

TEST(HostileModelFiles, DeeplyNestedOrLongShardIndex) {
  ScratchDir dir("index");
  const ModelConfig config = load_model_config(fixture("llama/config.json"));
  const fs::path index = dir / "model.safetensors.index.json";
  write_bytes(index, "{\"weight_map\": " + deep(100000) + "}");
  std::string e = error_of([&] { load_pretrained_weights(dir.path(), config, at::kFloat); });
  EXPECT_HAS(e, index.string() + ": invalid JSON: nested deeper than");

  const std::string huge(100000, 's');
  for (const std::string& map : {"{\"" + huge + "\": 3}", "{\"w\": \"" + huge + "\"}", "{\"w\": \"../" + huge + "\"}",
                                 "{\"w\": [" + deep(100) + "]}"}) {
    write_bytes(index, "{\"weight_map\": " + map + "}");
    e = error_of([&] { load_pretrained_weights(dir.path(), config, at::kFloat); });
    EXPECT_HAS(e, index.string() + ": ");
    EXPECT_LT(e.size(), 800u) << e.substr(0, 1000);
  }
}

}  // namespace
}  // namespace fptrain::models
