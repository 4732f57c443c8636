// Checkpoint folders: loading what transformers saved (single file and shards),
// rejecting checkpoints that do not fit their config, and saving folders that
// transformers loads back with identical weights and logits.
#include "models/checkpoint.h"
#include "models/init.h"
#include "models/safetensors.h"
#include "tests/models_io/io_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace fptrain::models {
namespace {

using nlohmann::json;
using namespace fptrain::models::testing;

ModelConfig config_of(const std::string& folder) { return load_model_config(fixture(folder + "/config.json")); }

void copy_dir(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) write_bytes(to / e.path().filename(), read_bytes(e.path()));
}

// Every loaded tensor equals transformers' own float64 dump of the weights.
void expect_equal_to_reference(const TensorMap& got, const std::string& ref_folder, at::ScalarType dtype) {
  const TensorMap ref = read_safetensors(fixture(ref_folder + "/weights_f64.safetensors"));
  ASSERT_EQ(got.size(), ref.size());
  for (const auto& [name, want] : ref) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    const at::Tensor& t = got.at(name);
    EXPECT_EQ(t.scalar_type(), dtype);
    EXPECT_TRUE(t.is_contiguous());
    // Casting the reference to `dtype` the way torch does must give the same bits.
    EXPECT_TRUE(at::equal(t, want.to(at::kFloat).to(dtype)));
  }
}

// ---- expected shapes ----------------------------------------------------------

