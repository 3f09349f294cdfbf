// PQ fast scan for 4-bit codes (16 centroids per subspace): the selection of pq_scores_cm +
// top_k_into, computed from quantized lookup tables held in SIMD registers and read with byte
// shuffles over codes packed two per byte in blocks of 32 rows (the FAISS fast-scan scheme).
//
// The answer is exact: the 8-bit tables (per-subspace minimum offsets, one global scale, as FAISS
// quantizes them) only choose candidates, every row whose 16-bit score lies within a margin of the
// b-th best that the quantization error and the float rounding of the exact scores cannot cross;
// the candidates are then scored with the float table in the order pq_scores_u8 adds (0, subspace
// 0, 1, ...), and the best b of them are the ids and scores of pq_scores_u8 + top_k bit for bit.
// Every Simd level (scoring.h) computes the same integers and floats. Standard library only, like
// scoring.h.
#pragma once
#include <cstdint>
#include <vector>

namespace kvtool::scoring {

// One part's 4-bit codes in the two layouts the fast scan reads, built once from row-major codes.
//   scan: blocks of 32 rows (the last padded with code 0), each block `quads` groups of 64 bytes,
//         group g holding subspaces 4g .. 4g + 3 (those past m padded with code 0): bytes
//         16 s + t (s < 4, t < 16) hold row t's code of subspace 4g + s in the low nibble and row
//         16 + t's in the high one. One 64-byte group is one AVX-512 register (one 128-bit lane
//         per subspace, the lane vpshufb looks up in), half of it one AVX2 register.
//   rows: row i's codes at rows[i * row_bytes], two per byte (subspace 2u in byte u's low nibble),
//         row_bytes a multiple of 4 so that one 32-bit load holds eight subspaces: the candidates'
//         exact scores read these.
struct FastScanCodes {
  int64_t n = 0, m = 0, blocks = 0, quads = 0, row_bytes = 0;
  std::vector<uint8_t> scan, rows;
  int64_t bytes() const { return static_cast<int64_t>(scan.capacity() + rows.capacity()); }
};

// Whether the fast scan serves a part: 4-bit codes, m <= 256 (the 16-bit sums of m 8-bit table
// entries cannot overflow), and row offsets that fit 32-bit gathers.
bool fastscan_applies(int64_t bits, int64_t m, int64_t n);
// Packs row-major codes [n, m] (each below 16; only the low nibble is read) into both layouts.
void fastscan_pack(const uint8_t* codes, int64_t n, int64_t m, FastScanCodes& out);

// The pieces, exposed for the tests that compare the Simd levels:
// out[i] = sum over the 4 * quads subspaces of qlut[j * 16 + code(i, j)] for i < 32 * blocks (the
// padding rows included); qlut holds 64 * quads bytes.
void fastscan_scores_u16(const uint8_t* qlut, const FastScanCodes& codes, uint16_t* out);
// out[r] = 0 + lut[code(rows[r], 0)] + lut[16 + code(rows[r], 1)] + ... (float, as pq_scores_u8).
void fastscan_rescore(const float* lut, const FastScanCodes& codes, const uint32_t* rows, int64_t count, float* out);

// The min(k, n) best rows by the float table lut [m, 16] (pq_lut's), best first, equal scores by
// lower row: ids[r] and scores[r] equal top_k(pq_scores_u8(lut, codes)) and those scores bit for
// bit. Returns the count. Allocation-free once the calling thread has answered a part this size.
int64_t fastscan_top_k(const float* lut, const FastScanCodes& codes, int64_t k, int64_t* ids, float* scores);

}  // namespace kvtool::scoring
