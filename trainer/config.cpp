#include "trainer/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
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

int line_of(const YAML::Node& node) { return node.Mark().line >= 0 ? node.Mark().line + 1 : -1; }

std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    if (s.size() > 60) s = s.substr(0, 60) + "...";
    return "'" + s + "'";
  }
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

// ---- scalar readers: type checks with the key in the message ---------------

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

template <class E>
E as_enum(const YAML::Node& node, const Where& w) {
  const std::string s = as_string(node, w);
  try {
    return common::parse_enum<E>(s, "");
  } catch (const std::invalid_argument&) {
    fail(w, "'" + s + "' is not one of " + common::enum_choices<E>());
  }
}

double in_range(double v, const Where& w, double lo, double hi, bool lo_open = false) {
  if (v < lo || v > hi || (lo_open && v == lo)) {
    std::ostringstream os;
    os << v << " is out of range " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    fail(w, os.str());
  }
  return v;
}

int64_t in_range(int64_t v, const Where& w, int64_t lo, int64_t hi) {
  if (v < lo) fail(w, std::to_string(v) + " must be >= " + std::to_string(lo));
  if (v > hi) fail(w, std::to_string(v) + " must be <= " + std::to_string(hi));
  return v;
}

// ---- scalar writers for to_yaml ---------------------------------------------

// The shortest text that reads back as the same double ("2e-05", not "2.0000000000000002e-05").
std::string double_text(double v) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // stays a float in YAML
  return s;
}

YAML::Node scalar(const std::string& text) { return YAML::Node(text); }

// What a getter returns for a key to leave out of to_yaml (an unset optional key).
YAML::Node omitted() { return YAML::Node(YAML::NodeType::Undefined); }

// ---- compound values --------------------------------------------------------

std::vector<data::DataFile> as_data_files(const YAML::Node& node, const Where& w) {
  std::vector<data::DataFile> files;
  auto one = [&](const YAML::Node& item, const Where& iw) {
    data::DataFile f;
    if (item.IsScalar()) {
      f.path = as_string(item, iw);
      return f;
    }
    if (!item.IsMap()) fail(iw, "expected a file path or {path, weight, format}, got " + scalar_text(item));
    static const std::vector<std::string> keys = {"path", "weight", "format"};
    std::set<std::string> seen;
    for (const auto& kv : item) {
      const std::string k = kv.first.Scalar();
      const Where kw{iw.source, iw.path + "." + k, line_of(kv.first)};
      if (!seen.insert(k).second) fail(kw, "is given twice");
      if (k == "path") {
        f.path = as_string(kv.second, kw);
      } else if (k == "weight") {
        f.weight = in_range(as_double(kv.second, kw), kw, 0.0, 1e9, true);
      } else if (k == "format") {
        f.format = as_enum<data::ExampleFormat>(kv.second, kw);
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
      if (line_of(node[i]) >= 0) iw.line = line_of(node[i]);
      files.push_back(one(node[i], iw));
    }
  } else {
    files.push_back(one(node, w));
  }
  if (files.empty()) fail(w, "expected at least one file");
  return files;
}

YAML::Node data_files_node(const std::vector<data::DataFile>& files) {
  YAML::Node seq(YAML::NodeType::Sequence);
  for (const auto& f : files) {
    YAML::Node m(YAML::NodeType::Map);
    m["path"] = f.path.string();
    m["weight"] = scalar(double_text(f.weight));
    m["format"] = common::enum_name(f.format);
    m.SetStyle(YAML::EmitterStyle::Flow);
    seq.push_back(m);
  }
  return seq;
}

// Activation checkpointing: none | every_layer | every_<k> | k (integer) | true/false.
Checkpointing as_checkpointing(const YAML::Node& node, const Where& w) {
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    if (s == "none" || s == "false" || s == "off" || s == "0") return Checkpointing::none();
    if (s == "every_layer" || s == "true" || s == "on" || s == "all") return Checkpointing::every(1);
    if (s == "selective") return Checkpointing::selective();
    if (s == "auto") return Checkpointing::automatic();
    if (s.rfind("every_", 0) == 0) s = s.substr(6);
    try {
      size_t used = 0;
      long long k = std::stoll(s, &used);
      if (used == s.size() && k >= 0) return Checkpointing::every(k);
    } catch (const std::exception&) {
    }
  }
  fail(w, "expected auto, none, selective, every_layer, every_<k> or an integer k >= 0, got " + scalar_text(node));
}

