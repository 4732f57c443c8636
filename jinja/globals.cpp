#include "jinja/globals.h"

#include <ctime>

#include "jinja/args.h"
#include "jinja/objects.h"
#include "jinja/printing.h"

namespace fptrain::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE

Value range(Interpreter&, CallArgs& args) {
  no_keywords("range", args);
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) type_error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  for (const Value& v : p)
    if (!v.is_integral()) type_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) runtime_error("range() arg 3 must not be zero");
  int64_t n = 0;
  if (step > 0 && start < stop) n = (stop - start - 1) / step + 1;
  if (step < 0 && start > stop) n = (start - stop - 1) / (-step) + 1;
  if (n > kMaxRange)
    runtime_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

// Python's dict(*args, **kwargs).
DictData make_dict(const CallArgs& args, const char* name) {
  if (args.positional.size() > 1) type_error(std::string(name) + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
  DictData d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      for (const Value& pair : iterate(src)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) runtime_error("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(Value::string(k), v);
  return d;
}

// transformers' TemplateDict: callable as dict(...), and dict.fromkeys(keys, value=None).
class DictFunction : public BuiltinFunction {
 public:
  DictFunction() : BuiltinFunction("dict", [](Interpreter&, CallArgs& args) { return Value::dict(make_dict(args, "dict")); }) {}
  std::optional<Value> attribute(std::string_view name) const override {
    if (name == "fromkeys") return bound_method(self(), "fromkeys");
    return std::nullopt;
  }
  Value call_method(Interpreter&, const std::string& name, CallArgs& args) override {
    BoundArgs a(name.c_str(), args, {"iterable", "value"}, 1);
    DictData d;
    for (const Value& k : iterate(a[0])) d.set(k, a.get(1, Value::none()));
    return Value::dict(std::move(d));
  }
};

Value namespace_(Interpreter& interp, CallArgs& args) {
  DictData attrs = make_dict(args, "namespace");
  for (const auto& kv : attrs.items())
    if (kv.first.is_str() && !kv.first.text().empty() && kv.first.text()[0] == '_')
      fail(Error::Kind::kSecurity, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                                       kv.first.text() + "'. Please rename the attribute.");
  auto ns = std::make_shared<Namespace>(std::move(attrs));
  interp.track(ns);
  return Value::object(std::move(ns));
}

Value cycler(Interpreter& interp, CallArgs& args) {
  no_keywords("cycler", args);
  if (args.positional.empty()) runtime_error("at least one item has to be provided");
  auto c = std::make_shared<Cycler>(args.positional);
  interp.track(c);
  return Value::object(std::move(c));
}

Value joiner(Interpreter&, CallArgs& args) {
  BoundArgs a("joiner", args, {"sep"});
  return Value::object(std::make_shared<Joiner>(a.get(0, Value::string(", "))));
}

Value raise_exception(Interpreter&, CallArgs& args) {
  BoundArgs a("raise_exception", args, {"message"}, 1);
  fail(Error::Kind::kRaised, to_str(a[0]).text());
}

Value strftime_now(Interpreter& interp, CallArgs& args) {
  BoundArgs a("strftime_now", args, {"format"}, 1);
  if (!a[0].is_str()) type_error("strftime() argument 1 must be str, not " + type_name(a[0]));
  const std::string& format = a[0].text();
  if (format.empty()) return Value::string("");
  const std::tm now = interp.now();
  // strftime returns 0 both for "too small" and for an empty result; grow a few times, then accept empty.
  for (size_t size = 256; size <= 65536; size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &now);
    if (n > 0) {
      buf.resize(n);
      return Value::string(std::move(buf));
    }
  }
  return Value::string("");
}

void add(Scope& scope, const char* name, BuiltinFunction::Fn fn) {
  scope.set(name, Value::object(std::make_shared<BuiltinFunction>(name, std::move(fn))));
}

}  // namespace

void add_globals(Scope& scope) {
  add(scope, "range", range);
  scope.set("dict", Value::object(std::make_shared<DictFunction>()));
  add(scope, "namespace", namespace_);
  add(scope, "cycler", cycler);
  add(scope, "joiner", joiner);
  add(scope, "raise_exception", raise_exception);
  add(scope, "strftime_now", strftime_now);
}

}  // namespace fptrain::jinja
