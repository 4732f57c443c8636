#include "apps/fptrain/init/tiny_model.h"

#include "models/checkpoint.h"
#include "models/init.h"
#include "models/model_config.h"
#include "common/files.h"
#include "apps/fptrain/init/tokenizer_builder.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <stdexcept>

namespace fptrain::app {
namespace {

struct Preset {
  std::string name;
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab;
  // Llama-3.2-1B's shape: its vocabulary size for the embeddings (the trained
  // tokenizer uses the first ids), tied embeddings, llama3 RoPE, bf16 weights.
  bool llama32 = false;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"test", 64, 176, 2, 4, 2, 512},
      {"tiny", 128, 352, 4, 2, 1, 2048},  // head_dim 64: our GPU kernels take 64 and 128
      {"small", 512, 1408, 8, 8, 4, 8192},
      {"study", 1024, 2816, 12, 16, 4, 8192},  // ~150M: the numerics study's (benchmarks/numerics)
      {"llama-1b", 2048, 8192, 16, 32, 8, 128256, true},
  };
  return p;
}

// A Llama-2-style chat template ([INST] ... [/INST] answer</s>).
const char* kChatTemplate =
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] %}{% set messages = messages[1:] %}"
    "{% else %}{% set system = '' %}{% endif %}"
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "{% if loop.first and system %}{{ '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}"
    "{% endif %}{% endfor %}";

void collect_strings(const nlohmann::json& j, std::vector<std::string>& out) {
  if (j.is_string()) {
    if (!j.get_ref<const std::string&>().empty()) out.push_back(j.get<std::string>());
  } else if (j.is_array() || j.is_object()) {
    for (const auto& v : j) collect_strings(v, out);
  }
}

std::vector<std::string> read_corpus(const std::vector<std::filesystem::path>& files) {
  std::vector<std::string> sentences;
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) throw std::invalid_argument(f.string() + ": cannot open the tokenizer corpus");
    const bool jsonl = f.extension() == ".jsonl" || f.extension() == ".json";
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line) && sentences.size() < 400000) {
      ++line_no;
      if (line.empty()) continue;
      if (!jsonl) {
        sentences.push_back(line);
        continue;
      }
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded())
        throw std::invalid_argument(f.string() + ":" + std::to_string(line_no) + ": not valid JSON");
      collect_strings(j, sentences);
    }
  }
  if (sentences.empty()) throw std::invalid_argument("tokenizer corpus: no text found");
  return sentences;
}

}  // namespace

const std::vector<std::string>& tiny_model_presets() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& p : presets()) n.push_back(p.name);
    return n;
  }();
  return names;
}

std::vector<std::string> builtin_corpus(size_t n, uint64_t seed) {
  static const std::vector<std::string> words = {
      "the", "a", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "it", "by", "this",
      "are", "be", "from", "at", "or", "an", "which", "can", "not", "all", "will", "more", "one", "two", "three",
      "number", "numbers", "sum", "total", "answer", "question", "write", "explain", "describe", "list", "short",
      "story", "about", "river", "city", "mountain", "water", "light", "time", "people", "world", "small",
      "large", "first", "second", "last", "each", "every", "many", "few", "because", "therefore", "however",
      "example", "step", "steps", "result", "add", "subtract", "multiply", "divide", "equals", "apples",
      "oranges", "books", "students", "teacher", "school", "market", "price", "cost", "dollars", "hours",
      "minutes", "days", "week", "year", "she", "he", "they", "we", "you", "has", "have", "had", "buys", "sells",
      "gives", "takes", "finds", "reads", "makes", "how", "what", "why", "when", "where", "who", "summarize",
      "translate", "sentence", "paragraph", "word", "words", "letter", "color", "blue", "green", "red",
      "happy", "quickly", "carefully", "simple", "important", "language", "model", "data", "train", "learn",
      "computer", "program", "function", "value", "list", "table", "tree", "house", "garden", "friend"};
  static const std::vector<std::string> ends = {".", ".", ".", "?", "!", ":", ","};
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t len = 4 + rng() % 14;
    std::string s;
    for (size_t w = 0; w < len; ++w) {
      if (!s.empty()) s += ' ';
      if (rng() % 9 == 0) {
        s += std::to_string(rng() % 1000);
      } else {
        std::string word = words[rng() % words.size()];
        if (w == 0) word[0] = static_cast<char>(std::toupper(word[0]));
        s += word;
      }
    }
    s += ends[rng() % ends.size()];
    out.push_back(s);
  }
  return out;
}

