// float16 / bfloat16 <-> float32 conversions (round-to-nearest-even), independent of hardware.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define KVT_HOST_DEVICE __host__ __device__
#else
#define KVT_HOST_DEVICE
#endif

namespace kvtool {

// IEEE half bits -> float32 bits (subnormals, Inf and NaN payloads kept). Shared verbatim by the
// host conversion and the CUDA kernels (cuda/src/convert.cu), so both paths are one definition.
inline KVT_HOST_DEVICE uint32_t f16_bits_to_f32_bits(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return sign;
    int e = -1;  // subnormal: normalise
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    return sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  if (exp == 31) return sign | 0x7f800000u | (mant << 13);
  return sign | ((exp + 127 - 15) << 23) | (mant << 13);
}

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
// Bulk conversion, exactly f16_to_f32 per element and much faster: F16C where the CPU has it
// (checked at run time), else a 64 Ki-entry table.
void f16_to_f32_array(const uint16_t* in, float* out, size_t n);
uint16_t f32_to_f16(float f);
// The f16 values of little-endian bytes (an f16 section's raw bytes) as f32, exactly.
std::vector<float> widen_f16_bytes(const uint8_t* bytes, size_t n);
inline std::vector<float> widen_f16_bytes(const std::vector<uint8_t>& bytes) {
  return widen_f16_bytes(bytes.data(), bytes.size());
}
// Rows of i8 codes with a power-of-two scale each (formats/kinds-v1.md §4.3.1): element t of
// row r is codes[r * cols + t] · 2^exponents[r] (both signed bytes), exact in f32. `codes` holds
// rows · cols bytes, `exponents` rows bytes.
std::vector<float> widen_i8_rows(const uint8_t* codes, const uint8_t* exponents, size_t rows, size_t cols);
// The section that holds the exponents of an i8-rows section named `name`.
inline std::string i8_rows_exponent_section(const std::string& name) { return name + "_exp"; }

}  // namespace kvtool
