// Helpers shared by the unit tests and kvtool-testgen.
#pragma once
#include <cstring>
#include <functional>
#include <string>

#include "kvtool/artifact.h"
#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "kvtool/pool.h"
#include "kvtool/producers.h"

namespace kvtool::test {

// A pool publication of `art` under `key` with nothing else checked.
inline PublishRequest publish_request(const std::string& key, const std::string& art, bool device = false) {
  PublishRequest r;
  r.key = key;
  r.artifact = art;
  r.device = device;
  return r;
}

// A fresh temporary directory removed at destruction.
struct TempDir {
  TempDir();
  ~TempDir();
  std::string path;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string shared_dir();  // $KVTOOL_SHARED or ../shared relative to the source tree
std::string source_dir();  // the source tree (fixtures committed under fuzz/corpus/)

// Small synthetic dump: L=2, H_kv=2, H_q=4, d=16, T=48, f32.
void small_dump(const std::string& path, uint64_t seed = 7, DType dt = DType::f32, const IdentityOptions& id = {});

// f32 synthetic dump for the index-kind tests: `layers` layers, 2 kv heads, 4 query heads, head dim
// `head_dim`, `tokens` rows, queries of the last `query_count` positions.
void kind_dump(const std::string& path, int64_t tokens, uint64_t seed, int64_t query_count, int64_t head_dim = 16,
               int64_t layers = 2);
// Build options writing `out` quietly with `threads` workers and `seed`.
BuildOptions quiet_build(const std::string& out, int threads = 1, uint64_t seed = 0);

// Copies a dump, letting `edit` change the spec and `poke` change K/V of each (layer, head) slice.
void copy_dump(const std::string& src, const std::string& dst, const std::function<void(DumpSpec&)>& edit,
               const std::function<void(int64_t, int64_t, std::vector<float>&, std::vector<float>&)>& poke = {});

// A "container-test" artifact over [0, coverage): per part a keys section (f32, stored as is or
// zstd) and a u16 section; plus one part-less u8 section.
void write_test_artifact(const std::string& dump, const std::string& out, const SigningKey* key = nullptr,
                         int64_t coverage = -1, int zstd_level = 3);

// Rewrites artifact `r` into `out` with valid digests, letting `edit` change the raw bytes of the
// sections of part (layer, kv_head) and `meta` the kind_data: forged artifacts for verify tests.
void forge_artifact(const ArtifactReader& r, const std::string& out, int64_t layer, int64_t kv_head,
                    const std::function<void(const SectionEntry&, std::vector<uint8_t>&)>& edit,
                    const std::function<void(json&)>& meta = {});

// A re-packer: drops sections, overwrites every byte of others, sets manifest members (JSON
// pointers; the params digest is recomputed), then writes every digest anew, so that only the
// structure is wrong. Sections are named "NAME@LAYER,HEAD", or "NAME" when artifact-wide.
struct Repack {
  std::vector<std::string> drop;
  std::vector<std::pair<std::string, int>> fill;
  std::vector<std::pair<std::string, json>> set;
};
void repack_artifact(const std::string& in, const std::string& out, const Repack& rp);

// One section's raw bytes as a vector of T.
template <typename T>
std::vector<T> section_as(const ArtifactReader& r, const char* name, int64_t layer, int64_t kv_head) {
  auto b = r.read_section(*r.find(name, layer, kv_head));
  std::vector<T> v(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// The reason code of the Error `f` throws, or "OK".
std::string reason_of(const std::function<void()>& f);

std::vector<uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<uint8_t>& b);
// Rewrites an artifact with an edited manifest and a recomputed manifest digest (a "forger" who
// knows the format), keeping sections and the signature block bytes.
void rewrite_manifest(const std::string& path, const std::function<void(json&)>& edit, bool canonical = true);

}  // namespace kvtool::test
