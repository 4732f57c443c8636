// Filters on sequences. Like jinja2, select/map/unique/batch/items return
// one-shot generators (always truthy, no length), and reverse of a list
// returns an iterator; |list materializes them.
#include <algorithm>

#include "jinja/args.h"
#include "jinja/filters.h"
#include "jinja/interpreter.h"
#include "jinja/operators.h"
#include "jinja/printing.h"
#include "jinja/str_ops.h"
#include "jinja/utf8.h"

namespace fptrain::jinja {

namespace {

// make_attrgetter with jinja2's ignore_case postprocessing.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = lookup_path(item, attribute);
  if (!case_sensitive && k.is_str()) return Value::string(utf8::lower(k.text()));
  return k;
}

Value do_first(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("first", args, {});
  if (v.is_iterator()) {
    IteratorData& it = v.iter();
    if (it.pos < it.items.size()) return it.items[it.pos++];
  } else {
    std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value do_last(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("last", args, {});
  if (v.is_iterator()) type_error("'generator' object is not reversible");
  if (v.is_object() || v.is_number() || v.is_none()) type_error("'" + type_name(v) + "' object is not reversible");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value do_length(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("length", args, {});
  return Value::integer(length(v));
}

Value do_list(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("list", args, {});
  return Value::list(iterate(v));
}

Value do_join(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("join", args, {"d", "attribute"});
  const TaggedString sep = to_str(a.get(0, Value::string("")));
  std::vector<TaggedString> parts;
  for (const Value& item : iterate(v)) parts.push_back(to_str(a.has(1) ? lookup_path(item, a[1]) : item));
  return Value::string(py_join(sep, parts));
}

Value do_reverse(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("reverse", args, {});
  if (v.is_str()) return Value::string(py_slice_str(v.str_data(), std::nullopt, std::nullopt, -1));
  if (v.is_iterator() || v.is_undefined()) {  // not reversible: jinja2 falls back to a reversed list
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::iterator(std::move(items));
}

Value do_sort(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = truthy(a.get(0, Value::boolean(false)));
  const bool case_sensitive = truthy(a.get(1, Value::boolean(false)));
  std::vector<Value> attributes;  // "age,name" sorts by several keys
  if (a.has(2) && a[2].is_str()) {
    for (const TaggedString& part : py_split(a[2].str(), std::string(","), -1)) attributes.push_back(Value::string(part));
  } else {
    attributes.push_back(a.get(2, Value::none()));
  }
  std::vector<std::pair<Value, Value>> keyed;  // (key, item)
  for (const Value& item : iterate(v)) {
    std::vector<Value> keys;
    for (const Value& attr : attributes) keys.push_back(sort_key(item, attr, case_sensitive));
    keyed.emplace_back(Value::list(std::move(keys)), item);  // a list of keys, as make_multi_attrgetter
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? py_less(y.first, x.first) : py_less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value do_dictsort(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) type_error("dictsort expects a mapping, not " + type_name(v));
  const bool case_sensitive = truthy(a.get(0, Value::boolean(false)));
  const std::string by = a.has(1) ? to_str(a[1]).text() : "key";
  if (by != "key" && by != "value") runtime_error("You can only sort by either \"key\" or \"value\"");
  const bool reverse = truthy(a.get(2, Value::boolean(false)));
  std::vector<std::pair<Value, Value>> items = v.dict().items();
  auto key = [&](const std::pair<Value, Value>& kv) {
    const Value& k = by == "key" ? kv.first : kv.second;
    return !case_sensitive && k.is_str() ? Value::string(utf8::lower(k.text())) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    return reverse ? py_less(key(y), key(x)) : py_less(key(x), key(y));
  });
  std::vector<Value> out;
  for (auto& [k, val] : items) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Value min_max(const Value& v, CallArgs& args, bool want_max) {
  BoundArgs a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(a.get(0, Value::boolean(false)));
  const Value attribute = a.get(1, Value::none());
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(items[i], attribute, case_sensitive);
    if (want_max ? py_less(best_key, k) : py_less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value do_max(Interpreter&, const Value& v, CallArgs& args) { return min_max(v, args, true); }
Value do_min(Interpreter&, const Value& v, CallArgs& args) { return min_max(v, args, false); }

Value do_sum(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("sum", args, {"attribute", "start"});
  Value total = a.get(1, Value::integer(0));
  for (const Value& item : iterate(v)) total = binary_op(BinOp::kAdd, total, a.has(0) ? lookup_path(item, a[0]) : item);
  return total;
}

Value do_unique(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(a.get(0, Value::boolean(false)));
  const Value attribute = a.get(1, Value::none());
  std::vector<Value> seen, out;
  for (const Value& item : iterate(v)) {
    Value k = sort_key(item, attribute, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); })) {
      seen.push_back(std::move(k));
      out.push_back(item);
    }
  }
  return Value::iterator(std::move(out));
}

Value do_batch(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("batch", args, {"linecount", "fill_with"}, 1);
  if (!a[0].is_integral() || a[0].as_int() <= 0) runtime_error("batch size must be a positive integer");
  const auto n = static_cast<size_t>(a[0].as_int());
  std::vector<Value> out, row;
  for (const Value& item : iterate(v)) {
    if (row.size() == n) out.push_back(Value::list(std::exchange(row, {})));
    row.push_back(item);
  }
  if (!row.empty()) {
    if (a.has(1) && !a[1].is_none()) row.resize(n, a[1]);
    out.push_back(Value::list(std::move(row)));
  }
  return Value::iterator(std::move(out));
}

Value do_slice(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("slice", args, {"slices", "fill_with"}, 1);
  if (!a[0].is_integral() || a[0].as_int() <= 0) runtime_error("slices must be a positive integer");
  const std::vector<Value> seq = iterate(v);
  if (a[0].as_int() > 1000000) runtime_error("too many slices");
  const size_t slices = static_cast<size_t>(a[0].as_int());
  const size_t per = seq.size() / slices, extra = seq.size() % slices;
  std::vector<Value> out;
  size_t offset = 0;
  for (size_t i = 0; i < slices; ++i) {
    const size_t start = offset + i * per;
    if (i < extra) ++offset;
    const size_t end = offset + (i + 1) * per;
    std::vector<Value> part(seq.begin() + static_cast<std::ptrdiff_t>(std::min(start, seq.size())),
                            seq.begin() + static_cast<std::ptrdiff_t>(std::min(end, seq.size())));
    if (a.has(1) && !a[1].is_none() && i >= extra) part.push_back(a[1]);
    out.push_back(Value::list(std::move(part)));
  }
  return Value::iterator(std::move(out));
}

Value do_map(Interpreter& interp, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    const auto attr = std::find_if(args.keyword.begin(), args.keyword.end(), [](const auto& kw) { return kw.first == "attribute"; });
    if (attr == args.keyword.end()) runtime_error("map requires a filter argument");
    Value fallback;
    bool has_default = false;
    for (const auto& [k, val] : args.keyword) {
      if (k == "default") {
        fallback = val;
        has_default = !val.is_none();
      } else if (k != "attribute") {
        runtime_error("Unexpected keyword argument '" + k + "'");
      }
    }
    for (const Value& item : iterate(v)) {
      Value x = lookup_path(item, attr->second);
      out.push_back(has_default && x.is_undefined() ? fallback : x);
    }
    return Value::iterator(std::move(out));
  }
  const std::string name = to_str(args.positional[0]).text();
  CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keyword};
  for (const Value& item : iterate(v)) {
    CallArgs call = rest;
    out.push_back(interp.call_filter(name, item, call));
  }
  return Value::iterator(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_or_reject(Interpreter& interp, const Value& v, CallArgs& args, bool select, bool by_attribute) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::iterator({});
  size_t off = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) runtime_error("Missing parameter for attribute name");
    attribute = args.positional[0];
    off = 1;
  }
  const bool has_test = args.positional.size() > off;
  const std::string test = has_test ? to_str(args.positional[off]).text() : "";
  CallArgs rest;
  if (has_test) rest = CallArgs{std::vector<Value>(args.positional.begin() + off + 1, args.positional.end()), args.keyword};
  for (const Value& item : iterate(v)) {
    const Value x = by_attribute ? lookup_path(item, attribute) : item;
    bool ok;
    if (has_test) {
      CallArgs call = rest;
      ok = interp.call_test(test, x, call);
    } else {
      ok = truthy(x);
    }
    if (ok == select) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value do_select(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, false); }
Value do_reject(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, false); }
Value do_selectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, true); }
Value do_rejectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, true); }

}  // namespace

void add_sequence_filters(FilterTable& t) {
  t["first"] = do_first;
  t["last"] = do_last;
  t["length"] = do_length;
  t["count"] = do_length;
  t["list"] = do_list;
  t["join"] = do_join;
  t["reverse"] = do_reverse;
  t["sort"] = do_sort;
  t["dictsort"] = do_dictsort;
  t["max"] = do_max;
  t["min"] = do_min;
  t["sum"] = do_sum;
  t["unique"] = do_unique;
  t["batch"] = do_batch;
  t["slice"] = do_slice;
  t["map"] = do_map;
  t["select"] = do_select;
  t["reject"] = do_reject;
  t["selectattr"] = do_selectattr;
  t["rejectattr"] = do_rejectattr;
}

}  // namespace fptrain::jinja
