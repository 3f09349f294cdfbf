#include "kvtool/identity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "kvtool/half.h"

#include "kvtool/canonical.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

enum Tag : uint16_t {
  kModel = 1,
  kCheckpoint = 2,
  kAdapter = 3,
  kPositionContract = 4,
  kRope = 5,
  kRepresentation = 6,
  kTenant = 7,
  kHeadMap = 8,
  kLayers = 9,
  kKvHeads = 10,
  kHeadDim = 11,
  kDtype = 12,
  kRangeEnd = 13,
  kPayload = 14,
  kNamespaceGen = 20,
  kRequestGen = 21,
  kCacheGen = 22,
  kPublicationGen = 23,
  kTokens = 24,
  kFrontier = 25,
  kContent = 26,
};

void identity_fields(CanonicalHasher& h, const DumpIdentity& id, const DumpGeometry& g) {
  h.str(kModel, id.model_artifact_sha256);
  h.i64(kCheckpoint, id.checkpoint_generation);
  h.str(kAdapter, id.adapter_set_sha256);
  h.str(kPositionContract, id.position_contract);
  h.str(kRope, canonical_rope_config(id.rope_config));
  h.str(kRepresentation, id.representation);
  h.str(kTenant, id.tenant_namespace);
  h.i32_array(kHeadMap, id.q_to_kv_head);
  h.u64(kLayers, static_cast<uint64_t>(g.layers));
  h.u64(kKvHeads, static_cast<uint64_t>(g.kv_heads));
  h.u64(kHeadDim, static_cast<uint64_t>(g.head_dim));
  h.str(kDtype, dtype_name(g.dtype));
}

std::string get_str(const json& j, const char* k) {
  KVT_CHECK(j.contains(k) && j[k].is_string(), BAD_MANIFEST,
            "source binding field '" << k << "' is missing or not a string");
  return j[k].get<std::string>();
}
int64_t get_int(const json& j, const char* k) {
  // is_number_integer() is also true for unsigned values above INT64_MAX, which get<int64_t> wraps.
  KVT_CHECK(j.contains(k) && ((j[k].is_number_integer() && !j[k].is_number_unsigned()) ||
                              (j[k].is_number_unsigned() && j[k].get<uint64_t>() <= uint64_t(INT64_MAX))),
            BAD_MANIFEST, "source binding field '" << k << "' is missing or not a 64-bit integer");
  return j[k].get<int64_t>();
}

void check_geometry(const DumpGeometry& g, int64_t frontier, std::optional<Reason> as) {
  auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  KVT_CHECK(in(g.layers, 1, kMaxDumpLayers) && in(g.kv_heads, 1, kMaxDumpHeads) && in(g.head_dim, 1, kMaxDumpHeadDim),
            as.value_or(SHAPE_MISMATCH),
            "the geometry [L=" << g.layers << ", H_kv=" << g.kv_heads << ", d=" << g.head_dim << "] is outside [1, "
                               << kMaxDumpLayers << "] x [1, " << kMaxDumpHeads << "] x [1, " << kMaxDumpHeadDim
                               << "]");
  KVT_CHECK(in(g.tokens, 0, kMaxDumpTokens) && in(g.q_tokens, 0, kMaxDumpTokens), as.value_or(SHAPE_MISMATCH),
            "T=" << g.tokens << " or T_q=" << g.q_tokens << " is outside [0, 2^31]");
  KVT_CHECK(in(g.q_heads, 1, kMaxDumpHeads), as.value_or(BAD_HEAD_MAP),
            "q_to_kv_head has " << g.q_heads << " query heads; expected 1 to " << kMaxDumpHeads);
  KVT_CHECK(g.q_heads % g.kv_heads == 0, as.value_or(BAD_HEAD_MAP),
            "q_to_kv_head has " << g.q_heads << " query heads, not a multiple of " << g.kv_heads << " kv heads");
  KVT_CHECK(in(frontier, 0, g.tokens), as.value_or(FRONTIER_BEYOND_T),
            "committed_frontier " << frontier << " is outside [0, T=" << g.tokens << "]");
}

