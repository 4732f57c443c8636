// The safetensors reader against files the Python safetensors library wrote,
// the writer by round trip, and every kind of corrupt file by its message.
#include "models/safetensors.h"
#include "tests/models_io/io_test_util.h"

#include <gtest/gtest.h>

#include <cstring>

namespace fptrain::models {
namespace {

using nlohmann::json;
using namespace fptrain::models::testing;

// Float64 sums over a tensor, the same three make_fixtures.py computes.
struct Sums {
  double sum, abs_sum, weighted_sum;
};
Sums sums_of(const at::Tensor& t) {
  const at::Tensor flat = t.to(at::kDouble).flatten();
  const int64_t n = flat.numel();
  const at::Tensor w = at::arange(1, n + 1, at::kDouble) / static_cast<double>(n);
  return {flat.sum().item<double>(), flat.abs().sum().item<double>(), (flat * w).sum().item<double>()};
}

void expect_close(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want))) << what;
}

class ReaderOnPythonFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(ReaderOnPythonFiles, EveryTensorMatchesPythonChecksums) {
  const std::string name = GetParam();
  const json checksums = read_json(fixture(name + "_ref/expected.json"))["checksums"];
  const TensorMap tensors = read_safetensors(fixture(name + "_ref/weights_f64.safetensors"));
  ASSERT_EQ(tensors.size(), checksums.size());
  for (const auto& [tname, want] : checksums.items()) {
    SCOPED_TRACE(tname);
    ASSERT_TRUE(tensors.count(tname));
    const at::Tensor& t = tensors.at(tname);
    EXPECT_EQ(t.scalar_type(), at::kDouble);
    EXPECT_EQ(t.sizes().vec(), want["shape"].get<std::vector<int64_t>>());
    const Sums s = sums_of(t);
    expect_close(s.sum, want["sum"].get<double>(), "sum");
    expect_close(s.abs_sum, want["abs_sum"].get<double>(), "abs_sum");
    expect_close(s.weighted_sum, want["weighted_sum"].get<double>(), "weighted_sum");
  }
}

TEST_P(ReaderOnPythonFiles, TransformersFileHoldsTheSameValuesInFloat32) {
  const std::string name = GetParam();
  const TensorMap ref = read_safetensors(fixture(name + "_ref/weights_f64.safetensors"));
  const SafetensorsFile file(fixture(name + "/model.safetensors"));
  EXPECT_EQ(file.entries().size(), ref.size());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const auto& e : file.entries()) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(e.dtype_name, "F32");
    const at::Tensor viewed = file.view(e);
    const at::Tensor owned = file.read(e.name);
    EXPECT_TRUE(at::equal(viewed, owned));
    EXPECT_TRUE(at::equal(owned.to(at::kDouble), ref.at(e.name)));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ReaderOnPythonFiles, ::testing::Values("llama", "mistral", "granite"));

TEST(SafetensorsReader, ViewKeepsTheMappingAliveAfterTheFileObjectIsGone) {
  at::Tensor view, copy;
  {
    SafetensorsFile file(fixture("llama/model.safetensors"));
    view = file.view(file.at("model.embed_tokens.weight"));
    copy = file.read("model.embed_tokens.weight");
  }
  EXPECT_TRUE(at::equal(view, copy));
}

TEST(SafetensorsReader, Bf16FileMatchesPython) {
  const TensorMap ref = read_safetensors(fixture("mistral_bf16_ref/weights_f64.safetensors"));
  const TensorMap got = read_safetensors(fixture("mistral_bf16/model.safetensors"));
  ASSERT_EQ(got.size(), ref.size());
  for (const auto& [name, t] : got) {
    EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(at::equal(t.to(at::kDouble), ref.at(name))) << name;
  }
}

// ---- writer -------------------------------------------------------------------

TEST(SafetensorsWriter, RoundTripsDtypesShapesAndMetadata) {
  ScratchDir dir("w");
  at::manual_seed(7);
  TensorMap tensors;
  tensors["a.f32"] = at::randn({3, 5});
  tensors["b.bf16"] = at::randn({4, 2}).to(at::kBFloat16);
  tensors["c.f16"] = at::randn({7}).to(at::kHalf);
  tensors["d.i64"] = at::arange(10, at::kLong).reshape({2, 5});
  tensors["e.bool"] = at::rand({3}) > 0.5;
  tensors["f.empty"] = at::empty({0, 4});
  tensors["g.scalar"] = at::tensor(3.5);
  tensors["h.transposed"] = at::randn({3, 4}).t();  // non-contiguous input
  const auto path = dir / "t.safetensors";
  write_safetensors(path, tensors, {{"note", "hello"}});

  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "hello");
  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u) << "data section must start 8-byte aligned";
  const TensorMap back = read_safetensors(path);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_EQ(back.at(name).scalar_type(), t.scalar_type());
    EXPECT_EQ(back.at(name).sizes(), t.sizes());
    EXPECT_TRUE(at::equal(back.at(name), t));
  }
  // No temporary file is left behind next to the result.
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename(), "t.safetensors");
}

TEST(SafetensorsWriter, UnwritableTargetNamesTheFile) {
  ScratchDir dir("w");
  const auto path = dir / "missing_folder" / "t.safetensors";
  expect_error([&] { write_safetensors(path, {{"x", at::ones({2})}}); }, {"t.safetensors", "cannot create"});
}

// ---- corrupt files ------------------------------------------------------------

// A safetensors file split into header JSON and data section, to corrupt either.
struct RawFile {
  json header;
  std::string data;

