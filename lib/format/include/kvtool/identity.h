// Source identity (formats/kvi-v1.md, "Source binding"; formats/kvdump-v1.md for the attributes):
// the identity and geometry of a dump, the content digest of a covered row range, the snapshot
// digest of a whole dump, and the SourceBinding an artifact records. Format layer: no dump reader.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/json.h"
#include "kvtool/sha256.h"

namespace kvtool {

enum class DType { f32, f16, bf16 };
const char* dtype_name(DType t);
DType parse_dtype(const std::string& s);  // "f32|float32", "f16|float16", "bf16|bfloat16"; USAGE otherwise
size_t dtype_size(DType t);

// Identity attributes of a dump (formats/kvdump-v1.md, "Root attributes").
struct DumpIdentity {
  std::string model_artifact_sha256;
  int64_t checkpoint_generation = 0;
  std::string adapter_set_sha256;
  std::string position_contract = "post-rope-absolute-v1";
  std::string rope_config;  // JSON string
  std::string tenant_namespace = "default";
  int64_t namespace_generation = 0;
  int64_t request_generation = 0;
  int64_t cache_generation = 0;
  int64_t publication_generation = 0;
  std::vector<int32_t> q_to_kv_head;
  std::string representation;
};

// SHA-256 of the empty adapter set (the canonical digest of "no adapters").
std::string empty_adapter_set_digest();

struct DumpGeometry {
  int64_t layers = 0, kv_heads = 0, tokens = 0, head_dim = 0;
  int64_t q_heads = 0;   // length of q_to_kv_head
  int64_t q_tokens = 0;  // T_q of /kv/q; 0 when the dump has no queries
  DType dtype = DType::f32;
};

struct SourceBinding {
  DumpIdentity id;   // all identity attributes (generations recorded as provenance only)
  DumpGeometry geo;  // layers, kv_heads, head_dim, dtype are content; tokens/q_* provenance
  int64_t committed_frontier = 0;
  int64_t coverage_end = 0;
  std::string payload_sha256;        // SHA-256 of the K/V payload stream of rows [0, coverage_end)
  std::string content_digest;        // content_digest([0, coverage_end))
  std::string snapshot_digest;       // snapshot digest of the dump
  std::string prefix_tokens_sha256;  // SHA-256 of token ids [0, coverage_end) (empty without /kv/tokens)

  json to_json() const;
  static SourceBinding from_json(const json& j);  // BAD_MANIFEST on missing/mistyped fields
};

// Documented bounds on a dump's geometry (formats/kvdump-v1.md, "Limits"). They keep every size
// computed from a dump or a manifest far from overflow and bound the work a hostile file can ask for.
inline constexpr int64_t kMaxDumpLayers = 4096;
inline constexpr int64_t kMaxDumpHeads = 4096;  // kv heads and query heads alike
inline constexpr int64_t kMaxDumpHeadDim = 4096;
inline constexpr int64_t kMaxDumpTokens = int64_t(1) << 31;  // T and T_q

// The rule for a name that becomes a store key part or a path component (a tenant namespace among
// them): not empty, at most 256 bytes, not "." or "..", no '/', '\\', NUL or control character.
// Returns an empty string when `part` follows it, else what is wrong (a phrase). The store's key
// check and the dump reader both use it, so that a tenant a dump accepts is one the store accepts.
std::string key_part_problem(const std::string& part);

// True when `s` is exactly 64 hex digits (a SHA-256 as text).
bool is_hex_sha256(const std::string& s);

// Every rule formats/kvdump-v1.md states for the identity attributes and the geometry of a dump:
// digests are 64 hex digits, strings non-empty, the tenant a valid key part, rope_config a JSON
// object, the head map has q_heads entries in [0, kv_heads) with q_heads a multiple of kv_heads,
// dimensions within the limits above and 0 <= frontier <= T. A failure carries the reason the
// dump format gives that field, or `as` when given (a manifest's source binding uses BAD_MANIFEST).
// The dump reader and SourceBinding::from_json both call it, so both accept exactly the same.
void check_dump_identity(const DumpIdentity& id, const DumpGeometry& geo, int64_t committed_frontier,
                         std::optional<Reason> as = std::nullopt);

// Content digest from identity + geometry + a payload digest (no generations, no frontier).
Digest content_digest(const DumpIdentity& id, const DumpGeometry& geo, int64_t end, const Digest& payload);
// Snapshot digest: every identity attribute incl. generations, T, frontier, content digest of [0, frontier).
Digest snapshot_digest(const DumpIdentity& id, const DumpGeometry& geo, int64_t frontier,
                       const Digest& content_of_frontier);
Digest prefix_tokens_digest(const std::vector<int64_t>& tokens, int64_t end);

// Canonical text of a rope_config attribute (canonical JSON); BAD_ATTRIBUTE when not a JSON object.
std::string canonical_rope_config(const std::string& rope);

// rope_config JSON of the interleaved-pair RoPE used by llama2.c, by synth and by llama.cpp's NORM
// rope without scaling.
std::string llama_rope_config(int64_t head_dim, double theta = 10000.0);

}  // namespace kvtool