TEST(ExpectedShapes, MatchTheTensorsTransformersSaved) {
  for (const std::string name :
       {"llama", "llama_linear", "mistral", "granite", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"}) {
    SCOPED_TRACE(name);
    const auto shapes = expected_parameter_shapes(config_of(name));
    const json checksums = read_json(fixture(name + "_ref/expected.json"))["checksums"];
    ASSERT_EQ(shapes.size(), checksums.size());
    for (const auto& [tname, c] : checksums.items()) {
      ASSERT_TRUE(shapes.count(tname)) << tname;
      EXPECT_EQ(shapes.at(tname), c["shape"].get<std::vector<int64_t>>()) << tname;
    }
    EXPECT_EQ(parameter_names_in_model_order(config_of(name)).size(), shapes.size());
  }
}

// ---- loading ------------------------------------------------------------------

class LoadFromTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(LoadFromTransformers, SingleFileEqualsTransformersWeights) {
  const std::string name = GetParam();
  expect_equal_to_reference(load_pretrained_weights(fixture(name), config_of(name), at::kFloat), name + "_ref",
                            at::kFloat);
}

TEST_P(LoadFromTransformers, ConvertsToBf16OnLoad) {
  const std::string name = GetParam();
  expect_equal_to_reference(load_pretrained_weights(fixture(name), config_of(name), at::kBFloat16), name + "_ref",
                            at::kBFloat16);
}

INSTANTIATE_TEST_SUITE_P(Models, LoadFromTransformers,
                         ::testing::Values("llama", "llama_linear", "mistral", "mistral_nowindow", "granite", "qwen2",
                                           "qwen3", "phi3", "phi4_mini", "gemma2", "gemma3"));

TEST(LoadPretrained, ShardedCheckpointsEqualTransformersWeights) {
  for (const std::string name : {"llama", "granite"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(fs::exists(fixture(name + "_sharded/model.safetensors.index.json")));
    ASSERT_FALSE(fs::exists(fixture(name + "_sharded/model.safetensors")));
    expect_equal_to_reference(load_pretrained_weights(fixture(name + "_sharded"), config_of(name), at::kFloat),
                              name + "_ref", at::kFloat);
  }
}

TEST(LoadPretrained, BothByteReadersGiveTransformersWeights) {
  for (const auto reader : {ByteReader::kPread, ByteReader::kMmap}) {
    LoadOptions options;
    options.reader = reader;
    expect_equal_to_reference(
        load_pretrained_weights(fixture("llama_sharded"), config_of("llama"), at::kFloat, at::kCPU, options),
        "llama_ref", at::kFloat);
  }
}

TEST(SafetensorsReader, CopyBytesReadsAnyRangeWithEitherReader) {
  const SafetensorsFile file(fixture("llama/model.safetensors"));
  const SafetensorsEntry& e = file.at("model.embed_tokens.weight");
  const at::Tensor whole = file.read(e.name);
  const auto* bytes = static_cast<const uint8_t*>(whole.data_ptr());
  for (const auto reader : {ByteReader::kPread, ByteReader::kMmap}) {
    std::vector<uint8_t> part(1000);
    file.copy_bytes(e, 123, part.size(), part.data(), reader);
    EXPECT_EQ(std::memcmp(part.data(), bytes + 123, part.size()), 0);
    expect_error<std::out_of_range>([&] { file.copy_bytes(e, e.num_bytes() - 10, 11, part.data(), reader); },
                                    {"model.embed_tokens.weight", "past its end"});
  }
}

TEST(LoadPretrained, Bf16CheckpointLoadsAsFloat32AndBf16) {
  const ModelConfig c = config_of("mistral_bf16");
  EXPECT_EQ(c.dtype, "bfloat16");
  expect_equal_to_reference(load_pretrained_weights(fixture("mistral_bf16"), c, at::kFloat), "mistral_bf16_ref",
                            at::kFloat);
  expect_equal_to_reference(load_pretrained_weights(fixture("mistral_bf16"), c, at::kBFloat16), "mistral_bf16_ref",
                            at::kBFloat16);
}

TEST(LoadPretrained, TiedCheckpointHasNoLmHeadAndIgnoresAStoredOne) {
  const ModelConfig c = config_of("granite");
  ASSERT_TRUE(c.tie_word_embeddings);
  ScratchDir dir("tied");
  TensorMap tensors = read_safetensors(fixture("granite/model.safetensors"));
  EXPECT_FALSE(tensors.count("lm_head.weight"));
  tensors["lm_head.weight"] = tensors.at("model.embed_tokens.weight").clone();
  // transformers drops rotary buffers too when loading older checkpoints.
  tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = at::ones({c.head_dim / 2});
  write_safetensors(dir / "model.safetensors", tensors);
  const TensorMap loaded = load_pretrained_weights(dir.path(), c, at::kFloat);
  EXPECT_FALSE(loaded.count("lm_head.weight"));
  EXPECT_FALSE(loaded.count("model.layers.0.self_attn.rotary_emb.inv_freq"));
  expect_equal_to_reference(loaded, "granite_ref", at::kFloat);
}

// ---- checkpoints that do not fit their config ----------------------------------

class BadCheckpoint : public ::testing::Test {
 protected:
  // Writes `tensors` as dir/model.safetensors and expects loading with the
  // llama config to fail with all `needles` in the message.
  void expect_rejected(const TensorMap& tensors, std::initializer_list<std::string> needles) {
    write_safetensors(dir / "model.safetensors", tensors);
    expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); }, needles);
  }
  ScratchDir dir{"bad"};
  ModelConfig config = config_of("llama");
  TensorMap tensors = read_safetensors(fixture("llama/model.safetensors"));
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
};

TEST_F(BadCheckpoint, ShapeNotMatchingTheConfig) {
  tensors[q] = at::zeros({config.num_attention_heads * config.head_dim + 8, config.hidden_size});
  expect_rejected(tensors, {dir.path().string(), "'" + q + "'", "model.safetensors", "shape [40, 32]",
                            "the config implies [32, 32]", "hidden_size=32"});
}

TEST_F(BadCheckpoint, MissingTensor) {
  tensors.erase(q);
  tensors.erase("model.norm.weight");
  expect_rejected(tensors, {"missing tensors: ", q, "model.norm.weight"});
}

TEST_F(BadCheckpoint, UnexpectedTensor) {
  tensors["model.layers.0.mlp.extra_proj.weight"] = at::zeros({4});
  expect_rejected(tensors, {"unexpected tensors: model.layers.0.mlp.extra_proj.weight"});
}

TEST_F(BadCheckpoint, UntiedConfigWithoutLmHead) {
  tensors.erase("lm_head.weight");
  expect_rejected(tensors, {"missing tensors: lm_head.weight", "tie_word_embeddings=false"});
}

TEST_F(BadCheckpoint, IntegerParameter) {
  tensors[q] = at::zeros(tensors.at(q).sizes(), at::kInt);
  expect_rejected(tensors, {"'" + q + "'", "I32", "not a floating-point type"});
}

