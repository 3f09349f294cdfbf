// Content-addressed prefix store (formats/store-v1.md): immutable artifact objects named by their
// SHA-256, and atomically replaced refs from the key a runtime knows before prefill (tenant, model,
// adapter set, position contract, prefix-token hash, kind, params digest) to an object.
#pragma once
#include <string>
#include <vector>

#include "kvtool/json.h"

namespace kvtool {

struct StoreKey {
  std::string tenant, model, adapter, prefix_hash, kind;
  std::string params_digest;      // optional on get/rm: any params when empty (must be unambiguous)
  std::string position_contract;  // optional on get/rm
  json to_json() const;
};

// Throws BAD_STORE_KEY when a key part is empty where required, too long, or holds '/', NUL,
// control characters or is "." / "..".
void check_store_key(const StoreKey& k, bool need_params);

class Store {
 public:
  explicit Store(std::string dir, bool create = false);
  // Verifies the artifact, copies it in (once) and points its key at it. Returns the ref.
  json put(const std::string& artifact);
  // Path of the verified object for the key (STORE_MISS / STORE_AMBIGUOUS / the verify reason).
  json get(const StoreKey& key);
  json ls() const;
  json rm(const StoreKey& key);
  // Drops all but the newest `keep_last` refs per (tenant, model, adapter, prefix, kind) when
  // keep_last > 0, then removes objects no ref names whose file is older than `grace_seconds`.
  json gc(int64_t keep_last, int64_t grace_seconds);

 private:
  std::vector<std::pair<std::string, json>> refs() const;  // (ref file, ref json)
  std::string dir_;
};

}  // namespace kvtool