  static RawFile load(const fs::path& path) {
    const std::string bytes = read_bytes(path);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    return {json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
  }
  std::string bytes() const {
    const std::string text = header.dump();
    std::string out(8, '\0');
    const uint64_t n = text.size();
    std::memcpy(out.data(), &n, 8);
    return out + text + data;
  }
  // The tensor whose data ends last in the file.
  std::string last_tensor() const {
    std::string best;
    uint64_t end = 0;
    for (const auto& [name, v] : header.items())
      if (name != "__metadata__" && v["data_offsets"][1].get<uint64_t>() >= end) {
        end = v["data_offsets"][1].get<uint64_t>();
        best = name;
      }
    return best;
  }
};

class CorruptSafetensors : public ::testing::Test {
 protected:
  void SetUp() override { raw = RawFile::load(fixture("llama/model.safetensors")); }

  // Writes `bytes` and expects opening to fail naming the file and `needles`.
  void expect_rejected(const std::string& bytes, std::initializer_list<std::string> needles) {
    const auto path = dir / "bad.safetensors";
    write_bytes(path, bytes);
    expect_error([&] { SafetensorsFile f(path); }, {path.string()});
    expect_error([&] { SafetensorsFile f(path); }, needles);
    expect_error([&] { read_safetensors(path); }, needles);
  }

  ScratchDir dir{"bad"};
  RawFile raw;
  const std::string k = "model.layers.0.self_attn.k_proj.weight";
  const std::string v = "model.layers.0.self_attn.v_proj.weight";
};

TEST_F(CorruptSafetensors, TruncatedDataNamesTheTensorThatRunsPastTheEnd) {
  const std::string bytes = raw.bytes();
  expect_rejected(bytes.substr(0, bytes.size() - 10), {"'" + raw.last_tensor() + "'", "truncated"});
}

TEST_F(CorruptSafetensors, FileShorterThanTheLengthField) {
  expect_rejected(raw.bytes().substr(0, 5), {"5 bytes", "8-byte header length"});
  expect_rejected("", {"0 bytes"});
}

TEST_F(CorruptSafetensors, HeaderLengthPastTheEndOfTheFile) {
  std::string bytes = raw.bytes();
  const uint64_t huge = bytes.size();  // one past what is left after the length field
  std::memcpy(bytes.data(), &huge, 8);
  expect_rejected(bytes, {"header length " + std::to_string(huge), "runs past the end of the file"});
  const uint64_t absurd = ~0ull;
  std::memcpy(bytes.data(), &absurd, 8);
  expect_rejected(bytes, {"runs past the end of the file"});
}

TEST_F(CorruptSafetensors, HeaderIsNotJson) {
  std::string bytes = raw.bytes();
  bytes[8] = 'X';
  expect_rejected(bytes, {"header: invalid JSON"});
}

TEST_F(CorruptSafetensors, OverlappingOffsetsNameBothTensors) {
  ASSERT_EQ(raw.header[k]["shape"], raw.header[v]["shape"]);
  raw.header[v]["data_offsets"] = raw.header[k]["data_offsets"];
  expect_rejected(raw.bytes(), {"'" + k + "'", "'" + v + "'", "overlapping data_offsets"});
  // Partial overlap too.
  raw = RawFile::load(fixture("llama/model.safetensors"));
  const uint64_t kb = raw.header[k]["data_offsets"][0], ke = raw.header[k]["data_offsets"][1];
  const uint64_t shift = (ke - kb) / 2;
  raw.header[v]["data_offsets"] = {kb + shift, ke + shift};
  expect_rejected(raw.bytes(), {"'" + k + "'", "'" + v + "'", "overlapping"});
}

TEST_F(CorruptSafetensors, DtypeNotMatchingTheData) {
  raw.header[k]["dtype"] = "F16";
  const uint64_t numel = raw.header[k]["shape"][0].get<uint64_t>() * raw.header[k]["shape"][1].get<uint64_t>();
  expect_rejected(raw.bytes(), {"'" + k + "'", "F16", "needs " + std::to_string(numel * 2) + " bytes",
                                "span " + std::to_string(numel * 4), "dtype or shape does not match"});
}

TEST_F(CorruptSafetensors, UnknownDtype) {
  raw.header[k]["dtype"] = "Q4_K";
  expect_rejected(raw.bytes(), {"'" + k + "'", "unknown dtype 'Q4_K'"});
}

TEST_F(CorruptSafetensors, ShapeNotMatchingTheData) {
  raw.header[k]["shape"][0] = raw.header[k]["shape"][0].get<int64_t>() + 1;
  expect_rejected(raw.bytes(), {"'" + k + "'", "shape [", "dtype or shape does not match"});
  raw = RawFile::load(fixture("llama/model.safetensors"));
  raw.header[k]["shape"][0] = -4;
  expect_rejected(raw.bytes(), {"'" + k + "'", "negative"});
}

TEST_F(CorruptSafetensors, MalformedEntries) {
  raw.header[k].erase("data_offsets");
  expect_rejected(raw.bytes(), {"'" + k + "'", "data_offsets"});
  raw = RawFile::load(fixture("llama/model.safetensors"));
  const auto offs = raw.header[k]["data_offsets"];
  raw.header[k]["data_offsets"] = {offs[1], offs[0]};
  expect_rejected(raw.bytes(), {"'" + k + "'", "end before they begin"});
  raw = RawFile::load(fixture("llama/model.safetensors"));
  raw.header = json::array({1, 2});
  expect_rejected(raw.bytes(), {"not a JSON object"});
  raw = RawFile::load(fixture("llama/model.safetensors"));
  raw.header["__metadata__"] = {{"format", 3}};
  expect_rejected(raw.bytes(), {"__metadata__", "'format'"});
}

TEST(SafetensorsReader, MissingFileNamesIt) {
  expect_error([] { SafetensorsFile f(fixture("no/such.safetensors")); }, {"no/such.safetensors", "cannot open"});
}

}  // namespace
}  // namespace fptrain::models
