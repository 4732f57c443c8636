#include "models/nf4_checkpoint.h"

#include "common/json_input.h"
#include "common/strings.h"
#include "models/parameter_layout.h"

#include <nlohmann/json.hpp>

#include <array>
#include <stdexcept>

namespace fptrain::models {
namespace {

using nlohmann::json;

constexpr std::array<const char*, kNf4CheckpointParts> kSuffixes = {
    "", ".absmax", ".nested_absmax", ".nested_quant_map", ".quant_map", ".quant_state.bitsandbytes__nf4"};
constexpr const char* kQuantState = ".quant_state.bitsandbytes__nf4";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

[[noreturn]] void bad(const std::string& tensor, const std::string& problem) {
  throw std::runtime_error("4-bit checkpoint tensor '" + common::cut_text(tensor) + "': " + problem);
}

const at::Tensor& part(const std::string& name, const std::map<std::string, at::Tensor>& parts,
                       const std::string& suffix, at::ScalarType dtype, int64_t numel) {
  auto it = parts.find(suffix);
  if (it == parts.end()) bad(name + suffix, "missing");
  if (it->second.scalar_type() != dtype)
    bad(name + suffix, std::string("has dtype ") + c10::toString(it->second.scalar_type()) + ", expected " +
                           c10::toString(dtype));
  if (numel >= 0 && it->second.numel() != numel)
    bad(name + suffix, "holds " + std::to_string(it->second.numel()) + " values, expected " + std::to_string(numel));
  return it->second;
}

// The quant state's JSON, checked against the format and the weight's shape; returns nested_offset.
double read_quant_state(const std::string& name, const at::Tensor& bytes, const std::vector<int64_t>& shape) {
  const at::Tensor host = bytes.to(at::kCPU).contiguous();
  const std::string text(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(host.numel()));
  const std::string where = name + kQuantState;
  json s;
  try {
    s = json::parse(text);
  } catch (const json::exception& e) {
    bad(where, std::string("invalid JSON: ") + e.what());
  }
  auto expect = [&](const char* key, const json& want) {
    if (!s.is_object() || !s.contains(key) || s.at(key) != want)
      bad(where, std::string(key) + " is " + (s.is_object() && s.contains(key) ? s.at(key).dump() : "missing") +
                     ", expected " + want.dump());
  };
  expect("quant_type", "nf4");
  expect("blocksize", kNf4BlockSize);
  expect("nested_blocksize", kNf4AbsmaxBlockSize);
  expect("nested_dtype", "float32");
  expect("shape", shape);
  if (!s.contains("nested_offset") || !s.at("nested_offset").is_number())
    bad(where, "nested_offset is missing or not a number");
  return s.at("nested_offset").get<double>();
}

}  // namespace

bool is_projection_weight(const std::string& name) {
  return layer_of_name(name) >= 0 && common::ends_with(name, "_proj.weight");
}

std::map<std::string, std::vector<int64_t>> nf4_checkpoint_parts(const std::string& name,
                                                                 const std::vector<int64_t>& shape) {
  const int64_t n = numel_of(shape), blocks = ceil_div(n, kNf4BlockSize);
  return {{name, {ceil_div(n, 2), 1}},
          {name + ".absmax", {blocks}},
          {name + ".nested_absmax", {ceil_div(blocks, kNf4AbsmaxBlockSize)}},
          {name + ".nested_quant_map", {256}},
          {name + ".quant_map", {16}},
          {name + kQuantState, {-1}}};
}

std::optional<std::pair<std::string, std::string>> nf4_part_of(const std::string& name) {
  for (const char* suffix : kSuffixes) {
    const std::string s = suffix;
    if (s.empty()) {
      if (is_projection_weight(name)) return std::make_pair(name, s);
    } else if (common::ends_with(name, s) && is_projection_weight(name.substr(0, name.size() - s.size()))) {
      return std::make_pair(name.substr(0, name.size() - s.size()), s);
    }
  }
  return std::nullopt;
}

Nf4Tensor nf4_from_checkpoint(const std::string& name, const std::map<std::string, at::Tensor>& parts,
                              const std::vector<int64_t>& shape, at::ScalarType dtype) {
  const int64_t n = numel_of(shape), blocks = ceil_div(n, kNf4BlockSize);
  const double offset = read_quant_state(name, part(name, parts, kQuantState, at::kByte, -1), shape);
  const at::Tensor& levels = part(name, parts, ".quant_map", at::kFloat, 16);
  if (!at::equal(levels.to(at::kCPU), nf4_levels(at::kCPU)))
    bad(name + ".quant_map", "is not bitsandbytes' NF4 code book");
  const at::Tensor& dynamic = part(name, parts, ".nested_quant_map", at::kFloat, 256);
  if (!at::equal(dynamic.to(at::kCPU), dynamic_map_levels(at::kCPU)))
    bad(name + ".nested_quant_map", "is not bitsandbytes' signed dynamic map");
  Nf4Tensor q;
  q.shape = shape;
  q.dtype = dtype;
  q.codes = part(name, parts, "", at::kByte, ceil_div(n, 2)).reshape({-1});
  q.absmax_codes = part(name, parts, ".absmax", at::kByte, blocks).reshape({-1});
  q.absmax_scales = part(name, parts, ".nested_absmax", at::kFloat, ceil_div(blocks, kNf4AbsmaxBlockSize)).reshape({-1});
  q.absmax_offset = at::full({}, offset, q.absmax_scales.options());
  return q;
}

}  // namespace fptrain::models