std::string as_device(const YAML::Node& node, const Where& w) {
  const std::string s = as_string(node, w);
  bool ok = s == "auto" || s == "cpu" || s == "cuda";
  if (!ok && s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() < 9)
    ok = std::all_of(s.begin() + 5, s.end(), ::isdigit);
  if (!ok) fail(w, "'" + s + "' is not one of auto | cpu | cuda | cuda:N");
  return s;
}

// ---- the key table: one entry per key, read and written from the same place --

// Returns the config member a key stands for.
#define MEMBER(member) [](TrainConfig& c) -> auto& { return c.member; }

struct KeyDef {
  ConfigKey key;
  std::function<void(const YAML::Node&, TrainConfig&, const Where&)> set;
  // The value for to_yaml; an undefined node leaves the key out (unset optional keys).
  std::function<YAML::Node(TrainConfig&)> get;
};

class KeyTable {
 public:
  std::vector<KeyDef> defs;

  template <class Field>
  void integer(std::string path, std::string doc, Field field, int64_t lo,
               int64_t hi = std::numeric_limits<int64_t>::max(), bool omit_zero = false) {
    add(std::move(path), std::move(doc),
        [=](auto& n, auto& c, auto& w) { field(c) = static_cast<std::decay_t<decltype(field(c))>>(in_range(as_int(n, w), w, lo, hi)); },
        [=](TrainConfig& c) {
          const int64_t v = static_cast<int64_t>(field(c));
          return omit_zero && v == 0 ? omitted() : YAML::Node(v);
        });
  }
  template <class Field>
  void number(std::string path, std::string doc, Field field, double lo, double hi, bool lo_open = false) {
    add(std::move(path), std::move(doc),
        [=](auto& n, auto& c, auto& w) { field(c) = in_range(as_double(n, w), w, lo, hi, lo_open); },
        [=](TrainConfig& c) { return scalar(double_text(field(c))); });
  }
  template <class Field>
  void boolean(std::string path, std::string doc, Field field) {
    add(std::move(path), std::move(doc), [=](auto& n, auto& c, auto& w) { field(c) = as_bool(n, w); },
        [=](TrainConfig& c) { return YAML::Node(static_cast<bool>(field(c))); });
  }
  template <class Field>
  void string(std::string path, std::string doc, Field field) {
    add(std::move(path), std::move(doc), [=](auto& n, auto& c, auto& w) { field(c) = as_string(n, w); },
        [=](TrainConfig& c) { return YAML::Node(field(c)); });
  }
  // The doc starts with the choices, taken from the enum's names.
  template <class E, class Field>
  void choice(std::string path, std::string doc, Field field) {
    add(std::move(path), common::enum_choices<E>() + ": " + doc,
        [=](auto& n, auto& c, auto& w) { field(c) = as_enum<E>(n, w); },
        [=](TrainConfig& c) { return YAML::Node(common::enum_name(field(c))); });
  }
  void custom(std::string path, std::string doc, std::function<void(const YAML::Node&, TrainConfig&, const Where&)> set,
              std::function<YAML::Node(TrainConfig&)> get) {
    add(std::move(path), std::move(doc), std::move(set), std::move(get));
  }

 private:
  void add(std::string path, std::string doc, std::function<void(const YAML::Node&, TrainConfig&, const Where&)> set,
           std::function<YAML::Node(TrainConfig&)> get) {
    defs.push_back({{std::move(path), std::move(doc)}, std::move(set), std::move(get)});
  }
};

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// adapter.target_modules: a list of names, or one string (all-linear, else PEFT's regex form).
void set_target_modules(const YAML::Node& n, models::LoraSettings& s, const Where& w) {
  s.target_modules.clear();
  s.target_regex.clear();
  if (n.IsScalar()) {
    const std::string v = n.Scalar();
    if (v == "all-linear") s.target_modules = {v};
    else s.target_regex = v;
    return;
  }
  if (!n.IsSequence() || n.size() == 0) fail(w, "expected a list of module names or a string, got " + scalar_text(n));
  for (const auto& item : n) {
    if (!item.IsScalar() || item.Scalar().empty()) fail(w, "module names must be non-empty strings");
    s.target_modules.push_back(item.Scalar());
  }
}

