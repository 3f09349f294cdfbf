// Content-addressed prefix store (formats/store-v1.md): immutable artifact objects named by their
// SHA-256, and atomically replaced refs from the key a runtime knows before prefill (tenant, model,
// adapter set, position contract, prefix-token hash, kind, params digest) to an object.
//
// Nothing below the store directory is ever reached through a symlink: the store root is opened
// once and every file operation is relative to a directory descriptor with O_NOFOLLOW /
// AT_SYMLINK_NOFOLLOW, so a planted link cannot make put write, or gc delete, outside the store.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvtool/admission.h"
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

// One ref file (formats/store-v1.md §Ref).
struct StoreRef {
  StoreKey key;
  std::string object;  // 64 lowercase hex digits: the SHA-256 of the object file
  int64_t coverage_end = 0;
  std::string content_digest;
  int64_t created = 0;  // unix seconds
  std::string signer;   // key id (kvtool::key_id) of the artifact's signer; empty when unsigned
  json to_json() const;
};

// Ref files larger than this are damaged by definition (a full-length key needs under 4 KiB).
inline constexpr size_t kMaxStoreRefBytes = 8192;
// The one parser of ref text. Throws STORE_CORRUPT for text over kMaxStoreRefBytes, nesting
// deeper than a ref has (checked before JSON parsing), invalid JSON, a missing or wrongly typed
// field, or a key part check_store_key refuses.
StoreRef parse_store_ref(const std::string& text);

// Trust for put and get: `all` applies to every tenant (--pubkey, the *.pem files at the top of
// --trusted-keys); `tenant_keys` holds the keys of a trusted-keys directory's <tenant>/ folders,
// trusted for that tenant only. A tenant with its own folder always requires a signature.
struct StoreTrust {
  StoreTrust() = default;
  StoreTrust(TrustPolicy policy) : all(std::move(policy)) {}  // NOLINT: load and the pool pass theirs
  TrustPolicy all;
  std::map<std::string, std::vector<PublicKeyRaw>> tenant_keys;
};
// The one loader of trust options for every command that takes them (store put/get, load,
// verify): --pubkey files, a --trusted-keys directory (*.pem at its top, <tenant>/*.pem folders)
// and --require-signature. A given directory without any key is a USAGE error.
StoreTrust load_store_trust(const std::vector<std::string>& pubkeys, const std::string& trusted_dir,
                            bool require_signature);

// The policy one tenant's artifacts are admitted under: the keys for every tenant plus the tenant's
// own folder (which makes a signature required). With tenant folders configured but no key that
// holds for this tenant, a signed artifact (`is_signed`) is trusted under no key, and an unsigned
// one passes unless a signature is required.
TrustPolicy tenant_policy(const StoreTrust& t, const std::string& tenant, bool is_signed);

// A ref or directory entry that was skipped, and why (damaged refs never stop other tenants).
struct StoreWarning {
  std::string path;  // relative to the store directory
  std::string reason, message;
  json to_json() const;
};

struct StorePutResult {
  std::string object, path, signer;
  StoreKey key;
  bool object_written = false;  // false: the object was already stored (its time was refreshed)
  std::vector<StoreWarning> warnings;
  json to_json() const;
};
struct StoreGetResult {
  std::string path, object;
  StoreRef ref;
  std::vector<StoreWarning> warnings;
  json to_json() const;
};
struct StoreListing {
  std::vector<StoreRef> refs;
  std::vector<StoreWarning> warnings;
  json to_json() const;
};
struct StoreRmResult {
  int64_t refs_removed = 0;
  std::vector<StoreWarning> warnings;
  json to_json() const;
};
struct StoreGcResult {
  int64_t refs_removed = 0, objects_removed = 0, temps_removed = 0, grace_seconds = 0;
  std::vector<StoreWarning> warnings;  // damaged refs, and entries that are not plain files/directories
  json to_json() const;
};

struct StoreCreateOptions {
  bool group_shared = false;  // files 0640 / directories 0750 instead of 0600 / 0700
};

class Store {
 public:
  // Opens (with create: creates) the store. The directory itself may be a symlink the user made.
  explicit Store(std::string dir, bool create = false, StoreCreateOptions opt = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Admits the artifact under the trust of its tenant, copies it in (once; an existing object's
  // time is refreshed) and points its key at it. Never replaces a signed ref with an unsigned
  // artifact (SIGNATURE_REQUIRED) or one signed by another key (UNTRUSTED_KEY).
  StorePutResult put(const std::string& artifact, const StoreTrust& trust);
  // The admitted object for the key (STORE_MISS / STORE_AMBIGUOUS / STORE_CORRUPT / the admission
  // reason under the tenant's trust, as `kvtool load` applies it). Trust is applied before
  // ambiguity: a matching ref whose object this trust refuses is skipped with a warning, so only
  // several admissible matches are STORE_AMBIGUOUS; when none is admissible, the first one's reason.
  StoreGetResult get(const StoreKey& key, const StoreTrust& trust);
  // The refs of one tenant (BAD_STORE_KEY for a name get/put/rm would refuse); an empty tenant
  // lists every tenant.
  StoreListing ls(const std::string& tenant) const;
  StoreRmResult rm(const StoreKey& key);
  // Drops all but the newest `keep_last` refs per (tenant, model, adapter, prefix, kind, position
  // contract) when keep_last > 0, then removes objects no ref names and temporaries, both when older
  // than `grace_seconds`. Holds the store lock, so no put writes a ref meanwhile.
  StoreGcResult gc(int64_t keep_last, int64_t grace_seconds);

 private:
  struct RefFile {
    std::string name;
    StoreRef ref;
  };
  std::vector<RefFile> refs(std::vector<StoreWarning>& warnings) const;
  std::string write_object(const std::string& hex, const uint8_t* data, uint64_t size, bool& written);
  void check_replace(const StoreRef& ref, std::vector<StoreWarning>& warnings) const;
  void write_ref(const StoreRef& ref, std::vector<StoreWarning>& warnings);
  void sweep_shard(const std::string& shard, const std::map<std::string, bool>& live, int64_t grace,
                   StoreGcResult& res);
  std::string dir_;
  int root_ = -1, objects_ = -1, refs_ = -1;
  int file_mode_ = 0600, dir_mode_ = 0700;
};

}  // namespace kvtool
