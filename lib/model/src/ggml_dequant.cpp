// ggml's reference dequantizers (ggml/src/ggml-quants.c, dequantize_row_*; block layouts in
// ggml/src/ggml-common.h, at the llama.cpp version formats/gguf.md names), written out so that
// every value is the float ggml's C computes: the same operations in the same order.
#include <cstring>

#include "kvtool/error.h"
#include "kvtool/gguf_file.h"
#include "kvtool/gguf_model.h"
#include "kvtool/half.h"

namespace kvtool {

namespace {

constexpr int64_t QK = 32, QK_K = 256;

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// block_q4_0: ggml_half d; uint8_t qs[16].
void q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += QK) {
    const float d = half_at(b);
    for (int j = 0; j < QK / 2; ++j) {
      const int x0 = (b[2 + j] & 0x0F) - 8, x1 = (b[2 + j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + QK / 2] = static_cast<float>(x1) * d;
    }
  }
}

// block_q4_1: ggml_half d, m; uint8_t qs[16].
void q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += QK) {
    const float d = half_at(b), m = half_at(b + 2);
    for (int j = 0; j < QK / 2; ++j) {
      const int x0 = b[4 + j] & 0x0F, x1 = b[4 + j] >> 4;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + QK / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

// block_q5_0 (ggml_half d; uint8_t qh[4]; uint8_t qs[16]) and block_q5_1 (ggml_half d, m; then the
// same): the fifth bit of value j is bit j of qh; q5_0 is centred on 16, q5_1 has the minimum m.
void q5(const uint8_t* b, float* y, int64_t nb, bool with_min) {
  const int head = with_min ? 4 : 2;
  for (int64_t i = 0; i < nb; ++i, b += head + 20, y += QK) {
    const float d = half_at(b), m = with_min ? half_at(b + 2) : 0.0f;
    uint32_t qh;
    std::memcpy(&qh, b + head, 4);
    const uint8_t* qs = b + head + 4;
    for (int j = 0; j < QK / 2; ++j) {
      const auto xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const auto xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = (qs[j] & 0x0F) | xh_0, x1 = (qs[j] >> 4) | xh_1;
      if (with_min) {
        y[j] = static_cast<float>(x0) * d + m;
        y[j + QK / 2] = static_cast<float>(x1) * d + m;
      } else {
        y[j] = static_cast<float>(x0 - 16) * d;
        y[j + QK / 2] = static_cast<float>(x1 - 16) * d;
      }
    }
  }
}

// block_q8_0: ggml_half d; int8_t qs[32].
void q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += QK) {
    const float d = half_at(b);
    for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }
}

void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// block_q4_K: ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128].
void q4_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 144) {
    const float d = half_at(b), min = half_at(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K; j += 64) {
      scale_min_k4(is + 0, scales, sc, m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, scales, sc, m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

// block_q6_K: uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d.
void q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const float d = half_at(b + 208);
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int n = 0; n < QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const auto q1 = static_cast<int8_t>(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        const auto q2 = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        const auto q3 = static_cast<int8_t>(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        const auto q4 = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

}  // namespace

void ggml_dequantize(uint32_t type, const uint8_t* blocks, int64_t values, float* out) {
  const GgmlType t = ggml_type(type);
  KVT_CHECK(t.decoded() && values % t.block == 0, USAGE,
            "ggml type " << t.name << " (" << type << "): kvtool does not decode it, or not " << values << " values");
  const int64_t nb = values / t.block;
  switch (type) {
    case 0:
      std::memcpy(out, blocks, static_cast<size_t>(values) * 4);
      return;
    case 1:
      for (int64_t i = 0; i < values; ++i) out[i] = half_at(blocks + 2 * i);
      return;
    case 30:
      for (int64_t i = 0; i < values; ++i) {
        uint16_t h;
        std::memcpy(&h, blocks + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;  // ggml_compute_bf16_to_fp32
        std::memcpy(out + i, &bits, 4);
      }
      return;
    case 2:
      return q4_0(blocks, out, nb);
    case 3:
      return q4_1(blocks, out, nb);
    case 6:
      return q5(blocks, out, nb, false);
    case 7:
      return q5(blocks, out, nb, true);
    case 8:
      return q8_0(blocks, out, nb);
    case 12:
      return q4_k(blocks, out, nb);
    case 14:
      return q6_k(blocks, out, nb);
    default:
      KVT_THROW(INTERNAL, "ggml type " << type << " has a size but no decoder");
  }
}

}  // namespace kvtool
