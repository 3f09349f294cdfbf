// Centroid and codebook sections stored as f32, f16 or i8 rows (formats/kinds-v1.md §4; shared by
// pq, clusterkv and their tests): the manifest parameter naming the dtype, reading a section as f32,
// and writing f32 values at a dtype (the rounding the readers will hold).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/json.h"

namespace kvtool {

// Storage dtype of a centroid or codebook section (formats/kinds-v1.md §4: "f32", "f16" at half the
// bytes, and where `i8_rows` "i8": i8 codes with a power-of-two scale per row); the manifest
// parameter `key` names it, absent meaning f32 (artifacts from before it).
inline std::string stored_float_dtype(const json& params, const char* key, bool i8_rows = false) {
  const json& v = params.contains(key) ? params[key] : json("f32");
  KVT_CHECK(v.is_string() && (v == "f32" || v == "f16" || (i8_rows && v == "i8")), BAD_MANIFEST,
            "params." << key << " must be " << (i8_rows ? "\"f32\", \"f16\" or \"i8\"" : "\"f32\" or \"f16\""));
  return v.get<std::string>();
}

// The exponent e of an i8 row whose largest magnitude is `m` (formats/kinds-v1.md §4.3): the
// smallest e >= -128 with m · 2^-e <= 127, 0 for a zero row. The row's largest code is then 64..127
// unless e is -128, so quantizing the widened row again finds the same e and the same codes.
inline int i8_row_exponent(float m) {
  if (!(m > 0) || !std::isfinite(m)) return 0;  // callers refuse non-finite rows first
  int e = 0;
  std::frexp(m, &e);  // m = f · 2^e, f in [0.5, 1)
  e -= 7;             // m · 2^-e in [64, 128)
  while (std::ldexp(m, -e) > 127.0f) ++e;
  while (e > -128 && std::ldexp(m, -(e - 1)) <= 127.0f) --e;
  return std::max(e, -128);
}

// Finite f32 rows of `cols` values as i8 rows: codes (rounded to nearest even) and one exponent
// per row, the bytes of a section and of its exponent section (kvtool/half.h widen_i8_rows). A row
// whose largest magnitude is beyond kI8RowsMax would widen to Inf: refused (USAGE: it needs f16 or
// f32 storage), as f16 refuses values past 65504.
inline constexpr float kI8RowsMax = 0x1.fcp+127f;  // 127 · 2^121: e = 121 holds it, 122 rounds to 2^128
struct I8Rows {
  std::vector<uint8_t> codes, exponents;
};
inline I8Rows i8_rows_of(const std::vector<float>& v, size_t cols, const char* what) {
  I8Rows out;
  const size_t rows = cols ? v.size() / cols : 0;
  out.codes.resize(rows * cols);
  out.exponents.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    float m = 0;
    for (size_t t = 0; t < cols; ++t) {
      KVT_CHECK(std::isfinite(v[r * cols + t]), USAGE, what << " value " << v[r * cols + t] << " is not finite");
      m = std::max(m, std::fabs(v[r * cols + t]));
    }
    KVT_CHECK(m <= kI8RowsMax, USAGE,
              what << " magnitude " << m << " is beyond the i8 rows' range (127 * 2^121): store it as f32");
    const int e = i8_row_exponent(m);
    bool zero = true;
    for (size_t t = 0; t < cols; ++t) {
      const float q = std::clamp(std::nearbyint(std::ldexp(v[r * cols + t], -e)), -127.0f, 127.0f);
      out.codes[r * cols + t] = static_cast<uint8_t>(static_cast<int8_t>(q));
      zero = zero && q == 0;
    }
    // A row whose codes all round to 0 (below the exponent's floor) is stored as the zero row is.
    out.exponents[r] = static_cast<uint8_t>(static_cast<int8_t>(zero ? 0 : e));
  }
  return out;
}

// A stored f32 or f16 section's bytes as f32 values (f16 widened exactly).
inline std::vector<float> widen_float_section(std::span<const uint8_t> bytes, const std::string& dtype) {
  if (dtype == "f16") return widen_f16_bytes(bytes.data(), bytes.size());
  std::vector<float> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// f32 values as a section of `dtype`: "f32" as they are, "f16" rounded to nearest even; a value
// beyond the f16 range is refused (USAGE: the data needs f32 storage), never stored as Inf.
inline std::vector<uint8_t> stored_float_bytes(const std::vector<float>& v, const std::string& dtype,
                                               const char* what) {
  if (dtype == "f32") {
    std::vector<uint8_t> b(v.size() * 4);
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_f16(v[i]);
    KVT_CHECK(std::isfinite(f16_to_f32(h)), USAGE,
              what << " value " << v[i] << " is beyond the f16 range (65504): store it as f32");
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

// The values `stored_float_bytes` stores, as f32 (what a reader of the section holds).
inline std::vector<float> stored_float_values(const std::vector<float>& v, const std::string& dtype) {
  if (dtype == "f32") return v;
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f16_to_f32(f32_to_f16(v[i]));
  return out;
}

}  // namespace kvtool
