#include "jinja/access.h"

#include "jinja/methods.h"
#include "jinja/objects.h"
#include "jinja/printing.h"
#include "jinja/str_ops.h"

namespace fptrain::jinja {

namespace {

// jinja2's object_type_repr: how the undefined message names the object.
std::string object_description(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attribute(const Value& object, const std::string& name) {
  return Value::undefined("'" + object_description(object) + "' has no attribute '" + name + "'");
}

Value unsafe(const Value& object, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(object) + "' object is unsafe.", true);
}

// The Python attribute `name` of `object`, if it has one.
std::optional<Value> python_attribute(const Value& object, const std::string& name) {
  if (name.size() > 4 && name.compare(0, 2, "__") == 0 && name.compare(name.size() - 2, 2, "__") == 0)
    return unsafe(object, name);  // dunder attributes exist on everything and are never safe
  if (object.is_object()) return object.object().attribute(name);
  switch (method_kind(object, name)) {
    case MethodKind::kSafe: return bound_method(object, name);
    case MethodKind::kUnsafe: return unsafe(object, name);
    case MethodKind::kNone: break;
  }
  return std::nullopt;
}

std::optional<Value> item(const Value& object, const Value& key) {
  switch (object.type()) {
    case Type::kDict: {
      if (key.is_dict() || (key.is_list() && key.seq_kind() != SeqKind::kTuple)) return std::nullopt;  // unhashable
      if (const Value* v = object.dict().find(key)) return *v;
      return std::nullopt;
    }
    case Type::kList: {
      if (!key.is_integral() || object.seq_kind() > SeqKind::kTuple) return std::nullopt;
      const auto& items = object.items();
      int64_t i = key.as_int();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) return std::nullopt;
      return items[static_cast<size_t>(i)];
    }
    case Type::kStr: {
      if (!key.is_integral()) return std::nullopt;
      if (auto c = py_char_at(object.str_data(), key.as_int())) return Value::string(std::move(*c));
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

}  // namespace

Value get_attr(const Value& object, const std::string& name) {
  if (object.is_undefined()) object.raise_undefined();
  if (auto v = python_attribute(object, name)) return *v;
  if (auto v = item(object, Value::string(name))) return *v;
  return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) object.raise_undefined();
  if (auto v = item(object, key)) return *v;
  if (key.is_str()) {
    if (auto v = python_attribute(object, key.text())) return *v;
    return missing_attribute(object, key.text());
  }
  return Value::undefined(object_description(object) + " has no element " + repr(key));
}

Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step) {
  if (object.is_undefined()) object.raise_undefined();
  std::optional<int64_t> bounds[3];
  const Value* parts[3] = {start, stop, step};
  for (int k = 0; k < 3; ++k) {
    if (parts[k] == nullptr || parts[k]->is_none()) continue;
    if (!parts[k]->is_integral()) type_error("slice indices must be integers or None or have an __index__ method");
    bounds[k] = parts[k]->as_int();
  }
  if (bounds[2] && *bounds[2] == 0) runtime_error("slice step cannot be zero");
  if (object.is_str()) return Value::string(py_slice_str(object.str_data(), bounds[0], bounds[1], bounds[2]));
  if (object.is_list() && object.seq_kind() <= SeqKind::kTuple) {
    const auto& items = object.items();
    int64_t first = 0;
    const int64_t st = bounds[2].value_or(1);
    const int64_t n = slice_indices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], st, first);
    std::vector<Value> out;
    for (int64_t k = 0, i = first; k < n; ++k, i += st) out.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), object.seq_kind());
  }
  // jinja2 compiles x[a:b] to plain Python slicing, so (unlike x[k]) a failure is an error.
  if (object.is_dict()) type_error("unhashable type: 'slice'");
  type_error("'" + type_name(object) + "' object is not subscriptable");
}

}  // namespace fptrain::jinja
