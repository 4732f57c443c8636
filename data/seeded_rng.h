// A small, portable PRNG (splitmix64). The standard library's distributions
// are implementation-defined, so every random decision of the pipeline goes
// through here to be identical on every machine and compiler.
#pragma once

#include <cstdint>

namespace fptrain::data {

class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), n > 0, without modulo bias (Lemire's method).
  uint64_t below(uint64_t n) {
    while (true) {
      const unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
      const uint64_t low = static_cast<uint64_t>(m);
      if (low >= n || low >= (-n) % n) return static_cast<uint64_t>(m >> 64);
    }
  }

 private:
  uint64_t state_;
};

// A seed for one purpose (e.g. the permutation of epoch 3), derived from the
// user's seed so that streams for different purposes are independent.
inline uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  SeededRng r(seed ^ 0x5DEECE66Dull);
  uint64_t h = r.next();
  for (uint64_t v : {a, b, c}) {
    SeededRng s(h ^ (v * 0xD6E8FEB86659FD93ull));
    h = s.next();
  }
  return h;
}

}  // namespace fptrain::data