constexpr uint32_t kBadUtf8 = 0xFFFFFFFF;

// Decodes the UTF-8 sequence at `i` and advances past it; kBadUtf8 for a malformed, overlong or
// surrogate sequence.
uint32_t next_code_point(const std::string& s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
  if (n < 0 || s.size() - i <= static_cast<size_t>(n)) return ++i, kBadUtf8;
  uint32_t cp = n == 0 ? c : c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    if ((b(i + static_cast<size_t>(k)) & 0xC0) != 0x80) return ++i, kBadUtf8;
    cp = (cp << 6) | (b(i + static_cast<size_t>(k)) & 0x3F);
  }
  i += static_cast<size_t>(n) + 1;
  static const uint32_t min_of[] = {0, 0x80, 0x800, 0x10000};
  if (cp < min_of[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kBadUtf8;
  return cp;
}

// C0/C1 controls, DEL, and the Unicode format (Cf) and separator characters that change how
// text around them displays without showing themselves.
bool is_control_or_format(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return true;
  static const std::pair<uint32_t, uint32_t> ranges[] = {{0x00AD, 0x00AD}, {0x061C, 0x061C}, {0x180E, 0x180E},
                                                         {0x200B, 0x200F}, {0x2028, 0x202E}, {0x2060, 0x206F},
                                                         {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB}, {0xE0000, 0xE007F}};
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

}  // namespace

std::string key_part_problem(const std::string& part) {
  if (part.empty()) return "is empty";
  if (part.size() > 256) return "is longer than 256 bytes";
  if (part == "." || part == "..") return "may not be '.' or '..'";
  for (unsigned char c : part)
    if (c < 0x20 || c == 0x7f || c == '/' || c == '\\')
      return "holds a '/', '\\', NUL or control character; key parts never name paths";
  // Key parts are printed (store ls, messages): a C1 control or an invisible format character
  // (U+202E reverses the text after it) would let one tenant's name pass for another's.
  for (size_t i = 0; i < part.size();) {
    const uint32_t cp = next_code_point(part, i);
    if (cp == kBadUtf8) return "is not valid UTF-8";
    if (is_control_or_format(cp))
      return "holds a control or invisible formatting character (bidi override, zero-width); names must print as "
             "they are";
  }
  return {};
}

bool is_hex_sha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}

