// Paged K/V caches (formats/paged-caches.md): a cache tensor holds blocks in allocation order, so a
// request's rows are found through its block table (token t at slot block_table[t / S] * S + t % S)
// or its slot mapping (one slot per token). The one planner of those slots, with every refusal:
// `kvtool import --layout` and Python's kvtool.gather_paged both call it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvtool {

// The axes of a --layout in storage order ("L", "2", "H", "T", "d", "Hd", "B", "N", "S", "X"),
// checked: known axes, none twice, one token axis (T; N and S; or X), heads as H and d or Hd
// (USAGE), and a head axis at all (UNSUPPORTED_CACHE: one vector per token is an MLA latent).
// `option` names the layout in messages.
std::vector<std::string> parse_cache_layout(const std::string& text, bool allow_kv = true, bool allow_paged = true,
                                            const std::string& option = "layout");

// Where a paged cache keeps rows: `units` blocks of `per` slots (N,S layouts) or `units` flat
// slots (X layouts, per = 1).
struct PagedCache {
  bool blocks = true;
  int64_t per = 1, units = 0;
  std::string label;  // the cache tensor, for messages
};

// How many entries of the request's row a block table (by_block) or slot mapping needs for
// `num_tokens` tokens; entries past them are padding and never read.
int64_t paged_entries_needed(const PagedCache& cache, bool by_block, int64_t num_tokens);

// The slot of each of the request's `num_tokens` tokens, from the first
// min(row_entries, paged_entries_needed()) entries of its row (`entries`): BAD_BLOCK_TABLE for a row
// shorter than needed, an entry outside the cache, or two tokens in one slot; USAGE for a block
// table over a flat (X) cache. `table` names the row in messages ("block_table 'bt' in 'x.npy'").
std::vector<int64_t> paged_token_slots(const PagedCache& cache, bool by_block, const std::vector<int64_t>& entries,
                                       int64_t row_entries, int64_t num_tokens, const std::string& table);

}  // namespace kvtool
