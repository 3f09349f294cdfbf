#include "kvtool/half.h"

#include <vector>

namespace kvtool {

float f16_to_f32(uint16_t h) {
  uint32_t u = f16_bits_to_f32_bits(h);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void f16_to_f32_array(const uint16_t* in, float* out, size_t n) {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = f16_to_f32(static_cast<uint16_t>(i));
    return t;
  }();
  const float* t = table.data();
  for (size_t i = 0; i < n; ++i) out[i] = t[in[i]];
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (absu < 0x38800000u) {                                               // subnormal or zero in half
    if (absu < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = absu >> 23;
    uint32_t m = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (113 - e) - ... maps to half subnormal
    uint32_t half_m = m >> (shift - 0);
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    half_m >>= 0;
    // m has 24 bits; half subnormal mantissa = m >> (126 - e)
    if (rem > halfway || (rem == halfway && (half_m & 1u))) ++half_m;
    return static_cast<uint16_t>(sign | half_m);
  }
  uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);  // round to nearest even
  r -= 0x38000000u;                                  // rebias 127 -> 15
  return static_cast<uint16_t>(sign | (r >> 13));
}

}  // namespace kvtool
