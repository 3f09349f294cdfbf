// Cache stores: the directories serving stacks offload K/V blocks into (formats/cache-stores.md) —
// vLLM's filesystem offload tier, LMCache's local-disk and FS-connector directories and SGLang's
// HiCache file backend. None of them records a checksum, and only vLLM records its geometry, so a
// store is read in two steps: scan_cache_store() names every entry (block, configuration,
// temporary, foreign) from the names and the few bytes a store keeps about itself, and
// block_map() says where the K and V values of one block file are, given the model's geometry.
// What the checks conclude (lib/offline, kvtool/store_check.h) is built on these two.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/directory_tree.h"
#include "kvtool/error.h"
#include "kvtool/json.h"

namespace kvtool {

// The geometry the blocks of a store must have, from a GGUF model or a Hugging Face config.json.
struct StoreModel {
  std::string path, name;  // name: general.name, or config.json's _name_or_path ("" when absent)
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  std::string dtype;  // f16 | bf16 | f32 from config.json's torch_dtype; "" when the model does not say
  bool gguf = false;  // a GGUF file (identity and RoPE known; the forward pass can run it)
};
StoreModel read_store_model(const std::string& path);

// Options for what a store does not record (formats/cache-stores.md says which store needs which).
struct StoreOptions {
  std::string kind;           // "" (recognised from the entries) | vllm | lmcache | sglang
  int64_t block_tokens = 0;   // SGLang page size; LMCache chunk size (0: 256, LMCache's default)
  std::string memory_format;  // vLLM nhd | hnd | split (page layout); LMCache KV_T2D | KV_2TD (layerwise);
                              // SGLang layer_first | page_first | page_first_direct | page_head
  std::string dtype;          // SGLang: f16 | bf16 | f32 | f8 (else the model's, else inferred from sizes)
  std::string model_name;     // when set, every namespace must be of this model
};

// One finding of a check: a reason code, the file it names (relative to the store) and a sentence.
struct StoreFinding {
  Reason reason = Reason::INTERNAL;
  std::string path, message;
  bool warning = false;  // reported, but not a failure (a live writer's fresh temporary)
};

struct StoreFile {
  enum class Role { block, config, temporary, foreign };
  TreeEntry entry;
  Role role = Role::foreign;
  std::string ns;    // the namespace (index into StoreScan::namespaces as its name); "" for none
  std::string hash;  // the block's hash as its name spells it
  std::string pool;  // SGLang pool ("kv" by default); LMCache: "" or the tags
  int64_t rank = -1, group = -1, layer = -1;
  std::vector<int64_t> header;  // LMCache FS connector: the 28-byte header (7 int32), empty when none
};

// A set of blocks one configuration describes: a vLLM namespace folder, an LMCache
// model@world_size@dtype, an SGLang model and parallel suffix.
struct StoreNamespace {
  std::string name, model, dtype;  // dtype as the store spells it ("bfloat16", "half", ...)
  int64_t world_size = 1;          // ranks (vLLM tp_size, LMCache world_size, SGLang tp_size)
  json config;                     // vLLM's config.json; the fields the names give otherwise
  int64_t blocks = 0;
  uint64_t bytes = 0;
};

struct StoreScan {
  std::string root, kind;  // kind: vllm | lmcache | sglang
  std::vector<StoreNamespace> namespaces;
  std::vector<StoreFile> files;
  std::vector<StoreFinding> findings;  // what the names alone show (temporaries, foreign files, ...)
  const StoreNamespace* find(const std::string& ns) const;
};

// The stores kvtool reads, for --help and messages.
const std::vector<std::string>& store_kinds();

// Lists the tree and names every entry. STORE_UNRECOGNIZED when `o.kind` is empty and the entries
// look like no store (or like two).
StoreScan scan_cache_store(const DirectoryTree& tree, const StoreOptions& o);

// Where the values of one block file are: value (kv, layer, token, head, i) is element
//   kv*s_kv + layer*s_l + (token / tb)*s_tb + (token % tb)*s_t + (head / hr)*s_w + (head % hr)*s_h + i
// of the file's data from byte `offset` on (heads are the file's own, 0..heads-1; first_head is the
// model's index of head 0).
struct BlockMap {
  uint64_t bytes = 0;   // the size the file must have
  uint64_t offset = 0;  // bytes before the values (LMCache's FS header)
  std::string dtype;    // f16 | bf16 | f32 decode; f8 and others are size-checked only
  int64_t elem_bytes = 0;
  int64_t layers = 0, first_layer = 0, heads = 0, first_head = 0, head_dim = 0, tokens = 0;
  int64_t s_kv = 0, s_l = 0, s_t = 0, s_h = 0, tb = 1, s_tb = 0, hr = 1, s_w = 0;
  // The page layout is kvtool's default, neither recorded by the store (vLLM's canonical_format)
  // nor given (StoreOptions::memory_format): equal-sized layouts cannot be told apart by size.
  bool layout_assumed = false;
  // The element of value (kv, layer, token, head, 0): the one place the stride rule is written.
  int64_t element(int64_t kv, int64_t layer, int64_t token, int64_t head) const {
    return kv * s_kv + layer * s_l + (token / tb) * s_tb + (token % tb) * s_t + (head / hr) * s_w + (head % hr) * s_h;
  }
  // Elements the values span: one past the last value's, which must lie inside the file.
  int64_t span() const { return element(1, layers - 1, tokens - 1, heads - 1) + head_dim; }
};

// Elements [first, first + n) of a block's values (`data` = the file's bytes past b.offset) as
// float32, for b.dtype f16, bf16 or f32 (a head's head_dim values are contiguous in every layout).
void decode_block_values(const BlockMap& b, const uint8_t* data, int64_t first, int64_t n, float* out);

// The map of `f` under `model`, or nullopt with `why` set when the store and options do not fix it
// (no model, a pool or dtype kvtool does not decode). A geometry the namespace contradicts is a
// finding (STORE_CONFIG_MISMATCH) added to `findings` once per namespace by check_store_config().
std::optional<BlockMap> block_map(const StoreScan& s, const StoreFile& f, const StoreModel& model,
                                  const StoreOptions& o, std::string& why);

// The namespace checks that need the model: layers, heads per rank, dtype, the vLLM folder digest,
// the model name. Appends findings; returns false when a namespace's blocks cannot be mapped.
void check_store_config(const StoreScan& s, const StoreModel* model, const StoreOptions& o,
                        std::vector<StoreFinding>& findings);

}  // namespace kvtool
