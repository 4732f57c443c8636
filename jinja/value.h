// The value model: what Python objects look like inside the interpreter.
// Values are cheap to copy (scalars inline, everything else shared). Lists,
// dicts and strings are immutable once built, as the sandbox guarantees for
// templates; namespaces, loops, cyclers and generators are the only mutable
// objects and live behind Object / IteratorData.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jinja/error.h"
#include "jinja/tagged_string.h"

namespace fptrain::jinja {

class Interpreter;
class Object;
class Value;

// Lists and dicts nest at most this deep (building a deeper one is an error), so
// that printing, comparing or freeing them cannot overflow the stack. Namespaces
// can still nest deeper; printing and comparing count those levels too.
inline constexpr int kMaxValueDepth = 512;

enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kStr, kList, kDict, kIterator, kObject };

// Lists, tuples and dict views share one representation; the kind decides
// how they print, compare and which methods they have.
enum class SeqKind : uint8_t { kList, kTuple, kDictItems, kDictKeys, kDictValues };

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct StrData {
  TaggedString s;
  bool markup = false;  // markupsafe.Markup: "+" escapes the other operand, |e leaves it alone
  bool ascii = true;    // lets indexing and len() skip decoding
};

struct ListData {
  SeqKind kind = SeqKind::kList;
  std::vector<Value> items;
  int depth = 1;  // 1 + the deepest list / dict / generator inside
};

// An insertion-ordered dict with Python key equality (1 == 1.0 == True).
class DictData {
 public:
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or replaces (keeping the first position), as Python's d[k] = v. Throws for unhashable keys.
  void set(Value key, Value value);
  int depth() const { return depth_; }

 private:
  static constexpr size_t kMissing = static_cast<size_t>(-1);
  size_t index_of(std::string_view key) const;  // of a str key

  std::vector<std::pair<Value, Value>> items_;
  int depth_ = 1;
  std::unordered_map<std::string, size_t> str_index_;  // built once the dict grows
};

// A one-shot iterator (what select, map, reverse... return in Python):
// always truthy, no len(), consumed by iteration.
struct IteratorData {
  std::vector<Value> items;
  size_t pos = 0;
  int depth = 1;
};

struct UndefinedData {
  std::string hint;     // the UndefinedError message when it is used
  bool unsafe = false;  // the sandbox's unsafe attribute: using it is a SecurityError
};

class Value {
 public:
  Value() = default;  // undefined, with no hint
  static Value undefined(std::string hint, bool unsafe = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(TaggedString s, bool markup = false);
  static Value string(std::string s) { return string(TaggedString(std::move(s))); }
  static Value list(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  static Value tuple(std::vector<Value> items) { return list(std::move(items), SeqKind::kTuple); }
  static Value dict(DictData d);
  static Value iterator(std::vector<Value> items);
  static Value object(std::shared_ptr<Object> o);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kBool || type_ == Type::kInt || type_ == Type::kFloat; }
  bool is_integral() const { return type_ == Type::kBool || type_ == Type::kInt; }  // usable as an index
  bool is_str() const { return type_ == Type::kStr; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_iterator() const { return type_ == Type::kIterator; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return u_.b; }
  int64_t as_int() const { return type_ == Type::kBool ? (u_.b ? 1 : 0) : u_.i; }  // bool or int
  double as_float() const;                                                      // any number
  const StrData& str_data() const { return *static_cast<const StrData*>(ref_.get()); }
  const TaggedString& str() const { return str_data().s; }
  const std::string& text() const { return str_data().s.text(); }
  bool is_markup() const { return is_str() && str_data().markup; }
  const ListData& list() const { return *static_cast<const ListData*>(ref_.get()); }
  const std::vector<Value>& items() const { return list().items; }
  SeqKind seq_kind() const { return list().kind; }
  const DictData& dict() const { return *static_cast<const DictData*>(ref_.get()); }
  IteratorData& iter() const { return *static_cast<IteratorData*>(ref_.get()); }
  Object& object() const { return *static_cast<Object*>(ref_.get()); }
  const std::shared_ptr<void>& ref() const { return ref_; }
  const UndefinedData* undefined_data() const { return static_cast<const UndefinedData*>(ref_.get()); }
  // The message of the UndefinedError (or SecurityError) that using this undefined raises.
  [[noreturn]] void raise_undefined() const;

 private:
  Type type_ = Type::kUndefined;
  union {
    bool b;
    int64_t i;
    double f;
  } u_{};
  std::shared_ptr<void> ref_;
};

// How deeply lists, dicts and generators nest inside v (0 for anything else).
int nesting_depth(const Value& v);

// Python's type(x).__name__, for error messages.
std::string type_name(const Value& v);
// Python's bool(x).
bool truthy(const Value& v);
// Python's len(x); throws TypeError for values without one.
int64_t length(const Value& v);
// Python's iter(x) materialized: list items, dict keys, str code points (keeping
// their tags), a generator's remaining items (consuming them). Undefined is empty.
std::vector<Value> iterate(const Value& v);

// The interface of everything that is not plain data.
class Object : public std::enable_shared_from_this<Object> {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual std::string repr() const { return "<" + type_name() + " object>"; }
  // nullopt: no such attribute (the caller then tries item access / undefined).
  virtual std::optional<Value> attribute(std::string_view name) const { return std::nullopt; }
  virtual bool callable() const { return false; }
  virtual Value call(Interpreter& interp, CallArgs& args);
  // obj.name(args) for the methods attribute() hands out as bound methods.
  virtual Value call_method(Interpreter& interp, const std::string& name, CallArgs& args);
  virtual bool truthy() const { return true; }
  virtual std::optional<int64_t> length() const { return std::nullopt; }
  // Drops references to other values, to break cycles when a render ends.
  virtual void clear() {}
  // This object as a value (objects are always owned by shared pointers).
  Value self() const;
};

[[noreturn]] void fail(Error::Kind kind, std::string message);

// Strings a template builds (repetition, padding) stay below this size: an error, not an allocation failure.
inline constexpr size_t kMaxBuiltString = size_t{1} << 26;
void check_size(double bytes);
[[noreturn]] inline void type_error(std::string message) { fail(Error::Kind::kType, std::move(message)); }
[[noreturn]] inline void runtime_error(std::string message) { fail(Error::Kind::kRuntime, std::move(message)); }

}  // namespace fptrain::jinja
