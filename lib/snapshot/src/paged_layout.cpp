// The layout parser and the paged-cache slot planner (kvtool/paged_layout.h), shared by the
// "tensors" reader (tensor_layout.cpp) and Python's gather_paged.
#include "kvtool/paged_layout.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kvtool/error.h"

namespace kvtool {

namespace {

// One token axis (T; N and S; or X) and the heads as H and d or Hd.
void check_layout_axes(const std::set<std::string>& seen, const std::string& text, const std::string& option) {
  auto has = [&](const char* a) { return seen.count(a) > 0; };
  // One vector per token and no heads is what MLA models (DeepSeek) cache: a latent of kv_lora_rank
  // + rope dims from which the model's up-projections compute K and V. Per-head K and V are not
  // stored, so no import of it could be exact.
  KVT_CHECK(has("H") || has("Hd") || !has("d"), UNSUPPORTED_CACHE,
            option << " '" << text
                   << "' has no head axis (H or Hd): one vector per token is an MLA latent cache (kv_lora_rank + "
                      "rope dims), not per-head K and V, and kvtool imports only per-head K and V (a cache with "
                      "one KV head squeezed out: save it with its head axis of 1)");
  KVT_CHECK(has("N") == has("S"), USAGE,
            option << " '" << text << "' has " << (has("N") ? "N without S" : "S without N")
                   << "; a paged layout names the block axis N and the slot-in-block axis S");
  KVT_CHECK(has("T") + has("N") + has("X") == 1, USAGE,
            option << " '" << text << "' needs exactly one token axis: T, N and S (paged blocks) or X (flat slots)");
  const bool heads = has("H") && has("d"), merged = has("Hd");
  KVT_CHECK(heads != merged && !(merged && (has("H") || has("d"))), USAGE,
            option << " '" << text << "' needs either both H and d or Hd");
}

// An axis token as its canonical name; "" when the token names no axis allowed here.
std::string axis_of(const std::string& tok, bool allow_kv, bool allow_paged) {
  if (tok == "L" || tok == "H" || tok == "T") return tok;
  if (tok == "2") return allow_kv ? tok : "";
  if (tok == "d" || tok == "D") return "d";
  if (tok == "Hd" || tok == "H*d") return "Hd";
  if (tok == "B" || tok == "1") return "B";
  if (tok == "N" || tok == "S" || tok == "X") return allow_paged ? tok : "";
  return "";
}

}  // namespace

std::vector<std::string> parse_cache_layout(const std::string& text, bool allow_kv, bool allow_paged,
                                            const std::string& option) {
  std::vector<std::string> axes;
  std::set<std::string> seen;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string tok = text.substr(i, j - i);
    tok.erase(std::remove(tok.begin(), tok.end(), ' '), tok.end());
    const std::string a = axis_of(tok, allow_kv, allow_paged);
    KVT_CHECK(!a.empty(), USAGE,
              option << " '" << excerpt(text) << "': unknown axis '" << excerpt(tok, 16) << "' (axes: L"
                     << (allow_kv ? ", 2" : "") << ", H, T, d, Hd, B" << (allow_paged ? ", N, S, X" : "") << ")");
    KVT_CHECK(seen.insert(a).second, USAGE, option << " '" << excerpt(text) << "' names axis " << tok << " twice");
    axes.push_back(a);
    i = j + 1;
  }
  check_layout_axes(seen, excerpt(text), option);
  return axes;
}

int64_t paged_entries_needed(const PagedCache& cache, bool by_block, int64_t num_tokens) {
  KVT_CHECK(!by_block || cache.blocks, USAGE,
            "block_table needs a layout with N and S axes (X is a flat slot axis: give slot_mapping)");
  KVT_CHECK(num_tokens > 0, USAGE, "num_tokens must be positive (the request's tokens T)");
  KVT_CHECK(cache.per > 0 && cache.units > 0, SHAPE_MISMATCH, "the paged tensor " << cache.label << " has no slots");
  return by_block ? num_tokens / cache.per + (num_tokens % cache.per != 0) : num_tokens;
}

namespace {

// Two tokens in one slot would make one of them silently the other's copy.
void check_distinct(const std::vector<int64_t>& slots, int64_t per, bool by_block, const std::string& table) {
  std::vector<std::pair<int64_t, int64_t>> s;  // (slot, token)
  s.reserve(slots.size());
  for (size_t t = 0; t < slots.size(); ++t) s.emplace_back(slots[t], static_cast<int64_t>(t));
  std::sort(s.begin(), s.end());
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i].first != s[i - 1].first) continue;
    if (by_block)
      KVT_THROW(BAD_BLOCK_TABLE, table << " names block " << s[i].first / per << " twice (entries "
                                       << s[i - 1].second / per << " and " << s[i].second / per
                                       << "): two token ranges cannot share a block");
    KVT_THROW(BAD_BLOCK_TABLE, table << " gives tokens " << s[i - 1].second << " and " << s[i].second
                                     << " the same slot " << s[i].first);
  }
}

}  // namespace

// As vLLM's slot_mapping computes it from the block table (slot = block_table[t / S] * S + t % S),
// or given per token (vLLM's slot_mapping, a row of SGLang's req_to_token).
std::vector<int64_t> paged_token_slots(const PagedCache& cache, bool by_block, const std::vector<int64_t>& entries,
                                       int64_t row_entries, int64_t num_tokens, const std::string& table) {
  const int64_t need = paged_entries_needed(cache, by_block, num_tokens), per = cache.per;
  KVT_CHECK(row_entries >= need && static_cast<int64_t>(entries.size()) >= need, BAD_BLOCK_TABLE,
            table << " has " << row_entries << " entries per request; num_tokens " << num_tokens << " needs " << need);
  const int64_t limit = by_block ? cache.units : cache.units * per;
  for (int64_t j = 0; j < need; ++j) {
    const int64_t id = entries[static_cast<size_t>(j)];
    KVT_CHECK(id >= 0 && id < limit, BAD_BLOCK_TABLE,
              table << " entry " << j << " is " << id << ", outside the " << limit << (by_block ? " blocks" : " slots")
                    << " of " << cache.label << (id < 0 ? " (negative padding is allowed only past num_tokens)" : ""));
  }
  std::vector<int64_t> slots(static_cast<size_t>(num_tokens));
  for (int64_t t = 0; t < num_tokens; ++t)
    slots[static_cast<size_t>(t)] =
        by_block ? entries[static_cast<size_t>(t / per)] * per + t % per : entries[static_cast<size_t>(t)];
  check_distinct(slots, per, by_block, table);
  return slots;
}

}  // namespace kvtool
