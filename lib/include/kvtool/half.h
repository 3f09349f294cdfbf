// float16 / bfloat16 <-> float32 conversions (round-to-nearest-even), independent of hardware.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvtool {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
// Bulk conversion through a 64 Ki-entry table (exactly f16_to_f32 per element, much faster).
void f16_to_f32_array(const uint16_t* in, float* out, size_t n);
uint16_t f32_to_f16(float f);

}  // namespace kvtool