TEST_F(BadCheckpoint, NoWeightsAtAll) {
  expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); },
               {dir.path().string(), "no model.safetensors or model.safetensors.index.json"});
}

TEST_F(BadCheckpoint, PickledWeightsAreNamedAsUnsupported) {
  write_bytes(dir / "pytorch_model.bin", "not read");
  expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); },
               {"no model.safetensors", "pytorch_model.bin", "convert them to safetensors"});
}

TEST_F(BadCheckpoint, CorruptFileIsNamed) {
  std::string bytes = read_bytes(fixture("llama/model.safetensors"));
  write_bytes(dir / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); },
               {(dir / "model.safetensors").string(), "truncated"});
}

class BadShards : public ::testing::Test {
 protected:
  void SetUp() override {
    copy_dir(fixture("llama_sharded"), dir.path());
    index = read_json(dir / "model.safetensors.index.json");
  }
  ScratchDir dir{"shards"};
  json index;
  ModelConfig config = config_of("llama");
};

TEST_F(BadShards, ShardReferencedByTheIndexIsMissing) {
  const std::string shard = index["weight_map"]["model.norm.weight"];
  fs::remove(dir / shard);
  expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); },
               {"model.safetensors.index.json", "shard '" + shard + "' is missing"});
}

TEST_F(BadShards, IndexPointsAtTheWrongShard) {
  const std::string right = index["weight_map"]["model.norm.weight"];
  const std::string wrong = index["weight_map"]["model.embed_tokens.weight"];
  ASSERT_NE(right, wrong);
  index["weight_map"]["model.norm.weight"] = wrong;
  write_json(dir / "model.safetensors.index.json", index);
  expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); },
               {"'model.norm.weight'", "shard '" + wrong + "'", "does not contain it"});
}

TEST_F(BadShards, IndexWithoutWeightMap) {
  index.erase("weight_map");
  write_json(dir / "model.safetensors.index.json", index);
  expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); }, {"'weight_map'"});
}

TEST_F(BadShards, TensorMissingFromAllShards) {
  // Drop one tensor from its shard and from the index: the config check reports it.
  const std::string name = "model.layers.1.mlp.up_proj.weight";
  const std::string shard = index["weight_map"][name];
  TensorMap t = read_safetensors(dir / shard);
  t.erase(name);
  write_safetensors(dir / shard, t);
  index["weight_map"].erase(name);
  write_json(dir / "model.safetensors.index.json", index);
  expect_error([&] { load_pretrained_weights(dir.path(), config, at::kFloat); }, {"missing tensors: " + name});
}

// ---- saving -------------------------------------------------------------------

// Runs check_saved.py; the test fails if transformers disagrees.
void expect_transformers_agrees(const fs::path& candidate, const std::string& reference, const std::string& extra) {
  const std::string args = "--candidate " + quoted(candidate) +
                           (reference.empty() ? "" : " --reference " + quoted(fixture(reference))) + " " + extra;
  EXPECT_EQ(run_python("check_saved.py", args), 0) << "check_saved.py " << args;
}

TEST(SavePretrained, UntiedModelLoadsInTransformersWithIdenticalLogits) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("llama");
  const TensorMap params = load_pretrained_weights(fixture("llama"), c, at::kFloat);
  save_pretrained(dir / "out", c, params, at::kFloat);
  expect_transformers_agrees(dir / "out", "llama", "");
  // And fptrain reads back exactly what it wrote.
  expect_equal_to_reference(load_pretrained_weights(dir / "out", load_model_config(dir / "out/config.json"),
                                                    at::kFloat),
                            "llama_ref", at::kFloat);
}

TEST(SavePretrained, TiedModelLoadsInTransformersWithIdenticalLogits) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("granite");
  const TensorMap params = load_pretrained_weights(fixture("granite"), c, at::kFloat);
  save_pretrained(dir / "out", c, params, at::kFloat);
  EXPECT_FALSE(SafetensorsFile(dir / "out/model.safetensors").find("lm_head.weight"));
  expect_transformers_agrees(dir / "out", "granite", "--expect-tied");
}