YAML::Node target_modules_node(const models::LoraSettings& s) {
  if (!s.target_regex.empty()) return YAML::Node(s.target_regex);
  if (s.target_modules.size() == 1 && s.target_modules[0] == "all-linear") return YAML::Node("all-linear");
  YAML::Node seq(YAML::NodeType::Sequence);
  for (const auto& m : s.target_modules) seq.push_back(m);
  seq.SetStyle(YAML::EmitterStyle::Flow);
  return seq;
}

const std::vector<KeyDef>& key_defs() {
  static const std::vector<KeyDef> defs = [] {
    KeyTable t;
    // model
    t.string("model.path", "Hugging Face model directory (config.json, safetensors, tokenizer)", MEMBER(model.path));
    t.choice<ModelDtype>("model.dtype", "auto = bfloat16 on CUDA, float32 on CPU", MEMBER(model.dtype));
    t.choice<AttentionChoice>("model.attention",
                              "auto = hopper (our kernels) where they run, else torch-fa2, else reference",
                              MEMBER(model.attention));
    t.boolean("model.fused_ops",
              "RMSNorm with the residual add, RoPE and SwiGLU through fused CUDA kernels (forward and backward) where "
              "they run (sm_90); false: ATen operations",
              MEMBER(model.fused_ops));
    t.custom(
        "model.activation_checkpointing",
        "auto | none | selective | every_layer | every_<k>: auto picks none, selective (keep attention "
        "activations, recompute the MLPs) or every layer for each micro-batch from its size and the free device "
        "memory; every_<k> recomputes layers 0, k, 2k, ...",
        [](auto& n, auto& c, auto& w) { c.model.activation_checkpointing = as_checkpointing(n, w); },
        [](TrainConfig& c) { return YAML::Node(c.model.activation_checkpointing.name()); });
    t.choice<Recompute>("model.recompute",
                        "what a checkpointed layer keeps for its recomputation: replay = its input, the residual "
                        "after the attention and (hopper) the attention's output (the recomputation skips the "
                        "attention forward and the o/down products); plain = only its input; auto = replay where the "
                        "device memory allows, plain on as many layers as needed (on CUDA; the CPU replays)",
                        MEMBER(model.recompute));
    // adapter
    t.choice<AdapterType>("adapter.type",
                          "none = full fine-tuning; lora = low-rank adapters on the frozen base (PEFT's LoRA); qlora = "
                          "the same on a 4-bit NF4 base",
                          MEMBER(adapter.type));
    t.integer("adapter.r", "adapter rank", MEMBER(adapter.lora.r), 1, 1 << 16);
    t.number("adapter.alpha", "scale alpha / r (alpha / sqrt(r) with rslora)", MEMBER(adapter.lora.alpha), 0.0, 1e6,
             /*lo_open=*/true);
    t.custom(
        "adapter.dropout", "dropout on the adapters' input while training, in [0, 1)",
        [](auto& n, auto& c, auto& w) {
          c.adapter.lora.dropout = in_range(as_double(n, w), w, 0.0, 1.0);
          if (c.adapter.lora.dropout >= 1.0) fail(w, "must be below 1");
        },
        [](TrainConfig& c) { return scalar(double_text(c.adapter.lora.dropout)); });
    t.custom(
        "adapter.target_modules",
        "the projections to adapt, as PEFT matches them: a list of module names (q_proj, ..., or full names), "
        "all-linear, or one string that is a regular expression over the full module names",
        [](auto& n, auto& c, auto& w) { set_target_modules(n, c.adapter.lora, w); },
        [](TrainConfig& c) { return target_modules_node(c.adapter.lora); });
    t.boolean("adapter.rslora", "rank-stabilised scale alpha / sqrt(r)", MEMBER(adapter.lora.rslora));
    t.custom(
        "adapter.from", "a PEFT adapter folder to continue from (adapter_config.json: its r, alpha and targets apply)",
        [](auto& n, auto& c, auto& w) { c.adapter.from = as_string(n, w); },
        [](TrainConfig& c) { return c.adapter.from.empty() ? omitted() : YAML::Node(c.adapter.from); });
    t.boolean("adapter.save_merged", "also write the merged model (base + scale B A) to output_dir/merged at the end",
              MEMBER(adapter.save_merged));
    // data
    t.custom("data.train", "training JSONL: a path, or a list of paths or {path, weight, format}",
             [](auto& n, auto& c, auto& w) { c.data.train = as_data_files(n, w); },
             [](TrainConfig& c) { return data_files_node(c.data.train); });
    t.custom("data.eval", "evaluation JSONL, same forms as data.train",
             [](auto& n, auto& c, auto& w) { c.data.eval = as_data_files(n, w); },
             [](TrainConfig& c) { return c.data.eval.empty() ? omitted() : data_files_node(c.data.eval); });
    t.integer("data.max_length", "longest example in tokens", MEMBER(data.max_length), 2);
    t.choice<data::OverlongPolicy>("data.overlong", "examples longer than max_length", MEMBER(data.overlong));
    t.choice<data::BadLinePolicy>("data.bad_lines", "malformed JSONL lines", MEMBER(data.bad_lines));
    t.number("data.max_zero_supervised_fraction",
             "stop with an error when more examples than this fraction have no supervised token",
             MEMBER(data.max_zero_supervised_fraction), 0.0, 1.0);
    t.choice<data::ChatTemplateKind>("data.chat_template", "auto = from tokenizer_config.json",
                                     MEMBER(data.chat_template));
    t.choice<data::ChatLossMask>("data.loss_mask", "which chat tokens carry loss", MEMBER(data.loss_mask));
    t.custom(
        "data.pad_id", "padding token id for pad mode (default: chosen by the pipeline, never EOS)",
        [](auto& n, auto& c, auto& w) { c.data.pad_id = static_cast<int32_t>(in_range(as_int(n, w), w, 0, kMaxInt32)); },
        [](TrainConfig& c) { return c.data.pad_id ? YAML::Node(*c.data.pad_id) : omitted(); });
    t.boolean("data.shuffle", "shuffle examples each epoch (deterministic from training.seed)", MEMBER(data.shuffle));
    t.integer("data.shuffle_window",
              "pack: examples best-fit-decreasing sees at once; fixed: examples cut into rows at once",
              MEMBER(data.shuffle_window), 1);
    t.integer("data.workers", "tokenizer threads running ahead of the model (0: inline)", MEMBER(data.workers), 0,
              256);
    t.integer("data.prefetch_steps", "optimizer steps of batches prepared ahead", MEMBER(data.prefetch_steps), 1,
              1024);
    // batching
    t.choice<data::BatchMode>("batching.mode", "how examples form micro-batches", MEMBER(batching.mode));
    t.integer("batching.examples_per_micro_batch", "examples per micro-batch (flatten, pad)",
              MEMBER(batching.examples_per_micro_batch), 1);
    t.integer("batching.max_tokens", "token budget per micro-batch (pack; required there)",
              MEMBER(batching.max_tokens), 1, std::numeric_limits<int64_t>::max(), /*omit_zero=*/true);
    t.integer("batching.grad_accumulation", "micro-batches per optimizer step", MEMBER(batching.grad_accumulation),
              1);
    t.boolean("batching.balance_ranks",
              "flatten with several ranks: deal each step's examples to the ranks so their compute matches (any number "
              "of examples each; the step's examples and loss do not change); false: consecutive groups",
              MEMBER(batching.balance_ranks));
    t.integer("batching.row_tokens", "fixed: tokens per row, examples cut across rows (0: data.max_length)",
              MEMBER(batching.row_tokens), 0, std::numeric_limits<int32_t>::max(), /*omit_zero=*/true);
    t.integer("batching.rows_per_micro_batch", "fixed: rows per micro-batch", MEMBER(batching.rows_per_micro_batch),
              1);
    t.boolean("batching.cross_example_attention",
              "fixed: each row one sequence, positions running on across examples (the packing paper's 'without "
              "position ids'); false: each piece of an example its own sequence",
              MEMBER(batching.cross_example_attention));
    // optimizer
    t.number("optimizer.lr", "peak learning rate", MEMBER(optimizer.lr), 0.0, 10.0, /*lo_open=*/true);
    t.custom(
        "optimizer.betas", "[beta1, beta2]",
        [](auto& n, auto& c, auto& w) {
          if (!n.IsSequence() || n.size() != 2) fail(w, "expected [beta1, beta2], got " + scalar_text(n));
          c.optimizer.beta1 = in_range(as_double(n[0], w), w, 0.0, 1.0);
          c.optimizer.beta2 = in_range(as_double(n[1], w), w, 0.0, 1.0);
          if (c.optimizer.beta1 >= 1.0 || c.optimizer.beta2 >= 1.0) fail(w, "betas must be < 1");
        },
        [](TrainConfig& c) {
          YAML::Node seq(YAML::NodeType::Sequence);
          seq.push_back(scalar(double_text(c.optimizer.beta1)));
          seq.push_back(scalar(double_text(c.optimizer.beta2)));
          seq.SetStyle(YAML::EmitterStyle::Flow);
          return seq;
        });
    t.number("optimizer.eps", "AdamW epsilon", MEMBER(optimizer.eps), 0.0, 1.0, /*lo_open=*/true);
    t.number("optimizer.weight_decay", "decoupled weight decay (applied to every parameter)",
             MEMBER(optimizer.weight_decay), 0.0, 10.0);
    t.custom(
        "optimizer.master_weights",
        "true: fp32 master weights and moments; split: the same masters kept as the bf16 weight and a 16-bit "
        "remainder (2 bytes less per parameter, the same training bit for bit); false: pure model dtype",
        [](auto& n, auto& c, auto& w) {
          const bool split = n.IsScalar() && n.Scalar() == "split";
          if (!split) {
            std::string v = n.IsScalar() ? n.Scalar() : std::string();
            std::transform(v.begin(), v.end(), v.begin(), ::tolower);
            if (v != "true" && v != "yes" && v != "on" && v != "false" && v != "no" && v != "off")
              fail(w, "expected true, false or split, got " + scalar_text(n));
          }
          c.optimizer.split_masters = split;
          c.optimizer.master_weights = split || as_bool(n, w);
        },
        [](TrainConfig& c) {
          return c.optimizer.split_masters ? YAML::Node("split") : YAML::Node(c.optimizer.master_weights);
        });
    t.choice<optim::Moments>(
        "optimizer.state_dtype",
        "AdamW's exp_avg and exp_avg_sq: auto = fp32 with master weights, else the model dtype (8 bytes per "
        "parameter with master weights); int8 = bitsandbytes' AdamW8bit blockwise 8-bit moments and its update "
        "arithmetic (a uint8 code per element and an fp32 absmax per 256: about 2 bytes per parameter)",
        MEMBER(optimizer.moments));
    t.boolean("optimizer.fp32_grad_accumulation",
              "with master weights: sum the micro-batches' gradients in fp32 (4 more bytes per parameter, one "
              "more pass per micro-batch) instead of in place in the model dtype",
              MEMBER(optimizer.fp32_grad_accumulation));
    t.choice<optim::GradStorage>(
        "optimizer.gradient_storage",
        "where the gradients live: lazy = per bucket (distributed.bucket_mb), allocated when the backward first "
        "reaches it and freed after the step, so no gradient memory during the forward; resident = one buffer for "
        "the whole run (between GPUs of one node the copy engines then read the peers' slices from it instead "
        "of pushing them); auto = lazy",
        MEMBER(optimizer.gradient_storage));
    t.number("optimizer.grad_clip", "max global gradient L2 norm; 0 disables clipping", MEMBER(optimizer.grad_clip),
             0.0, 1e9);
    t.choice<optim::Offload>(
        "optimizer.offload",
        "none = AdamW's state and update on the training device; cpu = masters and moments in pinned host "
        "memory, updated by host threads bucket by bucket while the next forward runs (the device keeps the "
        "weights and gradients; the same training bit for bit)",
        MEMBER(optimizer.offload));
    t.choice<optim::OffloadUpdate>(
        "optimizer.offload_update",
        "with optimizer.offload: cpu, where the update runs: auto = device with state_dtype int8 (whose host "
        "step is compute-bound), else host; host = on host threads (the gradients go to the "
        "host, the new weights come back); device = the host only stores the state, each bucket's state is "
        "streamed to the device, updated by the kernel of offload none and streamed back (about 4 bytes per "
        "parameter each way with split masters and int8 moments, no host compute; the same training bit for bit)",
        MEMBER(optimizer.offload_update));
    // schedule
    t.integer("schedule.warmup_steps", "linear warmup from 0 to optimizer.lr", MEMBER(schedule.warmup_steps), 0);
    t.choice<LrDecay>("schedule.decay", "after warmup", MEMBER(schedule.decay));
    t.number("schedule.min_lr", "learning rate at the end of the decay", MEMBER(schedule.min_lr), 0.0, 10.0);
    // training
    t.integer("training.max_steps", "optimizer steps (0: from training.epochs)", MEMBER(training.max_steps), 0);
    t.integer("training.epochs", "passes over data.train (used when max_steps is 0)", MEMBER(training.epochs), 0);
    t.integer("training.seed", "seed for shuffling and initialisation", MEMBER(training.seed), 0);
    t.integer("training.stop_at_step",
              "stop after this step with a checkpoint, as SIGTERM would (0: never); run again to resume",
              MEMBER(training.stop_at_step), 0, std::numeric_limits<int64_t>::max(), /*omit_zero=*/true);
    t.boolean("training.deterministic",
              "bitwise-repeatable steps: the attention backward without atomics, ATen's deterministic algorithms",
              MEMBER(training.deterministic));
    // logging
    t.integer("logging.log_interval", "steps between metric lines", MEMBER(logging.log_interval), 1);
    t.integer("logging.eval_interval", "steps between evaluations on data.eval (0: at the end only)",
              MEMBER(logging.eval_interval), 0);
    t.integer("logging.eval_max_batches", "cap on eval micro-batches (0: all)", MEMBER(logging.eval_max_batches), 0);
    t.integer("logging.profile_steps",
              "steps to profile after logging.profile_warmup (0: off): time per kernel category, GPU idle time and "
              "top kernels into profile.json and profile.md",
              MEMBER(logging.profile_steps), 0, 100000, /*omit_zero=*/true);
    t.integer("logging.profile_warmup", "steps this process runs before the profiled ones",
              MEMBER(logging.profile_warmup), 0);
    t.integer("logging.memory_trace_step",
              "record the CUDA allocator's history through this optimizer step (0: off) and write what is alive at "
              "its peak, by phase (forward / backward / recompute per layer and op, optimizer, weights, gradients, "
              "optimizer state), into memory_trace.json and memory_trace.md; out of memory in it: memory_trace_oom.*",
              MEMBER(logging.memory_trace_step), 0, std::numeric_limits<int64_t>::max(), /*omit_zero=*/true);
    // checkpoint
    t.integer("checkpoint.interval", "steps between checkpoints (0: final only)", MEMBER(checkpoint.interval), 0);
    t.integer("checkpoint.keep_last", "checkpoints kept; older ones are deleted", MEMBER(checkpoint.keep_last), 1);
    t.boolean("checkpoint.save_final", "save a checkpoint when training ends", MEMBER(checkpoint.save_final));
    // distributed
    t.integer("distributed.timeout",
              "seconds; a rank that dies or hangs makes every other exit non-zero within this, naming it",
              MEMBER(distributed.timeout), 1, 86400 * 7);
    t.integer("distributed.heartbeat_timeout",
              "seconds without a heartbeat (sent every second by a thread of each rank, whatever it computes) after "
              "which a peer counts as dead (killed, frozen, its node gone) and the others exit naming it; at most "
              "distributed.timeout",
              MEMBER(distributed.heartbeat_timeout), 1, 86400 * 7);
    t.choice<ShardOptimizer>("distributed.shard_optimizer",
                             "auto = true with more than one rank: fp32 masters and AdamW moments split across ranks "
                             "(ZeRO-1), gradients reduce-scattered (ZeRO-2); false = every rank holds all, all-reduce",
                             MEMBER(distributed.shard_optimizer));
    t.custom(
        "distributed.bucket_mb",
        "auto | MiB: size of the gradient buckets reduced while the backward runs, also the unit in which lazy "
        "gradients are allocated and (optimizer.offload: cpu) updated on the host; auto = 512 with several "
        "ranks, 64 in one process",
        [](auto& n, auto& c, auto& w) {
          const bool is_auto = n.IsScalar() && n.Scalar() == "auto";
          c.distributed.bucket_mb = is_auto ? kAutoBucketMb : in_range(as_int(n, w), w, 1, int64_t{1} << 20);
        },
        [](TrainConfig& c) {
          const int64_t v = c.distributed.bucket_mb;
          return v == kAutoBucketMb ? YAML::Node("auto") : YAML::Node(v);
        });
    t.choice<Transfers>("distributed.transfers",
                        "how gradient reduce-scatters and weight all-gathers move between GPUs: auto = copy engines "
                        "when every rank is on one node and the GPUs map each other's memory (no SMs taken from the "
                        "compute), else NCCL; copy_engine = copy engines or an error; nccl = NCCL's kernels",
                        MEMBER(distributed.transfers));
    t.boolean("distributed.release_unowned_gradients",
              "with a sharded optimizer and lazy gradient storage: after the last micro-batch's reduce-scatter "
              "of a bucket a rank keeps its own slice only, so from the backward to the step it holds 1/N of "
              "the gradients (the same bits); false = every bucket whole until the step",
              MEMBER(distributed.release_unowned_gradients));
    t.integer("distributed.released_buckets_in_flight",
              "released gradient buckets whose pushes by the copy engines may still be reading them before the "
              "host waits for the oldest: the caching allocator reuses a bucket's memory only after those reads, "
              "so without a limit a host far ahead of the GPU reserves new memory for every bucket (a limit costs speed: "
              "the host no longer runs far ahead); 0 = no limit",
              MEMBER(distributed.released_buckets_in_flight), 0, 1 << 20);
    // top level
    t.string("output_dir", "run directory: config.yaml, train.log, metrics.jsonl, summary.json, checkpoints/",
             MEMBER(output_dir));
    t.string("resume", "auto (latest checkpoint in output_dir, if any) | none | <checkpoint dir>", MEMBER(resume));
    t.custom(
        "device", "auto | cpu | cuda | cuda:N", [](auto& n, auto& c, auto& w) { c.device = as_device(n, w); },
        [](TrainConfig& c) { return YAML::Node(c.device); });
    t.integer("cpu_threads", "LibTorch intra-op threads for CPU compute (0: one per core)", MEMBER(cpu_threads), 0,
              4096, /*omit_zero=*/true);
    return t.defs;
  }();
  return defs;
}

