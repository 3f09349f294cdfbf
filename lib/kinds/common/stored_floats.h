// Centroid and codebook sections stored as f32 or f16 (formats/kinds-v1.md §4; shared by pq,
// clusterkv and their tests): the manifest parameter naming the dtype, reading a section as f32,
// and writing f32 values at a dtype (the f16 rounding the readers will hold).
#pragma once
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/json.h"

namespace kvtool {

// Storage dtype of a centroid or codebook section (formats/kinds-v1.md §4: "f32", or "f16" at half
// the bytes); the manifest parameter `key` names it, absent meaning f32 (artifacts from before it).
inline std::string stored_float_dtype(const json& params, const char* key) {
  const json& v = params.contains(key) ? params[key] : json("f32");
  KVT_CHECK(v.is_string() && (v == "f32" || v == "f16"), BAD_MANIFEST,
            "params." << key << " must be \"f32\" or \"f16\"");
  return v.get<std::string>();
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
