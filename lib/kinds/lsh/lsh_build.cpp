// kind "lsh", offline half: mean-centred SimHash codes, CSR bucket tables, (the MagicPIG
// estimator eval applies to its samples is lib/offline/src/eval_estimator.cpp) (formats/kinds-v1.md, "lsh").
#include "lsh/lsh_builder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvtool/scoring.h"
#include "common/x86_avx512.h"
#include "common/param_json.h"
#include "kvtool/error.h"
#include "lsh/lsh_internal.h"

namespace kvtool {

namespace {

// The sign bits of one row's products p[cols] (bit c % 8 of byte c / 8: p[c] > 0, false for a
// NaN); the caller's buffer has 8 bytes of padding past the last used one.
void sign_bits_portable(const float* p, int64_t cols, uint8_t* out) {
  for (int64_t o = 0; o * 8 < cols; ++o) {
    unsigned v = 0;
    for (int64_t c = o * 8; c < std::min(cols, o * 8 + 8); ++c) v |= static_cast<unsigned>(p[c] > 0.f) << (c - o * 8);
    out[o] = static_cast<uint8_t>(v);
  }
}

#if KVTOOL_KINDS_X86
KVTOOL_AVX512_WARNINGS_OFF
// 16 columns a compare: _CMP_GT_OQ is `p > 0` (false for a NaN), the portable loop's test.
__attribute__((target("avx512f"))) void sign_bits_avx512(const float* p, int64_t cols, uint8_t* out) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; c += 16) {
    const __mmask16 live = cols - c >= 16 ? 0xffff : static_cast<__mmask16>((1u << (cols - c)) - 1);
    const uint16_t m = _mm512_mask_cmp_ps_mask(live, _mm512_maskz_loadu_ps(live, p + c), zero, _CMP_GT_OQ);
    std::memcpy(out + c / 8, &m, sizeof m);
  }
}
KVTOOL_AVX512_WARNINGS_ON

void sign_bits(const float* p, int64_t cols, uint8_t* out) {
  if (cpu_has_avx512f()) return sign_bits_avx512(p, cols, out);
  sign_bits_portable(p, cols, out);
}
#else
void sign_bits(const float* p, int64_t cols, uint8_t* out) { sign_bits_portable(p, cols, out); }
#endif

// SimHash codes of rows [n, d] for every table, table-major: codes[t * n + i] (the counting sorts
// below then read each table's codes contiguously). The products are scoring::simhash_products:
// a fixed summation order, so the codes are the same bytes on every machine (a BLAS sgemm sums in
// the order of whatever kernels the machine's BLAS picks, and flips keys near a hyperplane).
void simhash(const float* x, int64_t n, int64_t d, const std::vector<float>& w, int64_t bits, int64_t tables,
             std::vector<uint32_t>& codes) {
  const int64_t cols = bits * tables;
  codes.assign(static_cast<size_t>(n * tables), 0);
  const int64_t block = 2048;
  std::vector<float> prod(static_cast<size_t>(block * cols));
  // The row's sign bits, with 8 spare bytes so that any field of `bits` <= 16 loads as one u64.
  std::vector<uint8_t> signs(static_cast<size_t>((cols + 15) / 16 * 2 + 8), 0);
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t nn = std::min(block, n - i0);
    scoring::simhash_products(x + i0 * d, nn, d, w.data(), cols, prod.data());  // row i at prod + i * cols
    for (int64_t i = 0; i < nn; ++i) {
      sign_bits(prod.data() + i * cols, cols, signs.data());
      for (int64_t t = 0; t < tables; ++t) {
        const int64_t bit = t * bits;
        uint64_t v;
        std::memcpy(&v, signs.data() + bit / 8, sizeof v);  // bit 0 of the code is column t * bits
        codes[t * n + i0 + i] = static_cast<uint32_t>((v >> (bit % 8)) & mask);
      }
    }
  }
}

// The CSR tables of segment number `s` (counting sort by code; ids ascend inside a bucket) from
// the table-major codes [L, n]: offsets rows s·L + t, relative to the segment's block of ids, which starts at L·(seg.lo
// − rb) and holds table t at + t·n_s; ids are u16 offsets row − seg.base.
void segment_tables(const lsh::Segment& seg, int64_t rb, int64_t n, int64_t L, int64_t buckets,
                    const std::vector<uint32_t>& codes, std::vector<uint32_t>& offsets, std::vector<uint16_t>& ids,
                    size_t s) {
  const int64_t ns = seg.hi - seg.lo, i0 = seg.lo - rb;
  std::vector<uint32_t> pos(static_cast<size_t>(buckets));
  for (int64_t t = 0; t < L; ++t) {
    uint32_t* off = offsets.data() + (static_cast<int64_t>(s) * L + t) * (buckets + 1);
    uint16_t* tid = ids.data() + L * i0 + t * ns;
    const uint32_t* code = codes.data() + t * n;
    for (int64_t i = i0; i < i0 + ns; ++i) ++off[code[i] + 1];
    for (int64_t b = 0; b < buckets; ++b) off[b + 1] += off[b];
    std::copy(off, off + buckets, pos.begin());
    for (int64_t i = i0; i < i0 + ns; ++i) tid[pos[code[i]]++] = static_cast<uint16_t>(rb + i - seg.base);
  }
}

}  // namespace