#undef MEMBER

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

// "weight_decay" -> "wd".
std::string initials(const std::string& name) {
  std::string s;
  for (size_t i = 0; i < name.size(); ++i)
    if (i == 0 || name[i - 1] == '_') s += name[i];
  return s;
}

// An abbreviation of `full`: its initials ("wd") or a prefix of 3+ letters ("warmup").
bool abbreviates(const std::string& leaf, const std::string& full) {
  if (leaf.size() >= 2 && full.find('_') != std::string::npos && leaf == initials(full)) return true;
  return leaf.size() >= 3 && full.size() > leaf.size() && full.compare(0, leaf.size(), leaf) == 0;
}

// Nearest valid key: among siblings by leaf name (or abbreviation), else
// anywhere by leaf name; nothing when every key is far (an unrelated
// suggestion misleads).
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
  const size_t tolerance = std::max<size_t>(1, leaf.size() / 3);
  for (const auto& c : candidates)
    if (parent_of(c) == parent && abbreviates(leaf, leaf_of(c))) return c;
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    if (parent_of(c) != parent) continue;
    size_t dist = edit_distance(leaf, leaf_of(c));
    if (dist < best_d) best_d = dist, best = c;
  }
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
  else msg += ": no valid key is close to it (see docs/configuration.md for the valid keys)";
  throw std::invalid_argument(w.source + (w.line >= 0 ? ":" + std::to_string(w.line) : "") + ": " + msg);
}

