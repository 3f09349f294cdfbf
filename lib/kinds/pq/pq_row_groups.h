// pq's rows grouped by their code pair (m = 2), and the selection over those groups that pq's
// selector (pq_select.cpp) runs instead of scoring every row: the groups' scores are the rows'
// scores, so the answer is top_k_into's (kvtool/scoring.h) bit for bit. Runtime half, beside the pq
// selector; the selection's shared steps are lib/runtime/src/selection_internal.h.
#pragma once
#include <cstdint>
#include <vector>

#include "kvtool/scoring.h"

namespace kvtool::scoring {

// Rows grouped by a key they share, and with it their score (a PQ part with m = 2: the rows of
// one code pair): group p's rows are at [start[p], start[p + 1]) of the row ids, in increasing
// order; sample[j] is the group of position j * n / kSelectionSample of the row ids (j <
// kSelectionSample; empty when n is below that), a sample of the rows stratified by group. Row ids
// are 16-bit up to kRows16 rows (rows16; rows32 empty), else 32-bit (rows32; rows16 empty): half
// the bytes to hold and to read for the usual part.
struct RowGroups {
  static constexpr int64_t kRows16 = int64_t{1} << 16;
  int64_t n = 0;
  std::vector<uint32_t> start, rows32, sample;
  std::vector<uint16_t> rows16;
  int64_t groups() const { return start.empty() ? 0 : static_cast<int64_t>(start.size()) - 1; }
  uint32_t row(uint32_t at) const { return rows16.empty() ? rows32[at] : rows16[at]; }
  int64_t bytes() const;
  // Brings the row lists into cache in one sequential pass, ahead of several queries that list
  // rows of groups in score order (else one cache miss a group).
  void prefetch() const;
};
// The groups of rows i < n by key[i] < key_count, in increasing key order: keys[p] is group p's
// key. Keys no row has make no group, unless `every_key`: then group p is key p, empty or not, so
// that a table of scores by key is the groups' scores as it stands. n < 2^32.
void group_rows(const uint32_t* key, int64_t n, int64_t key_count, RowGroups& out, std::vector<uint32_t>& keys,
                bool every_key = false);
// The scores of every code pair (c0, c1) of a part with m = 2 and k codes a subspace, at c0 k + c1,
// from its lookup tables [2, k]: (0 + lut[c0]) + lut[k + c1], the sum pq's scorers form for a row
// with those codes (pq_scores_cm: from 0, subspace by subspace), bit for bit. With rows grouped
// by every pair key (group_rows, every_key), these are the groups' scores: k^2 additions a query
// where scoring the distinct pairs took two table lookups each.
void pair_scores(const float* lut, int64_t k, float* out);
// top_k_into over the rows of g when each row of group p scores score[p], without scoring or
// sorting rows: ids[r] = base + the r-th best row and scores[r] its score (scores: nullptr for
// none), best first, equal scores by lower row — top_k_into's rows and their scores bit for bit.
// Returns the count, min(k, n). Only the groups within a sampled bound are sorted, and their rows
// listed. Allocation-free once the calling thread has selected from n rows before.
int64_t top_k_groups_into(const float* score, const RowGroups& g, int64_t k, int64_t base, int64_t* ids, float* scores);
// The same rows and scores in increasing row order (the order an engine gathers rows in): the
// groups' score that the k-th best row has is found by a selection weighted by the groups' sizes,
// the rows of the better groups (and the lowest rows of the groups tied at it) are marked in a
// bitmap of the n rows, and the bitmap is read in order. No sort of the kept groups.
int64_t top_k_groups_rows_into(const float* score, const RowGroups& g, int64_t k, int64_t base, int64_t* ids,
                               float* scores);

}  // namespace kvtool::scoring
