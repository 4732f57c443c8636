#include "jinja/objects.h"

#include "jinja/args.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/printing.h"

namespace fptrain::jinja {

Value bound_method(const Value& self, std::string name) {
  return Value::object(std::make_shared<BoundMethod>(self, std::move(name)));
}

// ---- Namespace ----------------------------------------------------------------

std::string Namespace::repr() const {
  DictData copy = attrs_;
  return "<Namespace " + jinja::repr(Value::dict(std::move(copy))) + ">";
}

std::optional<Value> Namespace::attribute(std::string_view name) const {
  if (const Value* v = attrs_.find(name)) return *v;
  return std::nullopt;
}

void Namespace::set(const std::string& name, Value value) {
  if (!name.empty() && name[0] == '_')
    fail(Error::Kind::kSecurity, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                                     name + "'. Please rename the attribute.");
  attrs_.set(Value::string(name), std::move(value));
}

// ---- LoopObject ---------------------------------------------------------------

std::string LoopObject::repr() const {
  return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items_.size()) + ">";
}

std::optional<Value> LoopObject::attribute(std::string_view name) const {
  const auto n = static_cast<int64_t>(items_.size());
  const auto i = static_cast<int64_t>(index0);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i + 1 >= n);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(depth0_ + 1);
  if (name == "depth0") return Value::integer(depth0_);
  if (name == "previtem") {
    if (i == 0) return Value::undefined("there is no previous item");
    return items_[index0 - 1];
  }
  if (name == "nextitem") {
    if (i + 1 >= n) return Value::undefined("there is no next item");
    return items_[index0 + 1];
  }
  if (name == "cycle" || name == "changed") return bound_method(self(), std::string(name));
  return std::nullopt;
}

Value LoopObject::call(Interpreter& interp, CallArgs& args) {
  if (stmt_ == nullptr) type_error("The loop must have the 'recursive' marker to be called recursively.");
  BoundArgs a("loop", args, {"iterable"}, 1);
  return interp.recurse_loop(*stmt_, scope_, a[0], depth0_ + 1);
}

Value LoopObject::call_method(Interpreter&, const std::string& name, CallArgs& args) {
  no_keywords(name.c_str(), args);
  if (name == "cycle") {
    if (args.positional.empty()) type_error("no items for cycling given");
    return args.positional[index0 % args.positional.size()];
  }
  // changed(*values): true when the values differ from the previous call's.
  const std::vector<Value>& now = args.positional;
  bool same = last_changed_.has_value() && last_changed_->size() == now.size();
  for (size_t k = 0; same && k < now.size(); ++k) same = py_equal((*last_changed_)[k], now[k]);
  if (same) return Value::boolean(false);
  last_changed_ = now;
  return Value::boolean(true);
}

// ---- MacroObject --------------------------------------------------------------

std::optional<Value> MacroObject::attribute(std::string_view name) const {
  if (name == "name") return Value::string(def_->name);
  if (name == "arguments") {
    std::vector<Value> params;
    for (const std::string& p : def_->params) params.push_back(Value::string(p));
    return Value::tuple(std::move(params));
  }
  if (name == "catch_kwargs") return Value::boolean(def_->uses_kwargs);
  if (name == "catch_varargs") return Value::boolean(def_->uses_varargs);
  if (name == "caller") return Value::boolean(def_->uses_caller);
  return std::nullopt;
}

// ---- BoundMethod --------------------------------------------------------------

std::string BoundMethod::repr() const {
  return "<built-in method " + name_ + " of " + jinja::type_name(self_) + " object>";
}

Value BoundMethod::call(Interpreter& interp, CallArgs& args) {
  if (self_.is_object()) return self_.object().call_method(interp, name_, args);
  return jinja::call_method(interp, self_, name_, args);
}

// ---- Cycler, Joiner -----------------------------------------------------------

std::optional<Value> Cycler::attribute(std::string_view name) const {
  if (name == "items") return Value::tuple(items_);
  if (name == "pos") return Value::integer(static_cast<int64_t>(pos_));
  if (name == "current") return items_.empty() ? Value() : items_[pos_];
  if (name == "next" || name == "reset") return bound_method(self(), std::string(name));
  return std::nullopt;
}

Value Cycler::call_method(Interpreter&, const std::string& name, CallArgs& args) {
  BoundArgs a(name.c_str(), args, {});
  if (name == "reset") {
    pos_ = 0;
    return Value::none();
  }
  if (items_.empty()) runtime_error("the cycler was cleared");
  Value v = items_[pos_];
  pos_ = (pos_ + 1) % items_.size();
  return v;
}

std::optional<Value> Joiner::attribute(std::string_view name) const {
  if (name == "sep") return sep_;
  if (name == "used") return Value::boolean(used_);
  return std::nullopt;
}

Value Joiner::call(Interpreter&, CallArgs& args) {
  BoundArgs a("joiner", args, {});
  if (!used_) {
    used_ = true;
    return Value::string("");
  }
  return sep_;
}

}  // namespace fptrain::jinja