TinyModelSummary write_tiny_model(const std::filesystem::path& out, const TinyModelOptions& options) {
  std::filesystem::path out_dir = out.lexically_normal();
  if (out_dir.filename().empty()) out_dir = out_dir.parent_path();  // "dir/" -> "dir"
  const Preset* preset = nullptr;
  for (const auto& p : presets())
    if (p.name == options.preset) preset = &p;
  if (!preset) {
    std::string names;
    for (const auto& n : tiny_model_presets()) names += (names.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown preset '" + options.preset + "' (expected one of " + names + ")");
  }
  if (std::filesystem::exists(out_dir) && !std::filesystem::is_empty(out_dir))
    throw std::invalid_argument(out_dir.string() + ": exists and is not empty; choose a new folder");

  const int64_t vocab = options.vocab_size > 0 ? options.vocab_size : preset->llama32 ? 8192 : preset->vocab;
  // Tokenizer and weights are assembled in a hidden staging folder that then
  // replaces out_dir in one rename, as checkpoints are.
  common::remove_stale_siblings(out_dir);
  const auto tmp = common::staging_path(out_dir);
  const auto tok_dir = tmp / "tokenizer";
  common::remove_tree(tmp);
  std::filesystem::create_directories(tok_dir);

  // Tokenizer first: its real vocabulary size (hard_vocab_limit is off) sizes the model.
  std::vector<std::string> corpus =
      options.corpus.empty() ? builtin_corpus(20000, options.seed) : read_corpus(options.corpus);
  TokenizerBuildOptions tok;
  tok.vocab_size = vocab;
  tok.chat_template = kChatTemplate;
  build_tokenizer(corpus, tok_dir, tok);
  nlohmann::json tok_json = nlohmann::json::parse(std::ifstream(tok_dir / "tokenizer.json"));
  const int64_t real_vocab = static_cast<int64_t>(tok_json["model"]["vocab"].size());

  nlohmann::json cfg = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", real_vocab},
      {"hidden_size", preset->hidden},
      {"intermediate_size", preset->intermediate},
      {"num_hidden_layers", preset->layers},
      {"num_attention_heads", preset->heads},
      {"num_key_value_heads", preset->kv_heads},
      {"head_dim", preset->hidden / preset->heads},
      {"max_position_embeddings", 2048},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"hidden_act", "silu"},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", false},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"bos_token_id", kBosId},
      {"eos_token_id", kEosId},
      {"pad_token_id", kPadId},
      {"torch_dtype", "float32"},
  };
  at::ScalarType dtype = at::kFloat;
  if (preset->llama32) {
    cfg["vocab_size"] = preset->vocab;
    cfg["max_position_embeddings"] = 131072;
    cfg["tie_word_embeddings"] = true;
    cfg["rope_theta"] = 500000.0;
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    cfg["torch_dtype"] = "bfloat16";
    dtype = at::kBFloat16;
  }
  const models::ModelConfig config = models::parse_model_config(cfg, "fptrain init (" + preset->name + ")");
  models::TensorMap params = models::init_parameters(config, options.seed, dtype);
  const auto model_dir = tmp / "model";
  models::save_pretrained(model_dir, config, params, dtype);
  for (const auto& entry : std::filesystem::directory_iterator(tok_dir))
    std::filesystem::rename(entry.path(), model_dir / entry.path().filename());
  if (std::filesystem::exists(out_dir)) common::remove_tree(out_dir);  // empty (checked above)
  common::replace_folder(model_dir, out_dir);
  common::remove_tree(tmp);

  TinyModelSummary s;
  s.num_parameters = config.num_parameters();
  s.vocab_size = config.vocab_size;
  s.description = std::to_string(preset->layers) + " layers, hidden " + std::to_string(preset->hidden) + ", " +
                  std::to_string(preset->heads) + " heads (" + std::to_string(preset->kv_heads) +
                  " key/value), vocabulary " + std::to_string(config.vocab_size) +
                  (config.vocab_size != real_vocab ? " (tokenizer " + std::to_string(real_vocab) + ")" : "");
  return s;
}

}  // namespace fptrain::app
