#include "kvtool/prng.h"

namespace kvtool {

uint64_t SplitMix64::below(uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = next();
  while (x >= limit);
  return x % n;
}

uint64_t part_seed(uint64_t seed, uint64_t layer, uint64_t kv_head, uint64_t stream) {
  // Chain SplitMix64 outputs so every input bit affects every output bit.
  SplitMix64 g(seed);
  uint64_t s = g.next();
  s = SplitMix64(s ^ (layer + 1) * 0xD1B54A32D192ED03ull).next();
  s = SplitMix64(s ^ (kv_head + 1) * 0x8CB92BA72F3D8DD7ull).next();
  s = SplitMix64(s ^ (stream + 1) * 0xABC98388FB8FAC03ull).next();
  return s;
}

}  // namespace kvtool