TEST(SavePretrained, QwenPhi3AndGemma2ModelsLoadInTransformersWithIdenticalLogits) {
  // qwen2 and gemma2 tied; phi3 fused weights and LongRoPE; gemma2 soft-caps and sandwich norms
  for (const std::string name : {"qwen2", "qwen3", "phi3", "phi4_mini", "gemma2", "gemma3"}) {
    SCOPED_TRACE(name);
    ScratchDir dir("save");
    const ModelConfig c = config_of(name);
    const TensorMap params = load_pretrained_weights(fixture(name), c, at::kFloat);
    save_pretrained(dir / "out", c, params, at::kFloat);
    expect_transformers_agrees(dir / "out", name, c.tie_word_embeddings ? "--expect-tied" : "");
  }
}

TEST(SavePretrained, ShardedSaveLoadsInTransformersWithIdenticalLogits) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("mistral");
  const TensorMap params = load_pretrained_weights(fixture("mistral"), c, at::kFloat);
  save_pretrained(dir / "out", c, params, at::kFloat, /*max_shard_bytes=*/30'000);
  const json index = read_json(dir / "out/model.safetensors.index.json");
  std::set<std::string> shards;
  int64_t bytes = 0;
  for (const auto& [name, file] : index["weight_map"].items()) {
    shards.insert(file.get<std::string>());
    bytes += SafetensorsFile(dir / "out" / file.get<std::string>()).at(name).num_bytes();
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), bytes);
  for (const auto& s : shards) EXPECT_LE(fs::file_size(dir / "out" / s), 30'000u + 4096u) << s;
  ASSERT_GT(shards.size(), 2u);
  EXPECT_TRUE(shards.count("model-00001-of-0000" + std::to_string(shards.size()) + ".safetensors"));
  expect_transformers_agrees(dir / "out", "mistral", "--expect-shards " + std::to_string(shards.size()));
}

TEST(SavePretrained, Bf16SaveMatchesTransformersCastingInBf16) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("llama");
  const TensorMap params = load_pretrained_weights(fixture("llama"), c, at::kFloat);
  save_pretrained(dir / "out", c, params, at::kBFloat16);
  EXPECT_EQ(read_json(dir / "out/config.json")["dtype"], "bfloat16");
  EXPECT_EQ(SafetensorsFile(dir / "out/model.safetensors").entries().front().dtype, at::kBFloat16);
  expect_transformers_agrees(dir / "out", "llama", "--dtype bfloat16");
}

TEST(SavePretrained, V4ConfigStaysV4AndLoadsInTransformers) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("llama_v4");
  const TensorMap params = load_pretrained_weights(fixture("llama"), c, at::kFloat);
  save_pretrained(dir / "out", c, params, at::kFloat);
  const json written = read_json(dir / "out/config.json");
  EXPECT_TRUE(written.contains("rope_scaling"));
  EXPECT_FALSE(written.contains("rope_parameters"));
  expect_transformers_agrees(dir / "out", "llama", "");
}

