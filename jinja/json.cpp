#include "jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/printing.h"
#include "jinja/utf8.h"

namespace fptrain::jinja {

// ---- in -----------------------------------------------------------------------

namespace {

class FromJson {
 public:
  explicit FromJson(const std::map<std::string, int32_t>& tags) : tags_(tags) {}

  Value convert(const nlohmann::ordered_json& j, int32_t tag, int depth) {
    if (depth > kMaxValueDepth) runtime_error("context value nested too deeply");
    if (!tags_.empty()) {
      auto it = tags_.find(path_);
      if (it != tags_.end()) tag = it->second;
    }
    switch (j.type()) {
      case nlohmann::ordered_json::value_t::null: return Value::none();
      case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
      case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
      case nlohmann::ordered_json::value_t::number_unsigned: {
        const uint64_t u = j.get<uint64_t>();
        if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
        return Value::number(static_cast<double>(u));
      }
      case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
      case nlohmann::ordered_json::value_t::string:
        return Value::string(TaggedString(j.get<std::string>(), tag));
      case nlohmann::ordered_json::value_t::array: {
        std::vector<Value> items;
        items.reserve(j.size());
        for (size_t i = 0; i < j.size(); ++i) {
          const size_t mark = enter(std::to_string(i));
          items.push_back(convert(j[i], tag, depth + 1));
          path_.resize(mark);
        }
        return Value::list(std::move(items));
      }
      case nlohmann::ordered_json::value_t::object: {
        DictData d;
        for (auto it = j.begin(); it != j.end(); ++it) {
          const size_t mark = enter(it.key());
          Value v = convert(it.value(), tag, depth + 1);
          path_.resize(mark);
          d.set(Value::string(it.key()), std::move(v));
        }
        return Value::dict(std::move(d));
      }
      default: return Value::none();  // binary and discarded values have no Python counterpart
    }
  }

 private:
  // Appends "/token" (RFC 6901 escaped) to the path; returns the length to restore.
  size_t enter(const std::string& token) {
    const size_t mark = path_.size();
    if (tags_.empty()) return mark;
    path_ += '/';
    for (char c : token) {
      if (c == '~')
        path_ += "~0";
      else if (c == '/')
        path_ += "~1";
      else
        path_ += c;
    }
    return mark;
  }

  const std::map<std::string, int32_t>& tags_;
  std::string path_;
};

}  // namespace

Value from_json(const nlohmann::ordered_json& json, const std::map<std::string, int32_t>& tags) {
  return FromJson(tags).convert(json, kNoTag, 0);
}

// ---- out ----------------------------------------------------------------------

namespace {

void append_json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = utf8::decode(s, i);
    char buf[16];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {  // a surrogate pair, as Python writes it
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                      static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

class ToJson {
 public:
  explicit ToJson(const JsonOptions& o) : o_(o) {
    item_sep_ = o.item_separator ? *o.item_separator : (o.indent ? "," : ", ");
    key_sep_ = o.key_separator ? *o.key_separator : ": ";
  }

  void write(const Value& v, int level) {
    if (level > kMaxValueDepth) runtime_error("value nested too deeply for tojson");
    switch (v.type()) {
      case Type::kNone: out += "null"; return;
      case Type::kBool: out += v.as_bool() ? "true" : "false"; return;
      case Type::kInt: out += std::to_string(v.as_int()); return;
      case Type::kFloat: out += json_float(v.as_float()); return;
      case Type::kStr: append_json_string(v.text(), o_.ensure_ascii, out); return;
      case Type::kList:
        if (v.seq_kind() == SeqKind::kList || v.seq_kind() == SeqKind::kTuple) return write_list(v, level);
        break;
      case Type::kDict: return write_dict(v, level);
      default: break;
    }
    type_error("Object of type " + type_name(v) + " is not JSON serializable");
  }

  std::string out;

 private:
  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }

  void write_list(const Value& v, int level) {
    if (v.items().empty()) {
      out += "[]";
      return;
    }
    out += '[';
    if (o_.indent) newline(level + 1);
    for (size_t i = 0; i < v.items().size(); ++i) {
      if (i) {
        out += item_sep_;
        if (o_.indent) newline(level + 1);
      }
      write(v.items()[i], level + 1);
    }
    if (o_.indent) newline(level);
    out += ']';
  }

  static std::string key_text(const Value& k) {
    switch (k.type()) {
      case Type::kStr: return k.text();
      case Type::kFloat: return json_float(k.as_float());
      case Type::kBool: return k.as_bool() ? "true" : "false";
      case Type::kNone: return "null";
      case Type::kInt: return std::to_string(k.as_int());
      default: type_error("keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  void write_dict(const Value& v, int level) {
    if (v.dict().size() == 0) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : v.dict().items()) items.push_back(&kv);
    if (o_.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
        const Value& x = a->first;
        const Value& y = b->first;
        if (x.is_str() && y.is_str()) return x.text() < y.text();
        if (x.is_number() && y.is_number()) return x.as_float() < y.as_float();
        type_error("'<' not supported between instances of '" + type_name(y) + "' and '" + type_name(x) + "'");
      });
    }
    out += '{';
    if (o_.indent) newline(level + 1);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) {
        out += item_sep_;
        if (o_.indent) newline(level + 1);
      }
      append_json_string(key_text(items[i]->first), o_.ensure_ascii, out);
      out += key_sep_;
      write(items[i]->second, level + 1);
    }
    if (o_.indent) newline(level);
    out += '}';
  }

  const JsonOptions& o_;
  std::string item_sep_, key_sep_;
};

}  // namespace

std::string to_json(const Value& value, const JsonOptions& options) {
  ToJson writer(options);
  writer.write(value, 0);
  return std::move(writer.out);
}

}  // namespace fptrain::jinja
