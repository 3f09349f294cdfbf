// inspect, verify and seal of cache stores (formats/cache-stores.md, formats/seal-v1.md): what a
// store holds, every check that needs no reference (configuration against the model, sizes,
// values, names, ranks, vLLM's CRC32C), and seals — SHA-256 digests of every file — that catch the
// bit rot no stack detects, for a store or a single snapshot file. Each failure is a finding with a
// reason code and the file it names; verify fails when any finding is not a warning.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/cache_store.h"
#include "kvtool/json.h"
#include "kvtool/signing.h"
#include "kvtool/store_prompt.h"

namespace kvtool {

struct StoreCheckOptions {
  StoreOptions store;
  std::string model;                          // GGUF or Hugging Face config.json ("": no geometry checks, no values)
  int64_t sample = 0;                         // block files whose values are read, spread evenly (0: all of them)
  int threads = 1;                            // value reads and digests
  bool quiet = false;                         // no progress reports
  std::string seal;                           // verify only: compare with this seal ("" none)
  std::vector<PublicKeyRaw> trusted_keys;     // the seal must be signed by one of these (when any)
  int64_t shard_index = -1, shard_count = 0;  // verify --seal: compare this shard of the files only
  // verify only: the prompt whose blocks are found in the store and compared with what the GGUF
  // model (`model`) computes for its tokens (formats/cache-stores.md, "A prompt's blocks").
  std::vector<int32_t> prompt;
  StorePromptOptions prompt_options;
  std::optional<double> tolerance;  // of that comparison; default: default_model_tolerance
};

// The prompt's blocks against the model: the largest |store - model| / max|model| of a layer for
// K and V, and the first (position, layer, head) beyond the tolerance (-1 when none).
struct StoreContentReport {
  StorePromptFound found;
  double tolerance = 0, max_rel_err_k = 0, max_rel_err_v = 0;
  int64_t tokens = 0, first_position = -1, first_layer = -1, first_head = -1;
  json to_json() const;
};

// max|x| and non-finite values of one (layer, kv head) of the model, over the blocks read.
struct HeadHealth {
  std::string ns;  // the namespace
  int64_t layer = 0, head = 0;
  uint64_t values = 0, nonfinite = 0;
  double max_abs = 0;
};

struct StoreReport {
  std::string root, kind;
  std::vector<StoreNamespace> namespaces;
  int64_t blocks = 0, configs = 0, temporaries = 0, foreign = 0;
  uint64_t block_bytes = 0;
  int64_t blocks_read = 0;                                // block files whose values were read
  std::vector<std::pair<std::string, int64_t>> not_read;  // why values were not read, and how many blocks
  std::vector<HeadHealth> health;                         // per namespace, layer, head: those read
  std::vector<StoreFinding> findings;
  int64_t sealed_files = 0;                   // verify --seal: the files the seal names (this shard)
  std::optional<StoreContentReport> content;  // verify with a prompt
  bool ok() const;                            // no finding but warnings
  json to_json() const;
};

StoreReport inspect_store(const std::string& root, const StoreCheckOptions& o);
StoreReport verify_store(const std::string& root, const StoreCheckOptions& o);
// The content check alone: finds the prompt's blocks and compares them with the GGUF model `gguf`
// (a PAYLOAD_MISMATCH finding names the block holding the first differing position).
StoreContentReport check_store_prompt(const std::string& root, const StoreCheckOptions& o, const std::string& gguf,
                                      std::vector<StoreFinding>& findings);

// ---- seals (formats/seal-v1.md) ----

struct SealOptions {
  StoreOptions store;  // the kind, when the tree is a store (its temporaries are not sealed)
  int threads = 1;
  bool quiet = false;
  int64_t shard_index = 0, shard_count = 1;  // seal the files of this shard only
  std::string sign_key;                      // Ed25519 private key (PEM) to sign the seal with ("" unsigned)
  // A file of one JSON line per file hashed ("" none), so that an interrupted seal can resume:
  // with `resume`, files the journal recorded at their present size and modification time are not
  // hashed again (a journal is trusted as the seal it becomes). The caller removes it once the seal
  // is written.
  std::string journal;
  bool resume = false;
};

// The seal of a store directory or of one file, as JSON (the tool writes it atomically).
json make_seal(const std::string& path, const SealOptions& o);
// One seal from the seals of shards 0..N-1 of the same tree (BAD_SEAL when one is missing, twice,
// or of another tree); signed with `sign_key` when given.
json merge_seals(const std::vector<json>& shards, const std::string& sign_key);
// Reads a seal file (BAD_SEAL when malformed; IO_ERROR when unreadable).
json read_seal(const std::string& path);
// Compares `path` with the seal: changed, missing and extra files become SEAL_MISMATCH findings.
// The seal's signature is checked against `trusted` when any are given (BAD_SEAL otherwise). With
// shard_count > 0, only shard `shard_index` of the files is compared (the seal's own shard, or any
// shard of a whole seal: a large store checked by an array of jobs).
void check_seal(const std::string& path, const json& seal, const std::vector<PublicKeyRaw>& trusted, int threads,
                bool quiet, std::vector<StoreFinding>& findings, int64_t& sealed_files, int64_t shard_index = -1,
                int64_t shard_count = 0);

// CRC-32C (Castagnoli, reflected 0x82F63B78) of `n` bytes continuing `crc` (0 to start).
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace kvtool