json LshBuilder::params() const {
  json j = {{"centering", "mean-of-indexed-keys"}, {"id_layout", lsh::kIdLayoutSegments}};
#define KVTOOL_PARAM KVTOOL_MANIFEST_PARAM
#include "kvtool/kinds/lsh_params.def"
  return j;
}

void LshBuilder::check(int64_t) const {
  KVT_CHECK(p_.bits >= 1 && p_.bits <= 16, USAGE, "bits must be in 1..16 (got " << p_.bits << ")");
  KVT_CHECK(p_.tables >= 1 && p_.tables <= 4096, USAGE, "tables must be in 1..4096 (got " << p_.tables << ")");
}

PartOutput LshBuilder::build_part(const PartInput& in) const {
  const int64_t d = in.head_dim, rb = in.row_begin(), n = in.row_end() - rb, K = p_.bits, L = p_.tables;
  const int64_t buckets = int64_t{1} << K;
  PartOutput out;
  out.meta = {{"indexed_rows", n}};
  if (n == 0) return out;
  // Center the keys by their mean over the indexed rows (attention is unchanged by it).
  std::vector<double> mu(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) mu[j] += in.keys[(rb + i) * d + j];
  std::vector<float> muf(static_cast<size_t>(d)), x(static_cast<size_t>(n * d));
  for (int64_t j = 0; j < d; ++j) muf[j] = static_cast<float>(mu[j] / static_cast<double>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = in.keys[(rb + i) * d + j] - muf[j];
  std::vector<float> w = lsh_projections(in.base_seed, in.layer, in.kv_head, d, K, L);
  std::vector<uint32_t> codes;
  simhash(x.data(), n, d, w, K, L, codes);
  const std::vector<lsh::Segment> segs = lsh::segments_of(rb, rb + n, true);
  std::vector<uint32_t> offsets(segs.size() * static_cast<size_t>(L * (buckets + 1)), 0);
  std::vector<uint16_t> ids(static_cast<size_t>(L * n));
  for (size_t s = 0; s < segs.size(); ++s) segment_tables(segs[s], rb, n, L, buckets, codes, offsets, ids, s);
  // Bucket statistics over whole tables (all segments), as in every layout.
  int64_t empty = 0, max_bucket = 0;
  std::vector<int64_t> size(static_cast<size_t>(buckets));
  for (int64_t t = 0; t < L; ++t) {
    std::fill(size.begin(), size.end(), 0);
    for (int64_t i = 0; i < n; ++i) ++size[codes[t * n + i]];
    for (int64_t b = 0; b < buckets; ++b) empty += size[b] == 0, max_bucket = std::max(max_bucket, size[b]);
  }
  auto bytes = [](const void* p, size_t nb) {
    std::vector<uint8_t> b(nb);
    std::memcpy(b.data(), p, nb);
    return b;
  };
  const int64_t rows_of_offsets = static_cast<int64_t>(segs.size()) * L;
  out.sections.push_back({"lsh_mu", "f32", {d}, bytes(muf.data(), muf.size() * 4)});
  out.sections.push_back({"lsh_projections", "f32", {d, K * L}, bytes(w.data(), w.size() * 4)});
  // Offsets run upward and ids ascend inside a bucket: stored as differences they compress
  // (formats/kinds-v1.md §5.3); raw u16 ids do not.
  out.sections.push_back({"lsh_offsets",
                          "u32",
                          {rows_of_offsets, buckets + 1},
                          bytes(offsets.data(), offsets.size() * 4),
                          SectionFilter::delta});
  out.sections.push_back({"lsh_ids", "u16", {L, n}, bytes(ids.data(), ids.size() * 2), SectionFilter::delta});
  out.meta["bucket_empty_fraction"] = static_cast<double>(empty) / static_cast<double>(L * buckets);
  out.meta["bucket_max"] = max_bucket;
  return out;
}

}  // namespace kvtool
