#include "trainer/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace fptrain::trainer {
namespace {

// Where a value came from, for error messages: "demo.yaml:12: optimizer.lr".
struct Where {
  std::string source;
  std::string path;
  int line = -1;  // 1-based; -1 when unknown (--set)

  std::string str() const {
    std::string s = source;
    if (line >= 0) s += ":" + std::to_string(line);
    return s + ": " + path;
  }
};

[[noreturn]] void fail(const Where& w, const std::string& problem) {
  throw std::invalid_argument(w.str() + ": " + problem);
}

std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

double as_double(const YAML::Node& node, const Where& w) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    try {
      size_t used = 0;
      double v = std::stod(s, &used);
      if (used == s.size() && std::isfinite(v)) return v;
    } catch (const std::exception&) {
    }
  }
  fail(w, "expected a number, got " + scalar_text(node));
}

int64_t as_int(const YAML::Node& node, const Where& w) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    try {
      size_t used = 0;
      long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
      // Accept integral floats such as 1e3.
      double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
        return static_cast<int64_t>(d);
    } catch (const std::exception&) {
    }
  }
  fail(w, "expected an integer, got " + scalar_text(node));
}

bool as_bool(const YAML::Node& node, const Where& w) {
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  fail(w, "expected true or false, got " + scalar_text(node));
}

std::string as_string(const YAML::Node& node, const Where& w) {
  if (node.IsScalar() && !node.Scalar().empty()) return node.Scalar();
  fail(w, "expected a non-empty string, got " + scalar_text(node));
}

std::string as_choice(const YAML::Node& node, const Where& w, const std::vector<std::string>& choices) {
  std::string s = as_string(node, w);
  if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : " | ") + c;
  fail(w, "'" + s + "' is not one of " + list);
}

double in_range(double v, const Where& w, double lo, double hi, bool lo_open = false) {
  if (v < lo || v > hi || (lo_open && v == lo)) {
    std::ostringstream os;
    os << v << " is out of range " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    fail(w, os.str());
  }
  return v;
}

int64_t at_least(int64_t v, const Where& w, int64_t lo) {
  if (v < lo) fail(w, std::to_string(v) + " must be >= " + std::to_string(lo));
  return v;
}

std::vector<DataFileConfig> as_data_files(const YAML::Node& node, const Where& w) {
  std::vector<DataFileConfig> files;
  auto one = [&](const YAML::Node& item, const Where& iw) {
    DataFileConfig f;
    if (item.IsScalar()) {
      f.path = as_string(item, iw);
      return f;
    }
    if (!item.IsMap()) fail(iw, "expected a file path or {path, weight, format}, got " + scalar_text(item));
    static const std::vector<std::string> keys = {"path", "weight", "format"};
    for (const auto& kv : item) {
      std::string k = kv.first.Scalar();
      Where kw{iw.source, iw.path + "." + k, kv.first.Mark().line >= 0 ? kv.first.Mark().line + 1 : -1};
      if (k == "path") {
        f.path = as_string(kv.second, kw);
      } else if (k == "weight") {
        f.weight = in_range(as_double(kv.second, kw), kw, 0.0, 1e9, true);
      } else if (k == "format") {
        f.format = as_choice(kv.second, kw,
                             {"auto", "messages", "prompt_completion", "alpaca", "text", "tokens"});
      } else {
        std::string best = keys[0];
        for (const auto& c : keys)
          if (edit_distance(k, c) < edit_distance(k, best)) best = c;
        fail(kw, "unknown key '" + k + "'; did you mean '" + best + "'? (valid: path, weight, format)");
      }
    }
    if (f.path.empty()) fail(iw, "a data file entry needs 'path'");
    return f;
  };
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      Where iw{w.source, w.path + "[" + std::to_string(i) + "]", w.line};
      if (node[i].Mark().line >= 0) iw.line = node[i].Mark().line + 1;
      files.push_back(one(node[i], iw));
    }
  } else {
    files.push_back(one(node, w));
  }
  if (files.empty()) fail(w, "expected at least one file");
  return files;
}

