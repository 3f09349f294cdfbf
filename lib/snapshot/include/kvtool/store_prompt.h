// A prompt's blocks in a cache store (formats/cache-stores.md, "A prompt's blocks"): the block
// hashes the stack computes for the prompt's tokens — SGLang's page keys, vLLM's chained block
// hashes — name the files that hold the prompt's K/V, found in position order from the first block
// until the first one the store lacks, and read as one KvSnapshot (positions 0..n-1, tokens known)
// that verify compares with the model and import writes as a dump.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/cache_store.h"
#include "kvtool/snapshot.h"

namespace kvtool {

struct StorePromptOptions {
  // vLLM: the PYTHONHASHSEED the server ran with (its NONE_HASH is sha256 of the pickled string;
  // without one vLLM draws it at random and no other process can name its blocks).
  std::optional<std::string> hash_seed;
  std::string namespace_name;  // the namespace to read ("": the one holding most of the prompt's blocks)
};

// What was found: the namespace, and per block of the prompt its file (relative to the store).
struct StorePromptFound {
  std::string ns;
  int64_t block_tokens = 0, blocks_wanted = 0;  // blocks the prompt's whole blocks make
  std::vector<std::vector<std::string>> files;  // per block found: its files (SGLang: one per rank)
  bool layout_assumed = false;                  // some block's page layout is kvtool's default (BlockMap)
  json to_json() const;
};

// vLLM's block hashes (vllm/v1/core/kv_cache_utils.py hash_block_tokens with the default
// sha256: SHA-256 of pickle.dumps((parent, tuple(tokens), None), protocol 5)), one per whole block
// of `block_tokens`, chained from NONE_HASH = sha256(pickle.dumps(hash_seed)).
std::vector<Digest> vllm_block_hashes(const std::vector<int32_t>& tokens, int64_t block_tokens,
                                      const std::string& hash_seed);
// SGLang's page keys (get_hash_str): SHA-256 over the previous key's 32 bytes (none for the first)
// and each token as uint32 little-endian, one per whole page.
std::vector<Digest> sglang_page_keys(const std::vector<int32_t>& tokens, int64_t page_tokens);

// The prompt's leading blocks in the store, as a snapshot. STORE_MISS when the store holds none of
// them; USAGE for a store whose keys kvtool cannot recompute (LMCache: Python's hash()) or whose
// blocks it cannot map.
std::unique_ptr<KvSnapshot> open_store_prompt(const std::string& root, const StoreOptions& so, const StoreModel& model,
                                              const std::vector<int32_t>& tokens, const StorePromptOptions& po,
                                              StorePromptFound& found);

}  // namespace kvtool