TEST(SavePretrained, ReplacesTheFolderWholeAndLeavesNoTemporaries) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("mistral");
  const TensorMap params = load_pretrained_weights(fixture("mistral"), c, at::kFloat);
  save_pretrained(dir / "out", c, params, at::kFloat, 30'000);  // sharded first
  write_bytes(dir / "out/stale.txt", "old");
  save_pretrained(dir / "out", c, params, at::kFloat);  // then a single file
  std::vector<std::string> in_out, in_parent;
  for (const auto& e : fs::directory_iterator(dir / "out")) in_out.push_back(e.path().filename());
  for (const auto& e : fs::directory_iterator(dir.path())) in_parent.push_back(e.path().filename());
  std::sort(in_out.begin(), in_out.end());
  EXPECT_EQ(in_out, (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(in_parent, (std::vector<std::string>{"out"}));
}

TEST(SavePretrained, TrailingSlashAndLeftoversOfKilledSaves) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("mistral");
  const TensorMap params = load_pretrained_weights(fixture("mistral"), c, at::kFloat);
  fs::create_directories(dir / ".out.tmp.999999");  // as a save killed midway leaves it
  write_bytes(dir / ".out.tmp.999999/model.safetensors", "partial");
  save_pretrained((dir / "out").string() + "/", c, params, at::kFloat);
  std::vector<std::string> in_parent;
  for (const auto& e : fs::directory_iterator(dir.path())) in_parent.push_back(e.path().filename());
  EXPECT_EQ(in_parent, (std::vector<std::string>{"out"}));
  expect_equal_to_reference(load_pretrained_weights(dir / "out", c, at::kFloat), "mistral_ref", at::kFloat);
}

TEST(SavePretrained, FailedSaveLeavesThePreviousCheckpointIntact) {
  ScratchDir dir("save");
  const ModelConfig c = config_of("mistral");
  TensorMap params = load_pretrained_weights(fixture("mistral"), c, at::kFloat);
  save_pretrained(dir / "out", c, params, at::kFloat);
  const std::string before = read_bytes(dir / "out/model.safetensors");
  params.erase("model.norm.weight");
  params["model.extra"] = at::zeros({2});
  expect_error([&] { save_pretrained(dir / "out", c, params, at::kFloat); },
               {"cannot save", "missing tensors: model.norm.weight", "unexpected tensors: model.extra"});
  params = load_pretrained_weights(fixture("mistral"), c, at::kFloat);
  params["lm_head.weight"] = at::zeros({3, 3});
  expect_error([&] { save_pretrained(dir / "out", c, params, at::kFloat); }, {"'lm_head.weight' has shape [3, 3]"});
  EXPECT_EQ(read_bytes(dir / "out/model.safetensors"), before);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.path().filename() == "out" ? 1 : 100;
  EXPECT_EQ(entries, 1u) << "a temporary folder was left behind";
}

// ---- initialisation -----------------------------------------------------------

TEST(InitParameters, LikeTransformersAndDeterministic) {
  const ModelConfig c = config_of("granite");  // pad_token_id 3, tied
  ASSERT_TRUE(c.pad_token_id.has_value());
  const TensorMap a = init_parameters(c, 42, at::kFloat);
  const TensorMap b = init_parameters(c, 42, at::kFloat);
  const TensorMap other = init_parameters(c, 43, at::kFloat);
  const auto shapes = expected_parameter_shapes(c);
  ASSERT_EQ(a.size(), shapes.size());
  const double std = read_json(fixture("granite_ref/expected.json"))["v5"]["initializer_range"].get<double>();
  for (const auto& [name, t] : a) {
    SCOPED_TRACE(name);
    EXPECT_EQ(t.sizes().vec(), shapes.at(name));
    EXPECT_TRUE(at::equal(t, b.at(name)));
    if (name.find("norm") != std::string::npos) {
      EXPECT_TRUE(at::equal(t, at::ones_like(t)));
    } else {
      EXPECT_FALSE(at::equal(t, other.at(name)));
      at::Tensor values = t;
      if (name == "model.embed_tokens.weight") {
        EXPECT_TRUE(at::equal(t[*c.pad_token_id], at::zeros_like(t[0])));
        values = at::cat({t.narrow(0, 0, *c.pad_token_id), t.narrow(0, *c.pad_token_id + 1, t.size(0) - *c.pad_token_id - 1)});
      }
      // Sample std of >= 1000 normal draws is within 10% of the target with overwhelming probability.
      EXPECT_NEAR(values.std().item<double>(), std, 0.1 * std);
      EXPECT_NEAR(values.mean().item<double>(), 0.0, 0.1 * std);
    }
  }
  const TensorMap half = init_parameters(c, 42, at::kBFloat16);
  for (const auto& [name, t] : half) EXPECT_TRUE(at::equal(t, a.at(name).to(at::kBFloat16))) << name;
}

TEST(InitParameters, BiasesAreZeroAndTheSavedModelLoadsInTransformers) {
  const ModelConfig c = config_of("llama");  // attention biases, untied
  const TensorMap params = init_parameters(c, 1, at::kFloat);
  int biases = 0;
  for (const auto& [name, t] : params)
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      ++biases;
      EXPECT_TRUE(at::equal(t, at::zeros_like(t))) << name;
    }
  EXPECT_EQ(biases, 4 * c.num_hidden_layers);
  ScratchDir dir("init");
  save_pretrained(dir / "out", c, params, at::kFloat);
  expect_transformers_agrees(dir / "out", "", "");
}

}  // namespace
}  // namespace fptrain::models