// Activation checkpointing: none | every_layer | every_<k> | k (integer) | true/false.
int64_t as_checkpointing(const YAML::Node& node, const Where& w) {
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    if (s == "none" || s == "false" || s == "off" || s == "0") return 0;
    if (s == "every_layer" || s == "true" || s == "on" || s == "all") return 1;
    if (s.rfind("every_", 0) == 0) s = s.substr(6);
    try {
      size_t used = 0;
      long long k = std::stoll(s, &used);
      if (used == s.size() && k >= 0) return k;
    } catch (const std::exception&) {
    }
  }
  fail(w, "expected none, every_layer, every_<k> or an integer k >= 0, got " + scalar_text(node));
}

using Setter = std::function<void(const YAML::Node&, TrainConfig&, const Where&)>;

struct KeyDef {
  ConfigKey key;
  Setter set;
};

const std::vector<KeyDef>& key_defs() {
  static const std::vector<KeyDef> defs = [] {
    std::vector<KeyDef> d;
    auto add = [&](std::string path, std::string doc, Setter set) {
      d.push_back({{std::move(path), std::move(doc)}, std::move(set)});
    };
    // model
    add("model.path", "Hugging Face model directory (config.json, safetensors, tokenizer)",
        [](auto& n, auto& c, auto& w) { c.model.path = as_string(n, w); });
    add("model.dtype", "auto | float32 | bfloat16 | float16; auto = bfloat16 on CUDA, float32 on CPU",
        [](auto& n, auto& c, auto& w) {
          c.model.dtype = as_choice(n, w, {"auto", "float32", "bfloat16", "float16"});
        });
    add("model.attention", "auto | fptrain | torch-fa2 | reference",
        [](auto& n, auto& c, auto& w) {
          c.model.attention = as_choice(n, w, {"auto", "fptrain", "torch-fa2", "reference"});
        });
    add("model.activation_checkpointing", "none | every_layer | every_<k> (recompute layers 0, k, 2k, ...)",
        [](auto& n, auto& c, auto& w) { c.model.activation_checkpointing = as_checkpointing(n, w); });
    // data
    add("data.train", "training JSONL: a path, or a list of paths or {path, weight, format}",
        [](auto& n, auto& c, auto& w) { c.data.train = as_data_files(n, w); });
    add("data.eval", "evaluation JSONL, same forms as data.train",
        [](auto& n, auto& c, auto& w) { c.data.eval = as_data_files(n, w); });
    add("data.max_length", "longest example in tokens",
        [](auto& n, auto& c, auto& w) { c.data.max_length = at_least(as_int(n, w), w, 2); });
    add("data.overlong", "truncate | drop: examples longer than max_length",
        [](auto& n, auto& c, auto& w) { c.data.overlong = as_choice(n, w, {"truncate", "drop"}); });
    add("data.bad_lines", "error | skip: malformed JSONL lines",
        [](auto& n, auto& c, auto& w) { c.data.bad_lines = as_choice(n, w, {"error", "skip"}); });
    add("data.max_zero_supervised_fraction",
        "stop with an error when more examples than this fraction have no supervised token",
        [](auto& n, auto& c, auto& w) {
          c.data.max_zero_supervised_fraction = in_range(as_double(n, w), w, 0.0, 1.0);
        });
    add("data.chat_template", "auto | none | llama3 | llama2 | mistral | granite3 (auto: from tokenizer_config.json)",
        [](auto& n, auto& c, auto& w) {
          c.data.chat_template = as_choice(n, w, {"auto", "none", "llama3", "llama2", "mistral", "granite3"});
        });
    add("data.loss_mask", "assistant | last_assistant | all: which chat tokens carry loss",
        [](auto& n, auto& c, auto& w) {
          c.data.loss_mask = as_choice(n, w, {"assistant", "last_assistant", "all"});
        });
    add("data.pad_id", "padding token id for pad mode (default: chosen by the pipeline, never EOS)",
        [](auto& n, auto& c, auto& w) { c.data.pad_id = in_range(as_int(n, w), w, 0, 2147483647); });
    add("data.shuffle", "shuffle examples each epoch (deterministic from training.seed)",
        [](auto& n, auto& c, auto& w) { c.data.shuffle = as_bool(n, w); });
    add("data.shuffle_window", "pack mode: examples best-fit-decreasing sees at once",
        [](auto& n, auto& c, auto& w) { c.data.shuffle_window = at_least(as_int(n, w), w, 1); });
    add("data.workers", "tokenizer threads running ahead of the model (0: inline)",
        [](auto& n, auto& c, auto& w) { c.data.workers = in_range(as_int(n, w), w, 0, 256); });
    add("data.prefetch_steps", "optimizer steps of batches prepared ahead",
        [](auto& n, auto& c, auto& w) { c.data.prefetch_steps = in_range(as_int(n, w), w, 1, 1024); });
    // batching
    add("batching.mode", "flatten | pad | pack",
        [](auto& n, auto& c, auto& w) { c.batching.mode = as_choice(n, w, {"flatten", "pad", "pack"}); });
    add("batching.examples_per_micro_batch", "examples per micro-batch (flatten, pad)",
        [](auto& n, auto& c, auto& w) { c.batching.examples_per_micro_batch = at_least(as_int(n, w), w, 1); });
    add("batching.max_tokens", "token budget per micro-batch (pack)",
        [](auto& n, auto& c, auto& w) { c.batching.max_tokens = at_least(as_int(n, w), w, 1); });
    add("batching.grad_accumulation", "micro-batches per optimizer step",
        [](auto& n, auto& c, auto& w) { c.batching.grad_accumulation = at_least(as_int(n, w), w, 1); });
    // optimizer
    add("optimizer.lr", "peak learning rate",
        [](auto& n, auto& c, auto& w) { c.optimizer.lr = in_range(as_double(n, w), w, 0.0, 10.0, true); });
    add("optimizer.betas", "[beta1, beta2]", [](auto& n, auto& c, auto& w) {
      if (!n.IsSequence() || n.size() != 2) fail(w, "expected [beta1, beta2], got " + scalar_text(n));
      c.optimizer.beta1 = in_range(as_double(n[0], w), w, 0.0, 1.0);
      c.optimizer.beta2 = in_range(as_double(n[1], w), w, 0.0, 1.0);
      if (c.optimizer.beta1 >= 1.0 || c.optimizer.beta2 >= 1.0) fail(w, "betas must be < 1");
    });
    add("optimizer.eps", "AdamW epsilon",
        [](auto& n, auto& c, auto& w) { c.optimizer.eps = in_range(as_double(n, w), w, 0.0, 1.0, true); });
    add("optimizer.weight_decay", "decoupled weight decay (applied to every parameter)",
        [](auto& n, auto& c, auto& w) { c.optimizer.weight_decay = in_range(as_double(n, w), w, 0.0, 10.0); });
    add("optimizer.master_weights", "true: fp32 master weights and moments; false: pure model dtype",
        [](auto& n, auto& c, auto& w) { c.optimizer.master_weights = as_bool(n, w); });
    add("optimizer.grad_clip", "max global gradient L2 norm; 0 disables clipping",
        [](auto& n, auto& c, auto& w) { c.optimizer.grad_clip = in_range(as_double(n, w), w, 0.0, 1e9); });
    // schedule
    add("schedule.warmup_steps", "linear warmup from 0 to optimizer.lr",
        [](auto& n, auto& c, auto& w) { c.schedule.warmup_steps = at_least(as_int(n, w), w, 0); });
    add("schedule.decay", "cosine | linear | constant, after warmup",
        [](auto& n, auto& c, auto& w) {
          c.schedule.decay = as_choice(n, w, {"cosine", "linear", "constant"});
        });
    add("schedule.min_lr", "learning rate at the end of the decay",
        [](auto& n, auto& c, auto& w) { c.schedule.min_lr = in_range(as_double(n, w), w, 0.0, 10.0); });
    // training
    add("training.max_steps", "optimizer steps (0: from training.epochs)",
        [](auto& n, auto& c, auto& w) { c.training.max_steps = at_least(as_int(n, w), w, 0); });
    add("training.epochs", "passes over data.train (used when max_steps is 0)",
        [](auto& n, auto& c, auto& w) { c.training.epochs = at_least(as_int(n, w), w, 0); });
    add("training.seed", "seed for shuffling and initialisation",
        [](auto& n, auto& c, auto& w) { c.training.seed = static_cast<uint64_t>(at_least(as_int(n, w), w, 0)); });
    add("training.stop_at_step", "stop after this step with a checkpoint, as SIGTERM would (0: never); run again to resume",
        [](auto& n, auto& c, auto& w) { c.training.stop_at_step = at_least(as_int(n, w), w, 0); });
    // logging
    add("logging.log_interval", "steps between metric lines",
        [](auto& n, auto& c, auto& w) { c.logging.log_interval = at_least(as_int(n, w), w, 1); });
    add("logging.eval_interval", "steps between evaluations on data.eval (0: at the end only)",
        [](auto& n, auto& c, auto& w) { c.logging.eval_interval = at_least(as_int(n, w), w, 0); });
    add("logging.eval_max_batches", "cap on eval micro-batches (0: all)",
        [](auto& n, auto& c, auto& w) { c.logging.eval_max_batches = at_least(as_int(n, w), w, 0); });
    // checkpoint
    add("checkpoint.interval", "steps between checkpoints (0: final only)",
        [](auto& n, auto& c, auto& w) { c.checkpoint.interval = at_least(as_int(n, w), w, 0); });
    add("checkpoint.keep_last", "checkpoints kept; older ones are deleted",
        [](auto& n, auto& c, auto& w) { c.checkpoint.keep_last = at_least(as_int(n, w), w, 1); });
    add("checkpoint.save_final", "save a checkpoint when training ends",
        [](auto& n, auto& c, auto& w) { c.checkpoint.save_final = as_bool(n, w); });
    // top level
    add("output_dir", "run directory: config.yaml, train.log, metrics.jsonl, summary.json, checkpoints/",
        [](auto& n, auto& c, auto& w) { c.output_dir = as_string(n, w); });
    add("resume", "auto (latest checkpoint in output_dir, if any) | none | <checkpoint dir>",
        [](auto& n, auto& c, auto& w) { c.resume = as_string(n, w); });
    add("device", "auto | cpu | cuda | cuda:N", [](auto& n, auto& c, auto& w) {
      std::string s = as_string(n, w);
      bool ok = s == "auto" || s == "cpu" || s == "cuda";
      if (!ok && s.rfind("cuda:", 0) == 0 && s.size() > 5)
        ok = std::all_of(s.begin() + 5, s.end(), ::isdigit);
      if (!ok) fail(w, "'" + s + "' is not one of auto | cpu | cuda | cuda:N");
      c.device = s;
    });
    add("cpu_threads", "LibTorch intra-op threads for CPU compute (0: one per core)",
        [](auto& n, auto& c, auto& w) { c.cpu_threads = in_range(as_int(n, w), w, 0, 4096); });
    return d;
  }();
  return defs;
}

