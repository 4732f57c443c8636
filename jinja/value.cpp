#include "jinja/value.h"

#include <algorithm>

#include "jinja/utf8.h"

namespace fptrain::jinja {

void fail(Error::Kind kind, std::string message) { throw Error(kind, std::move(message)); }

void check_size(double bytes) {
  if (bytes > static_cast<double>(kMaxBuiltString))
    fail(Error::Kind::kRuntime, "result too large (more than " + std::to_string(kMaxBuiltString >> 20) + " MiB)");
}

Value Value::undefined(std::string hint, bool unsafe) {
  Value v;
  v.ref_ = std::make_shared<UndefinedData>(UndefinedData{std::move(hint), unsafe});
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.u_.b = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.u_.i = i;
  return v;
}

Value Value::number(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.u_.f = f;
  return v;
}

Value Value::string(TaggedString s, bool markup) {
  check_size(static_cast<double>(s.size()));
  Value v;
  v.type_ = Type::kStr;
  const bool ascii = utf8::is_ascii(s.text());
  v.ref_ = std::make_shared<StrData>(StrData{std::move(s), markup, ascii});
  return v;
}

namespace {

int depth_of_items(const std::vector<Value>& items) {
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, nesting_depth(item));
  if (deepest + 1 > kMaxValueDepth)
    runtime_error("lists or dicts nested more than " + std::to_string(kMaxValueDepth) + " deep");
  return deepest + 1;
}

}  // namespace

int nesting_depth(const Value& v) {
  switch (v.type()) {
    case Type::kList: return v.list().depth;
    case Type::kDict: return v.dict().depth();
    case Type::kIterator: return v.iter().depth;
    default: return 0;
  }
}

Value Value::list(std::vector<Value> items, SeqKind kind) {
  Value v;
  v.type_ = Type::kList;
  const int depth = depth_of_items(items);
  v.ref_ = std::make_shared<ListData>(ListData{kind, std::move(items), depth});
  return v;
}

Value Value::dict(DictData d) {
  Value v;
  v.type_ = Type::kDict;
  v.ref_ = std::make_shared<DictData>(std::move(d));
  return v;
}

Value Value::iterator(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kIterator;
  const int depth = depth_of_items(items);
  v.ref_ = std::make_shared<IteratorData>(IteratorData{std::move(items), 0, depth});
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.type_ = Type::kObject;
  v.ref_ = std::move(o);
  return v;
}

double Value::as_float() const {
  switch (type_) {
    case Type::kFloat: return u_.f;
    case Type::kInt: return static_cast<double>(u_.i);
    case Type::kBool: return u_.b ? 1.0 : 0.0;
    default: return 0.0;
  }
}

void Value::raise_undefined() const {
  const UndefinedData* d = undefined_data();
  if (d == nullptr) fail(Error::Kind::kUndefined, "value is undefined");
  fail(d->unsafe ? Error::Kind::kSecurity : Error::Kind::kUndefined, d->hint);
}

Value Object::call(Interpreter&, CallArgs&) { type_error("'" + type_name() + "' object is not callable"); }

Value Object::self() const {
  return Value::object(std::const_pointer_cast<Object>(shared_from_this()));
}

