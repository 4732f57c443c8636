// Binds call arguments to a Python-style signature for filters, tests,
// methods and built-in functions: positional then keyword, with the errors
// Python gives for too many, unknown, duplicate or missing arguments.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace fptrain::jinja {

class BoundArgs {
 public:
  // `names`: the parameters after the receiver; the first `required` must be given.
  BoundArgs(const char* function, const CallArgs& args, std::initializer_list<const char*> names, size_t required = 0)
      : values_(names.size()), given_(names.size(), false) {
    const std::vector<const char*> params(names);
    if (args.positional.size() > params.size())
      type_error(std::string(function) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                 std::to_string(args.positional.size()) + " given)");
    for (size_t i = 0; i < args.positional.size(); ++i) {
      values_[i] = args.positional[i];
      given_[i] = true;
    }
    for (const auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < params.size() && key != params[i]) ++i;
      if (i == params.size()) type_error(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
      if (given_[i]) type_error(std::string(function) + "() got multiple values for argument '" + key + "'");
      values_[i] = value;
      given_[i] = true;
    }
    for (size_t i = 0; i < required; ++i)
      if (!given_[i]) type_error(std::string(function) + "() missing required argument '" + params[i] + "'");
  }

  bool has(size_t i) const { return given_[i]; }
  const Value& operator[](size_t i) const { return values_[i]; }
  // The argument, or `fallback` when it was not given.
  Value get(size_t i, Value fallback) const { return given_[i] ? values_[i] : std::move(fallback); }

 private:
  std::vector<Value> values_;
  std::vector<bool> given_;
};

// For functions that take no keyword arguments at all.
inline void no_keywords(const char* function, const CallArgs& args) {
  if (!args.keyword.empty()) type_error(std::string(function) + "() takes no keyword arguments");
}

}  // namespace fptrain::jinja