const KeyDef* find_key(const std::string& path) {
  for (const auto& d : key_defs())
    if (d.key.path == path) return &d;
  return nullptr;
}

bool is_section(const std::string& path) {
  for (const auto& d : key_defs())
    if (d.key.path.rfind(path + ".", 0) == 0) return true;
  return false;
}

std::string parent_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string leaf_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// Nearest valid key: among siblings by leaf name, else anywhere by leaf name.
std::string suggest(const std::string& path) {
  std::set<std::string> candidates;  // full paths of keys and sections
  for (const auto& d : key_defs()) {
    std::string p = d.key.path;
    while (!p.empty()) {
      candidates.insert(p);
      p = parent_of(p);
    }
  }
  const std::string parent = parent_of(path), leaf = leaf_of(path);
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    if (parent_of(c) != parent) continue;
    size_t dist = edit_distance(leaf, leaf_of(c));
    if (dist < best_d) best_d = dist, best = c;
  }
  const size_t tolerance = std::max<size_t>(2, leaf.size() / 3);
  if (best_d <= tolerance) return best;
  // Same leaf name elsewhere (e.g. 'lr' put under 'training').
  for (const auto& c : candidates) {
    size_t dist = edit_distance(leaf, leaf_of(c));
    if (dist < best_d) best_d = dist, best = c;
  }
  return best_d <= tolerance ? best : "";
}

