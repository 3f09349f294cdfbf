// The store kinds behind kvtool/cache_store.h (src/cache_store.cpp): each kind names the entries of
// its tree, checks its namespaces against the model and maps its block files. Internal to
// lib/snapshot.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "kvtool/cache_store.h"

namespace kvtool::stores {

struct StoreKind {
  const char* name;
  // Whether the tree's entries look like this store (by names and small files only).
  bool (*probe)(const DirectoryTree& tree, const std::vector<TreeEntry>& entries);
  // Fills s.namespaces, s.files and s.findings from the entries.
  void (*scan)(const DirectoryTree& tree, const std::vector<TreeEntry>& entries, const StoreOptions& o, StoreScan& s);
  void (*check)(const StoreScan& s, const StoreModel* model, const StoreOptions& o, std::vector<StoreFinding>& out);
  std::optional<BlockMap> (*map)(const StoreScan& s, const StoreFile& f, const StoreModel& m, const StoreOptions& o,
                                 std::string& why);
};

const StoreKind& vllm_kind();
const StoreKind& lmcache_kind();
const StoreKind& sglang_kind();

// ---- shared by the kinds (cache_store.cpp) ----

void add_finding(std::vector<StoreFinding>& out, Reason r, const std::string& path, const std::string& message);
// A temporary of a write in flight: a warning while it is younger than kStaleTempSeconds, a failure
// (FOREIGN_FILE) once older — its writer died.
void add_temporary(const TreeEntry& e, StoreScan& s, const std::string& how);
// An entry that is not a regular file (link, special file) or is empty: FOREIGN_FILE, true.
bool refuse_non_file(const TreeEntry& e, StoreScan& s);
// A file role StoreFile with the entry.
StoreFile file_of(const TreeEntry& e, StoreFile::Role role);
// Adds the files of a namespace to its counters.
void count_blocks(StoreScan& s);
// Element bytes of a dtype spelt by a store ("float16", "half", "bfloat16", "fp8_e4m3", ...) and the
// name kvtool decodes it as (f16, bf16, f32; "" when size-checked only); 0 when unknown.
int64_t dtype_bytes(const std::string& spelt, std::string& decode_as);
bool all_hex(const std::string& s);
bool all_digits(const std::string& s);
// The directory part and the last component of a relative path.
std::string parent_of(const std::string& rel);
std::string leaf_of(const std::string& rel);
// The product of the factors, or 0 when it leaves int64 (factors are non-negative): a size no
// store can have, which a map reports rather than computes wrong.
int64_t product(std::initializer_list<int64_t> factors);
// Heads per rank: the model's kv heads divided by `ranks`, or 0 with a finding when it does not divide.
int64_t heads_per_rank(const StoreModel& m, int64_t ranks, std::string& why);

}  // namespace kvtool::stores