void check_dump_identity(const DumpIdentity& id, const DumpGeometry& g, int64_t frontier, std::optional<Reason> as) {
  KVT_CHECK(is_hex_sha256(id.model_artifact_sha256), as.value_or(BAD_ATTRIBUTE),
            "model_artifact_sha256 is not a 64-digit hex SHA-256: '" << excerpt(id.model_artifact_sha256) << "'");
  KVT_CHECK(is_hex_sha256(id.adapter_set_sha256), as.value_or(BAD_ATTRIBUTE),
            "adapter_set_sha256 is not a 64-digit hex SHA-256: '" << excerpt(id.adapter_set_sha256) << "'");
  std::string why = key_part_problem(id.tenant_namespace);
  KVT_CHECK(why.empty(), as.value_or(BAD_ATTRIBUTE),
            "tenant_namespace '" << excerpt(id.tenant_namespace) << "' " << why);
  KVT_CHECK(!id.representation.empty() && !id.position_contract.empty(), as.value_or(BAD_ATTRIBUTE),
            "representation and position_contract must not be empty");
  try {
    canonical_rope_config(id.rope_config);
  } catch (const Error& e) {
    KVT_THROW(as.value_or(e.reason()), e.what());
  }
  check_geometry(g, frontier, as);
  KVT_CHECK(static_cast<int64_t>(id.q_to_kv_head.size()) == g.q_heads, as.value_or(BAD_HEAD_MAP),
            "q_to_kv_head has " << id.q_to_kv_head.size() << " entries but there are " << g.q_heads << " query heads");
  for (size_t i = 0; i < id.q_to_kv_head.size(); ++i)
    KVT_CHECK(id.q_to_kv_head[i] >= 0 && id.q_to_kv_head[i] < g.kv_heads, as.value_or(BAD_HEAD_MAP),
              "q_to_kv_head[" << i << "] = " << id.q_to_kv_head[i] << " is not a kv head in [0, " << g.kv_heads << ")");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::f32;
  if (s == "f16" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  KVT_THROW(USAGE, "unknown dtype '" << excerpt(s) << "' (expected f32, f16 or bf16)");
}

size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

std::string empty_adapter_set_digest() { return to_hex(sha256("kvtool.adapter-set.v1:[]")); }

std::string canonical_rope_config(const std::string& rope) {
  // A dump attribute or a manifest string: untrusted text, depth and size limits before parsing.
  json j = parse_untrusted_json(rope, "rope_config", Reason::BAD_ATTRIBUTE);
  KVT_CHECK(j.is_object(), BAD_ATTRIBUTE, "rope_config must be a JSON object");
  return canonical_json(j);
}

std::string llama_rope_config(int64_t head_dim, double theta) {
  return canonical_json(
      json{{"theta", theta}, {"scaling", "none"}, {"pairing", "interleaved"}, {"head_dim", head_dim}});
}

Digest content_digest(const DumpIdentity& id, const DumpGeometry& g, int64_t end, const Digest& payload) {
  CanonicalHasher h("kvtool.content.v1");
  identity_fields(h, id, g);
  h.u64(kRangeEnd, static_cast<uint64_t>(end));
  h.digest(kPayload, payload);
  return h.finish();
}

Digest snapshot_digest(const DumpIdentity& id, const DumpGeometry& g, int64_t frontier, const Digest& content) {
  CanonicalHasher h("kvtool.snapshot.v1");
  identity_fields(h, id, g);
  h.i64(kNamespaceGen, id.namespace_generation);
  h.i64(kRequestGen, id.request_generation);
  h.i64(kCacheGen, id.cache_generation);
  h.i64(kPublicationGen, id.publication_generation);
  h.u64(kTokens, static_cast<uint64_t>(g.tokens));
  h.u64(kFrontier, static_cast<uint64_t>(frontier));
  h.digest(kContent, content);
  return h.finish();
}

Digest prefix_tokens_digest(const std::vector<int64_t>& tokens, int64_t end) {
  CanonicalHasher h("kvtool.prefix-tokens.v1");
  h.u64(1, static_cast<uint64_t>(end));
  Sha256 ids;
  for (int64_t i = 0; i < end && i < static_cast<int64_t>(tokens.size()); ++i) {
    uint8_t le[8];
    for (int b = 0; b < 8; ++b) le[b] = static_cast<uint8_t>(static_cast<uint64_t>(tokens[i]) >> (8 * b));
    ids.update(le, 8);
  }
  h.digest(2, ids.finish());
  return h.finish();
}

json SourceBinding::to_json() const {
  json j;
  j["model_artifact_sha256"] = id.model_artifact_sha256;
  j["checkpoint_generation"] = id.checkpoint_generation;
  j["adapter_set_sha256"] = id.adapter_set_sha256;
  j["position_contract"] = id.position_contract;
  j["rope_config"] = id.rope_config;
  j["tenant_namespace"] = id.tenant_namespace;
  j["namespace_generation"] = id.namespace_generation;
  j["request_generation"] = id.request_generation;
  j["cache_generation"] = id.cache_generation;
  j["publication_generation"] = id.publication_generation;
  j["q_to_kv_head"] = id.q_to_kv_head;
  j["representation"] = id.representation;
  j["layers"] = geo.layers;
  j["kv_heads"] = geo.kv_heads;
  j["q_heads"] = geo.q_heads;
  j["head_dim"] = geo.head_dim;
  j["tokens"] = geo.tokens;
  j["dtype"] = dtype_name(geo.dtype);
  j["committed_frontier"] = committed_frontier;
  j["coverage_end"] = coverage_end;
  j["payload_sha256"] = payload_sha256;
  j["content_digest"] = content_digest;
  j["snapshot_digest"] = snapshot_digest;
  j["prefix_tokens_sha256"] = prefix_tokens_sha256;
  return j;
}

namespace {

// q_to_kv_head of a manifest: a JSON array of integers; an entry outside int32 cannot be a head.
std::vector<int32_t> head_map_from_json(const json& j) {
  KVT_CHECK(j.contains("q_to_kv_head") && j["q_to_kv_head"].is_array(), BAD_MANIFEST,
            "source binding field 'q_to_kv_head' is missing or not an array");
  const json& a = j["q_to_kv_head"];
  KVT_CHECK(a.size() <= static_cast<size_t>(kMaxDumpHeads), BAD_MANIFEST,
            "source binding q_to_kv_head has more than " << kMaxDumpHeads << " entries");
  std::vector<int32_t> out;
  for (const auto& x : a) {
    KVT_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < kMaxDumpHeads &&
                  !(x.is_number_unsigned() && x.get<uint64_t>() >= uint64_t(kMaxDumpHeads)),
              BAD_MANIFEST, "source binding q_to_kv_head entry " << x.dump() << " is not a kv head number");
    out.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return out;
}

// The digests a binding records: 64 hex digits (prefix_tokens_sha256 may be empty: no /kv/tokens).
void check_binding_digests(const SourceBinding& b) {
  for (const auto* d : {&b.payload_sha256, &b.content_digest, &b.snapshot_digest})
    KVT_CHECK(is_hex_sha256(*d), BAD_MANIFEST, "source binding digest '" << excerpt(*d) << "' is not 64 hex digits");
  KVT_CHECK(b.prefix_tokens_sha256.empty() || is_hex_sha256(b.prefix_tokens_sha256), BAD_MANIFEST,
            "source binding prefix_tokens_sha256 '" << excerpt(b.prefix_tokens_sha256) << "' is not 64 hex digits");
}

}  // namespace

SourceBinding SourceBinding::from_json(const json& j) {
  KVT_CHECK(j.is_object(), BAD_MANIFEST, "source binding is not an object");
  SourceBinding b;
  b.id.model_artifact_sha256 = get_str(j, "model_artifact_sha256");
  b.id.checkpoint_generation = get_int(j, "checkpoint_generation");
  b.id.adapter_set_sha256 = get_str(j, "adapter_set_sha256");
  b.id.position_contract = get_str(j, "position_contract");
  b.id.rope_config = get_str(j, "rope_config");
  b.id.tenant_namespace = get_str(j, "tenant_namespace");
  b.id.namespace_generation = get_int(j, "namespace_generation");
  b.id.request_generation = get_int(j, "request_generation");
  b.id.cache_generation = get_int(j, "cache_generation");
  b.id.publication_generation = get_int(j, "publication_generation");
  b.id.q_to_kv_head = head_map_from_json(j);
  b.id.representation = get_str(j, "representation");
  b.geo.layers = get_int(j, "layers");
  b.geo.kv_heads = get_int(j, "kv_heads");
  b.geo.q_heads = get_int(j, "q_heads");
  b.geo.head_dim = get_int(j, "head_dim");
  b.geo.tokens = get_int(j, "tokens");
  try {
    b.geo.dtype = parse_dtype(get_str(j, "dtype"));
  } catch (const Error&) {
    KVT_THROW(BAD_MANIFEST, "source binding has an unknown dtype");
  }
  b.committed_frontier = get_int(j, "committed_frontier");
  b.coverage_end = get_int(j, "coverage_end");
  b.payload_sha256 = get_str(j, "payload_sha256");
  b.content_digest = get_str(j, "content_digest");
  b.snapshot_digest = get_str(j, "snapshot_digest");
  b.prefix_tokens_sha256 = get_str(j, "prefix_tokens_sha256");
  // The same rules as a dump's attributes (one function), then what only a binding has.
  check_dump_identity(b.id, b.geo, b.committed_frontier, Reason::BAD_MANIFEST);
  KVT_CHECK(b.coverage_end >= 0 && b.coverage_end <= b.committed_frontier, BAD_MANIFEST,
            "source binding coverage_end " << b.coverage_end
                                           << " is outside [0, committed_frontier=" << b.committed_frontier << "]");
  check_binding_digests(b);
  return b;
}

}  // namespace kvtool