// One key's value and where it was written; a configuration is a list of these,
// merged (file, then --set in order) before any value is checked.
struct Assignment {
  const KeyDef* def;
  YAML::Node value;
  Where where;
};

using Assignments = std::vector<Assignment>;

void collect(const YAML::Node& node, const std::string& prefix, const std::string& source, Assignments& out,
             std::map<std::string, int>& first_line) {
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    const Where w{source, path, line_of(kv.first)};
    const auto [seen, inserted] = first_line.emplace(path, w.line);
    if (!inserted)
      fail(w, "is given twice (first on line " + std::to_string(seen->second) + "); remove one");
    if (const KeyDef* def = find_key(path)) {
      out.push_back({def, kv.second, w});
    } else if (is_section(path)) {
      if (!kv.second.IsMap()) fail(w, "is a section; expected a mapping of keys, got " + scalar_text(kv.second));
      collect(kv.second, path, source, out, first_line);
    } else {
      unknown_key(w);
    }
  }
}

Assignments read_assignments(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(source + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
  }
  Assignments out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) throw std::invalid_argument(source + ": expected a mapping of configuration keys");
  std::map<std::string, int> first_line;
  collect(root, "", source, out, first_line);
  return out;
}

Assignment read_override(const std::string& assignment) {
  const std::string source = "--set " + assignment;
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) throw std::invalid_argument(source + ": expected key.path=value");
  const std::string path = assignment.substr(0, eq);
  const Where w{source, path, -1};
  const KeyDef* def = find_key(path);
  if (!def) {
    if (is_section(path)) fail(w, "is a section; set one of its keys, e.g. " + path + ".<key>=value");
    unknown_key(w);
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail(w, "invalid value: " + e.msg);
  }
  return {def, value, w};
}

