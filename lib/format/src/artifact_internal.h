// What the kvi container's reader (artifact.cpp) and writer (artifact_writer.cpp) share, private to
// kvtool_format: the little-endian fields, the 64-byte alignment, the zstd-delta filter and the
// overflow-checked size arithmetic. The format is formats/kvi-v1.md; the contract kvtool/artifact.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kvtool/artifact.h"

namespace kvtool::kvi_internal {

inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = v & 0xff;
  p[1] = v >> 8;
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint64_t align_up(uint64_t x) { return (x + kKviAlign - 1) / kKviAlign * kKviAlign; }

// Codec "zstd-delta" (formats/kvi-v1.md, sections): the frame holds each little-endian unsigned
// element minus the one before it (the first minus 0), modulo 2^(8·size). Sorted ids and running
// offsets become small numbers, which zstd's entropy coder packs; raw u16 ids do not compress.
inline bool delta_dtype(const std::string& t) { return t == "u8" || t == "u16" || t == "u32" || t == "u64"; }

template <typename T>
void delta_code(uint8_t* p, size_t n, bool decode, uint64_t& prev_state) {
  T prev = static_cast<T>(prev_state);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    const T out = decode ? static_cast<T>(v + prev) : static_cast<T>(v - prev);
    std::memcpy(p + i * sizeof(T), &out, sizeof(T));
    prev = decode ? out : v;
  }
  prev_state = prev;
}

// Encodes or decodes `n` elements of `width` bytes in place; `prev` carries the last raw element
// across calls (a streaming decoder's chunks).
inline void delta_code(uint8_t* p, size_t n, size_t width, bool decode, uint64_t& prev) {
  switch (width) {
    case 1:
      return delta_code<uint8_t>(p, n, decode, prev);
    case 2:
      return delta_code<uint16_t>(p, n, decode, prev);
    case 4:
      return delta_code<uint32_t>(p, n, decode, prev);
    default:
      return delta_code<uint64_t>(p, n, decode, prev);
  }
}

inline bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  out = a * b;
  return true;
}

}  // namespace kvtool::kvi_internal