[[noreturn]] void unknown_key(const Where& w) {
  std::string msg = "unknown key '" + w.path + "'";
  std::string s = suggest(w.path);
  if (!s.empty()) msg += "; did you mean '" + s + "'?";
  else msg += " (see docs/configuration.md for the valid keys)";
  throw std::invalid_argument(w.source + (w.line >= 0 ? ":" + std::to_string(w.line) : "") + ": " + msg);
}

void apply_node(const YAML::Node& node, const std::string& prefix, TrainConfig& config,
                const std::string& source) {
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    Where w{source, path, kv.first.Mark().line >= 0 ? kv.first.Mark().line + 1 : -1};
    if (const KeyDef* def = find_key(path)) {
      if (kv.second.IsNull()) fail(w, "has no value");
      def->set(kv.second, config, w);
    } else if (is_section(path)) {
      if (!kv.second.IsMap()) fail(w, "is a section; expected a mapping of keys, got " + scalar_text(kv.second));
      apply_node(kv.second, path, config, source);
    } else {
      unknown_key(w);
    }
  }
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> k;
    for (const auto& d : key_defs()) k.push_back(d.key);
    return k;
  }();
  return keys;
}

TrainConfig parse_config(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(source + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
  }
  TrainConfig config;
  config.source = source;
  if (root.IsNull()) return config;
  if (!root.IsMap()) throw std::invalid_argument(source + ": expected a mapping of configuration keys");
  apply_node(root, "", config, source);
  return config;
}

