// NFC in the three steps of the Unicode standard (UAX #15): full canonical
// decomposition (Hangul syllables algorithmically), canonical ordering of
// combining marks, then canonical composition with blocking. Text whose code
// points are all below U+0300 is already NFC (nothing there composes or
// decomposes) and is returned as it is.
#include "tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "tokenizer/unicode.h"

namespace fptrain::tokenizer::unicode {
namespace {

struct CombiningClass {
  uint32_t cp;
  uint32_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second 0: a singleton
};
struct Composition {
  uint32_t first, second, composite;
};

#include "tokenizer/unicode_nfc_tables.inc"

// Hangul (Unicode 3.12, "Conjoining Jamo Behavior").
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint32_t combining_class(uint32_t cp) {
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::lower_bound(std::begin(kCombiningClasses), end, cp,
                                    [](const CombiningClass& c, uint32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (first, second), or 0.
uint32_t compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, std::make_pair(first, second),
                                    [](const Composition& c, const std::pair<uint32_t, uint32_t>& v) {
                                      return c.first != v.first ? c.first < v.first : c.second < v.second;
                                    });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

// Stable sort of each run of non-starters by combining class.
void order_marks(std::vector<uint32_t>& cps, std::vector<uint32_t>& classes) {
  for (size_t i = 0; i < cps.size();) {
    if (classes[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && classes[j] != 0) ++j;
    std::vector<std::pair<uint32_t, uint32_t>> run;
    for (size_t k = i; k < j; ++k) run.emplace_back(classes[k], cps[k]);
    std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = i; k < j; ++k) std::tie(classes[k], cps[k]) = run[k - i];
    i = j;
  }
}

// Canonical composition: each character joins the last starter unless a
// character between them has a class >= its own (or is a starter).
void compose_all(std::vector<uint32_t>& cps, std::vector<uint32_t>& classes) {
  size_t starter = 0, kept = 0;
  bool have_starter = false;
  uint32_t last_class = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cc = classes[i];
    if (have_starter) {
      const bool blocked = kept > starter + 1 && (last_class == 0 || last_class >= cc);
      const uint32_t composite = blocked ? 0 : compose(cps[starter], cps[i]);
      if (composite != 0) {
        cps[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = kept;
      have_starter = true;
    }
    last_class = cc;
    cps[kept] = cps[i];
    classes[kept] = cc;
    ++kept;
  }
  cps.resize(kept);
  classes.resize(kept);
}

}  // namespace

std::string nfc(std::string_view text) {
  bool simple = true;
  for (size_t i = 0; i < text.size() && simple;) simple = next_code_point(text, i) < 0x300;
  if (simple) return std::string(text);
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < text.size();) decompose(next_code_point(text, i), cps);
  std::vector<uint32_t> classes(cps.size());
  for (size_t k = 0; k < cps.size(); ++k) classes[k] = combining_class(cps[k]);
  order_marks(cps, classes);
  compose_all(cps, classes);
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

const char* nfc_unicode_version() { return kNfcUnicodeVersion; }

}  // namespace fptrain::tokenizer::unicode
