#include "kvtool/half.h"

#include <cmath>
#include <vector>

#include "kvtool/cpu_features.h"

#if KVTOOL_X86_TARGETS
#include <immintrin.h>
#endif

namespace kvtool {

float f16_to_f32(uint16_t h) {
  uint32_t u = f16_bits_to_f32_bits(h);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {

void f16_to_f32_table(const uint16_t* in, float* out, size_t n) {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = f16_to_f32(static_cast<uint16_t>(i));
    return t;
  }();
  const float* t = table.data();
  for (size_t i = 0; i < n; ++i) out[i] = t[in[i]];
}

#if KVTOOL_X86_TARGETS
// F16C converts 8 halves per instruction, exactly, except that it quiets a signalling NaN: groups
// holding an Inf or NaN (all exponent bits set) take the table, so the result is f16_to_f32's
// bit for bit on every input.
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* in, float* out, size_t n) {
  const __m128i exponent = _mm_set1_epi16(0x7c00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent)))
      f16_to_f32_table(in + i, out + i, 8);
    else
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  f16_to_f32_table(in + i, out + i, n - i);
}
#endif

}  // namespace

void f16_to_f32_array(const uint16_t* in, float* out, size_t n) {
#if KVTOOL_X86_TARGETS
  if (cpu_features().f16c) return f16_to_f32_f16c(in, out, n);
#endif
  f16_to_f32_table(in, out, n);
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

std::vector<float> widen_f16_bytes(const uint8_t* bytes, size_t n) {
  std::vector<uint16_t> h(n / 2);
  std::vector<float> out(h.size());
  if (h.empty()) return out;
  std::memcpy(h.data(), bytes, h.size() * 2);
  f16_to_f32_array(h.data(), out.data(), out.size());
  return out;
}

std::vector<float> widen_i8_rows(const uint8_t* codes, const uint8_t* exponents, size_t rows, size_t cols) {
  std::vector<float> out(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int8_t>(exponents[r]));
    for (size_t t = 0; t < cols; ++t)
      out[r * cols + t] = static_cast<float>(static_cast<int8_t>(codes[r * cols + t])) * scale;
  }
  return out;
}

}  // namespace kvtool