TrainConfig load_config(const std::filesystem::path& yaml_file) {
  std::ifstream in(yaml_file);
  if (!in) throw std::invalid_argument(yaml_file.string() + ": cannot open the configuration file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), yaml_file.string());
}

void apply_override(TrainConfig& config, const std::string& assignment) {
  const std::string source = "--set " + assignment;
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument(source + ": expected key.path=value");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  Where w{source, path, -1};
  const KeyDef* def = find_key(path);
  if (!def) {
    if (is_section(path)) fail(w, "is a section; set one of its keys, e.g. " + path + ".<key>=value");
    unknown_key(w);
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(w, "invalid value: " + e.msg);
  }
  if (value.IsNull()) fail(w, "has no value");
  def->set(value, config, w);
}

void validate(const TrainConfig& c) {
  auto bad = [&](const std::string& key, const std::string& problem) {
    throw std::invalid_argument(c.source + ": " + key + ": " + problem);
  };
  if (c.model.path.empty()) bad("model.path", "is required");
  if (c.data.train.empty()) bad("data.train", "is required");
  if (c.batching.mode == "pack" && c.batching.max_tokens <= 0)
    bad("batching.max_tokens", "is required in pack mode");
  if (c.batching.mode == "pack" && c.batching.max_tokens < c.data.max_length)
    bad("batching.max_tokens", std::to_string(c.batching.max_tokens) +
                                   " is smaller than data.max_length " + std::to_string(c.data.max_length) +
                                   ": the longest example would not fit");
  if (c.training.max_steps == 0 && c.training.epochs == 0)
    bad("training.max_steps", "set training.max_steps or training.epochs");
  if (c.training.max_steps > 0 && c.schedule.warmup_steps > c.training.max_steps)
    bad("schedule.warmup_steps", std::to_string(c.schedule.warmup_steps) + " exceeds training.max_steps " +
                                     std::to_string(c.training.max_steps));
  if (c.schedule.min_lr > c.optimizer.lr)
    bad("schedule.min_lr", "exceeds optimizer.lr");
  if (c.logging.eval_interval > 0 && c.data.eval.empty())
    bad("logging.eval_interval", "is set but data.eval is not");
}

std::string to_yaml(const TrainConfig& c) {
  YAML::Emitter e;
  auto files = [&](const std::vector<DataFileConfig>& fs) {
    e << YAML::BeginSeq;
    for (const auto& f : fs)
      e << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value << f.path << YAML::Key
        << "weight" << YAML::Value << f.weight << YAML::Key << "format" << YAML::Value << f.format
        << YAML::EndMap;
    e << YAML::EndSeq;
  };
  e << YAML::BeginMap;
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "path" << YAML::Value << c.model.path;
  e << YAML::Key << "dtype" << YAML::Value << c.model.dtype;
  e << YAML::Key << "attention" << YAML::Value << c.model.attention;
  e << YAML::Key << "activation_checkpointing" << YAML::Value << c.model.activation_checkpointing;
  e << YAML::EndMap;
  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "train" << YAML::Value;
  files(c.data.train);
  if (!c.data.eval.empty()) {
    e << YAML::Key << "eval" << YAML::Value;
    files(c.data.eval);
  }
  e << YAML::Key << "max_length" << YAML::Value << c.data.max_length;
  e << YAML::Key << "overlong" << YAML::Value << c.data.overlong;
  e << YAML::Key << "bad_lines" << YAML::Value << c.data.bad_lines;
  e << YAML::Key << "max_zero_supervised_fraction" << YAML::Value << c.data.max_zero_supervised_fraction;
  e << YAML::Key << "chat_template" << YAML::Value << c.data.chat_template;
  e << YAML::Key << "loss_mask" << YAML::Value << c.data.loss_mask;
  if (c.data.pad_id) e << YAML::Key << "pad_id" << YAML::Value << *c.data.pad_id;
  e << YAML::Key << "shuffle" << YAML::Value << c.data.shuffle;
  e << YAML::Key << "shuffle_window" << YAML::Value << c.data.shuffle_window;
  e << YAML::Key << "prefetch_steps" << YAML::Value << c.data.prefetch_steps;
  e << YAML::Key << "workers" << YAML::Value << c.data.workers;
  e << YAML::EndMap;
  e << YAML::Key << "batching" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "mode" << YAML::Value << c.batching.mode;
  e << YAML::Key << "examples_per_micro_batch" << YAML::Value << c.batching.examples_per_micro_batch;
  e << YAML::Key << "max_tokens" << YAML::Value << c.batching.max_tokens;
  e << YAML::Key << "grad_accumulation" << YAML::Value << c.batching.grad_accumulation;
  e << YAML::EndMap;
  e << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "lr" << YAML::Value << c.optimizer.lr;
  e << YAML::Key << "betas" << YAML::Value << YAML::Flow << YAML::BeginSeq << c.optimizer.beta1
    << c.optimizer.beta2 << YAML::EndSeq;
  e << YAML::Key << "eps" << YAML::Value << c.optimizer.eps;
  e << YAML::Key << "weight_decay" << YAML::Value << c.optimizer.weight_decay;
  e << YAML::Key << "master_weights" << YAML::Value << c.optimizer.master_weights;
  e << YAML::Key << "grad_clip" << YAML::Value << c.optimizer.grad_clip;
  e << YAML::EndMap;
  e << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "warmup_steps" << YAML::Value << c.schedule.warmup_steps;
  e << YAML::Key << "decay" << YAML::Value << c.schedule.decay;
  e << YAML::Key << "min_lr" << YAML::Value << c.schedule.min_lr;
  e << YAML::EndMap;
  e << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "max_steps" << YAML::Value << c.training.max_steps;
  e << YAML::Key << "epochs" << YAML::Value << c.training.epochs;
  e << YAML::Key << "seed" << YAML::Value << c.training.seed;
  if (c.training.stop_at_step > 0) e << YAML::Key << "stop_at_step" << YAML::Value << c.training.stop_at_step;
  e << YAML::EndMap;
  e << YAML::Key << "logging" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "log_interval" << YAML::Value << c.logging.log_interval;
  e << YAML::Key << "eval_interval" << YAML::Value << c.logging.eval_interval;
  e << YAML::Key << "eval_max_batches" << YAML::Value << c.logging.eval_max_batches;
  e << YAML::EndMap;
  e << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "interval" << YAML::Value << c.checkpoint.interval;
  e << YAML::Key << "keep_last" << YAML::Value << c.checkpoint.keep_last;
  e << YAML::Key << "save_final" << YAML::Value << c.checkpoint.save_final;
  e << YAML::EndMap;
  e << YAML::Key << "output_dir" << YAML::Value << c.output_dir;
  e << YAML::Key << "resume" << YAML::Value << c.resume;
  e << YAML::Key << "device" << YAML::Value << c.device;
  if (c.cpu_threads > 0) e << YAML::Key << "cpu_threads" << YAML::Value << c.cpu_threads;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace fptrain::trainer
