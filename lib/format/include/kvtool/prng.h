// The one PRNG of kvtool (formats/kvi-v1.md §PRNG): SplitMix64, with a documented uniform and
// normal transform, so random streams are identical across compilers and standard libraries.
#pragma once
#include <cmath>
#include <cstdint>

namespace kvtool {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) by rejection (no modulo bias).
  uint64_t below(uint64_t n);
  // Standard normal by Box–Muller on (1 - u1, u2); one draw per two uniforms (no caching, so the
  // stream position is a simple function of the number of normals drawn).
  double normal() {
    double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

// Per-part seed: independent of build order and sharding (seed, layer, kv head, stream).
uint64_t part_seed(uint64_t seed, uint64_t layer, uint64_t kv_head, uint64_t stream = 0);

}  // namespace kvtool