Value Object::call_method(Interpreter&, const std::string& name, CallArgs&) {
  type_error("'" + type_name() + "' object has no method '" + name + "'");
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kStr: return v.is_markup() ? "Markup" : "str";
    case Type::kList:
      switch (v.seq_kind()) {
        case SeqKind::kList: return "list";
        case SeqKind::kTuple: return "tuple";
        case SeqKind::kDictItems: return "dict_items";
        case SeqKind::kDictKeys: return "dict_keys";
        case SeqKind::kDictValues: return "dict_values";
      }
      return "list";
    case Type::kDict: return "dict";
    case Type::kIterator: return "generator";
    case Type::kObject: return v.object().type_name();
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return v.as_bool();
    case Type::kInt: return v.as_int() != 0;
    case Type::kFloat: return v.as_float() != 0.0;
    case Type::kStr: return !v.text().empty();
    case Type::kList: return !v.items().empty();
    case Type::kDict: return v.dict().size() != 0;
    case Type::kIterator: return true;
    case Type::kObject: return v.object().truthy();
  }
  return false;
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return 0;
    case Type::kStr: {
      const StrData& s = v.str_data();
      return static_cast<int64_t>(s.ascii ? s.s.size() : utf8::length(s.s.text()));
    }
    case Type::kList: return static_cast<int64_t>(v.items().size());
    case Type::kDict: return static_cast<int64_t>(v.dict().size());
    case Type::kObject:
      if (auto n = v.object().length()) return *n;
      break;
    default: break;
  }
  type_error("object of type '" + type_name(v) + "' has no len()");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return {};
    case Type::kList: return v.items();
    case Type::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& kv : v.dict().items()) keys.push_back(kv.first);
      return keys;
    }
    case Type::kStr: {
      const TaggedString& s = v.str();
      std::vector<Value> chars;
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        utf8::decode(s.text(), i);
        chars.push_back(Value::string(s.substr(start, i - start)));
      }
      return chars;
    }
    case Type::kIterator: {
      IteratorData& it = v.iter();
      std::vector<Value> rest(it.items.begin() + static_cast<std::ptrdiff_t>(it.pos), it.items.end());
      it.pos = it.items.size();
      return rest;
    }
    default: break;
  }
  type_error("'" + type_name(v) + "' object is not iterable");
}

// ---- dict ---------------------------------------------------------------------

namespace {

constexpr size_t kIndexThreshold = 8;

void check_hashable(const Value& key) {
  if (key.is_dict() || (key.is_list() && key.seq_kind() != SeqKind::kTuple))
    type_error("unhashable type: '" + type_name(key) + "'");
  if (key.is_list())
    for (const Value& item : key.items()) check_hashable(item);
}

// Python equality restricted to hashable keys.
bool keys_equal(const Value& a, const Value& b) {
  if (a.is_str() || b.is_str()) return a.is_str() && b.is_str() && a.text() == b.text();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kNone:
    case Type::kUndefined: return true;
    case Type::kList: {
      if (a.seq_kind() != b.seq_kind() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!keys_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    default: return a.ref() == b.ref();
  }
}

}  // namespace

size_t DictData::index_of(std::string_view key) const {
  if (items_.size() >= kIndexThreshold) {
    auto it = str_index_.find(std::string(key));
    return it == str_index_.end() ? kMissing : it->second;
  }
  for (size_t i = 0; i < items_.size(); ++i)
    if (items_[i].first.is_str() && items_[i].first.text() == key) return i;
  return kMissing;
}

const Value* DictData::find(std::string_view key) const {
  const size_t i = index_of(key);
  return i == kMissing ? nullptr : &items_[i].second;
}

const Value* DictData::find(const Value& key) const {
  check_hashable(key);
  if (key.is_str()) return find(std::string_view(key.text()));
  for (const auto& kv : items_)
    if (keys_equal(kv.first, key)) return &kv.second;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  check_hashable(key);
  const int depth = std::max(nesting_depth(key), nesting_depth(value)) + 1;
  if (depth > kMaxValueDepth)
    runtime_error("lists or dicts nested more than " + std::to_string(kMaxValueDepth) + " deep");
  depth_ = std::max(depth_, depth);
  if (key.is_str()) {
    // A str key only ever equals another str key.
    const size_t i = index_of(key.text());
    if (i != kMissing) {
      items_[i].second = std::move(value);
      return;
    }
  } else {
    for (auto& kv : items_) {
      if (keys_equal(kv.first, key)) {
        kv.second = std::move(value);
        return;
      }
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() == kIndexThreshold) {
    for (size_t i = 0; i < items_.size(); ++i)
      if (items_[i].first.is_str()) str_index_.emplace(items_[i].first.text(), i);
  } else if (items_.size() > kIndexThreshold && items_.back().first.is_str()) {
    str_index_.emplace(items_.back().first.text(), items_.size() - 1);
  }
}

}  // namespace fptrain::jinja
