// The objects templates can hold besides plain data: namespaces, the loop
// variable, macros, bound methods ("a b".split), built-in functions, and
// jinja2's cycler and joiner.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jinja/interpreter.h"
#include "jinja/value.h"

namespace fptrain::jinja {

// namespace(...): the one mutable container, written with {% set ns.attr = v %}.
class Namespace : public Object {
 public:
  explicit Namespace(DictData attrs) : attrs_(std::move(attrs)) {}
  std::string type_name() const override { return "Namespace"; }
  std::string repr() const override;
  std::optional<Value> attribute(std::string_view name) const override;
  // transformers' TemplateNamespace refuses underscore names (SecurityError).
  void set(const std::string& name, Value value);
  void clear() override { attrs_ = DictData(); }

 private:
  DictData attrs_;
};

// The `loop` variable of a for loop. One object per loop, updated as it iterates.
class LoopObject : public Object {
 public:
  LoopObject(std::vector<Value> items, int depth0, const ForStmt* recursive_stmt, ScopePtr scope)
      : items_(std::move(items)), depth0_(depth0), stmt_(recursive_stmt), scope_(std::move(scope)) {}
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override;
  std::optional<Value> attribute(std::string_view name) const override;
  std::optional<int64_t> length() const override { return static_cast<int64_t>(items_.size()); }
  bool callable() const override { return true; }
  Value call(Interpreter& interp, CallArgs& args) override;  // loop(children) in a recursive loop
  Value call_method(Interpreter& interp, const std::string& name, CallArgs& args) override;
  void clear() override { last_changed_.reset(); }

  const std::vector<Value>& items() const { return items_; }
  size_t index0 = 0;

 private:
  std::vector<Value> items_;
  int depth0_;
  const ForStmt* stmt_;  // null unless the loop is `recursive`
  ScopePtr scope_;
  std::optional<std::vector<Value>> last_changed_;
};

// A macro, a call block's caller, bound to the scope it was defined in.
class MacroObject : public Object {
 public:
  MacroObject(const MacroDef* def, ScopePtr closure) : def_(def), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro '" + def_->name + "'>"; }
  std::optional<Value> attribute(std::string_view name) const override;
  bool callable() const override { return true; }
  Value call(Interpreter& interp, CallArgs& args) override { return interp.call_macro(*def_, closure_, args); }

 private:
  const MacroDef* def_;
  ScopePtr closure_;
};

// A method taken from a value: "a,b".split, messages.index, loop.cycle...
class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override;
  bool callable() const override { return true; }
  Value call(Interpreter& interp, CallArgs& args) override;

 private:
  Value self_;
  std::string name_;
};

class BuiltinFunction : public Object {
 public:
  using Fn = std::function<Value(Interpreter&, CallArgs&)>;
  BuiltinFunction(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(Interpreter& interp, CallArgs& args) override { return fn_(interp, args); }

 private:
  std::string name_;
  Fn fn_;
};

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  std::optional<Value> attribute(std::string_view name) const override;
  Value call_method(Interpreter& interp, const std::string& name, CallArgs& args) override;
  void clear() override { items_.clear(); }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

class Joiner : public Object {
 public:
  explicit Joiner(Value sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  std::optional<Value> attribute(std::string_view name) const override;
  bool callable() const override { return true; }
  Value call(Interpreter& interp, CallArgs& args) override;

 private:
  Value sep_;
  bool used_ = false;
};

// A bound method value for `name` on `self`.
Value bound_method(const Value& self, std::string name);

}  // namespace fptrain::jinja