// A later assignment of the same key replaces the earlier one (--set over the file).
void merge(Assignments& into, Assignment a) {
  for (auto& existing : into)
    if (existing.def == a.def) {
      existing = std::move(a);
      return;
    }
  into.push_back(std::move(a));
}

void apply_assignments(const Assignments& assignments, TrainConfig& config) {
  for (const auto& a : assignments) {
    if (a.value.IsNull()) fail(a.where, "has no value");
    a.def->set(a.value, config, a.where);
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path.string() + ": cannot open the configuration file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
  TrainConfig config;
  config.source = source;
  apply_assignments(read_assignments(yaml_text, source), config);
  return config;
}

TrainConfig load_config(const std::filesystem::path& yaml_file) {
  return parse_config(read_text_file(yaml_file), yaml_file.string());
}

TrainConfig load_config(const std::filesystem::path& yaml_file, const std::vector<std::string>& overrides) {
  Assignments merged = read_assignments(read_text_file(yaml_file), yaml_file.string());
  for (const auto& o : overrides) merge(merged, read_override(o));
  TrainConfig config;
  config.source = yaml_file.string();
  apply_assignments(merged, config);
  validate(config);
  return config;
}

void apply_override(TrainConfig& config, const std::string& assignment) {
  apply_assignments({read_override(assignment)}, config);
}

void validate(const TrainConfig& c) {
  auto bad = [&](const std::string& key, const std::string& problem) {
    throw std::invalid_argument(c.source + ": " + key + ": " + problem);
  };
  if (c.model.path.empty()) bad("model.path", "is required");
  if (c.data.train.empty()) bad("data.train", "is required");
  if (c.batching.mode == data::BatchMode::kPack && c.batching.max_tokens <= 0)
    bad("batching.max_tokens", "is required in pack mode");
  if (c.batching.mode == data::BatchMode::kPack && c.batching.max_tokens < c.data.max_length)
    bad("batching.max_tokens", std::to_string(c.batching.max_tokens) + " is smaller than data.max_length " +
                                   std::to_string(c.data.max_length) + ": the longest example would not fit");
  if (c.training.max_steps == 0 && c.training.epochs == 0)
    bad("training.max_steps", "set training.max_steps or training.epochs");
  if (c.training.max_steps > 0 && c.schedule.warmup_steps > c.training.max_steps)
    bad("schedule.warmup_steps", std::to_string(c.schedule.warmup_steps) + " exceeds training.max_steps " +
                                     std::to_string(c.training.max_steps));
  if (c.schedule.min_lr > c.optimizer.lr) bad("schedule.min_lr", "exceeds optimizer.lr");
  if (c.optimizer.offload_update == optim::OffloadUpdate::kDevice && c.optimizer.offload != optim::Offload::kCpu)
    bad("optimizer.offload_update", "device needs optimizer.offload: cpu (without offload the update is on the "
                                    "device already)");
  if (c.logging.eval_interval > 0 && c.data.eval.empty())
    bad("logging.eval_interval", "is set but data.eval is not");
  if (c.adapter.type == AdapterType::kNone && (!c.adapter.from.empty() || c.adapter.save_merged))
    bad(c.adapter.from.empty() ? "adapter.save_merged" : "adapter.from", "needs adapter.type lora or qlora");
}

std::string to_yaml(const TrainConfig& config) {
  TrainConfig c = config;  // the getters take a mutable reference; this copy is only read
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& d : key_defs()) {
    YAML::Node value = d.get(c);
    if (!value.IsDefined()) continue;
    const std::string parent = parent_of(d.key.path);
    if (parent.empty()) root[d.key.path] = value;
    else root[parent][leaf_of(d.key.path)] = value;
  }
  YAML::Emitter e;
  e << root;
  return std::string(e.c_str()) + "\n";
}

}  // namespace fptrain::trainer
