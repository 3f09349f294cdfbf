// Source checks that read a dump: the payload digest, bind_source and check_source
// (formats/kvi-v1.md, "Source binding").
#include "kvtool/source_binding.h"

#include <algorithm>
#include <memory>

#include "kvtool/error.h"

namespace kvtool {

namespace {

// One pass over the dump feeding payload streams for several range ends at once.
// With finite_below >= 0, also requires every K/V value of rows [0, finite_below) to be finite.
std::vector<Digest> payload_digests(const DumpReader& dump, const std::vector<int64_t>& ends,
                                    int64_t finite_below = -1) {
  const auto& g = dump.info().geo;
  int64_t maxe = 0;
  for (auto e : ends) {
    KVT_CHECK(e >= 0 && e <= g.tokens, INTERNAL, "payload range end " << e << " beyond T");
    maxe = std::max(maxe, e);
  }
  std::vector<std::unique_ptr<Sha256>> hs;
  for (auto e : ends) {
    hs.push_back(std::make_unique<Sha256>());
    hs.back()->update("kvtool.payload.v1", 18);  // includes the terminating NUL
    uint8_t le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(static_cast<uint64_t>(e) >> (8 * i));
    hs.back()->update(le, 8);
  }
  size_t row_bytes = static_cast<size_t>(g.head_dim) * dtype_size(g.dtype);
  std::vector<uint8_t> buf(static_cast<size_t>(maxe) * row_bytes);
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.kv_heads; ++h)
      for (int which = 0; which < 2; ++which) {
        if (which == 0)
          dump.read_k_raw(l, h, 0, maxe, buf.data());
        else
          dump.read_v_raw(l, h, 0, maxe, buf.data());
        for (size_t i = 0; i < ends.size(); ++i) hs[i]->update(buf.data(), static_cast<size_t>(ends[i]) * row_bytes);
        if (finite_below > 0) {
          // Non-finite exactly when all exponent bits are set: a bit test, no conversion.
          size_t n = static_cast<size_t>(finite_below * g.head_dim), bad = n;
          if (g.dtype == DType::f32) {
            const uint32_t* w = reinterpret_cast<const uint32_t*>(buf.data());
            for (size_t i = 0; i < n && bad == n; ++i)
              if ((w[i] & 0x7f800000u) == 0x7f800000u) bad = i;
          } else {
            const uint16_t mask = g.dtype == DType::f16 ? 0x7c00 : 0x7f80;
            const uint16_t* w = reinterpret_cast<const uint16_t*>(buf.data());
            uint16_t any = 0;
            for (size_t i = 0; i < n; ++i) any |= static_cast<uint16_t>((w[i] & mask) == mask);
            if (any)
              for (size_t i = 0; i < n && bad == n; ++i)
                if ((w[i] & mask) == mask) bad = i;
          }
          KVT_CHECK(bad == n, NON_FINITE,
                    (which == 0 ? "K" : "V")
                        << " of layer " << l << ", kv head " << h << " has a non-finite value at row "
                        << static_cast<int64_t>(bad) / g.head_dim << " (below the committed frontier)");
        }
      }
  std::vector<Digest> out;
  for (auto& h : hs) out.push_back(h->finish());
  return out;
}

// Every dumped query must be finite (formats/kvdump-v1.md, "Values"); read_q rejects non-finite
// values, so one pass over the query heads checks them. Binding runs for `verify` and every build,
// which thereby accept the same dumps.
void check_queries(const DumpReader& dump) {
  const auto& g = dump.info().geo;
  if (!dump.info().has_q || g.q_tokens == 0) return;
  std::vector<float> buf(static_cast<size_t>(g.q_tokens * g.head_dim));
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.q_heads; ++h) dump.read_q(l, h, buf.data());
}

}  // namespace

Digest payload_digest(const DumpReader& dump, int64_t end) { return payload_digests(dump, {end})[0]; }

SourceBinding bind_source(const DumpReader& dump, int64_t coverage_end) {
  const auto& info = dump.info();
  KVT_CHECK(coverage_end >= 0 && coverage_end <= info.committed_frontier, USAGE,
            "coverage end " << coverage_end << " is beyond the committed frontier " << info.committed_frontier);
  check_queries(dump);
  SourceBinding b;
  b.id = info.id;
  b.geo = info.geo;
  b.committed_frontier = info.committed_frontier;
  b.coverage_end = coverage_end;
  // One stream when the coverage is the whole committed range (the common case): hashing twice
  // would double the cost of binding.
  auto pd = coverage_end == info.committed_frontier
                ? std::vector<Digest>(2, payload_digests(dump, {coverage_end}, info.committed_frontier)[0])
                : payload_digests(dump, {coverage_end, info.committed_frontier}, info.committed_frontier);
  b.payload_sha256 = to_hex(pd[0]);
  b.content_digest = to_hex(content_digest(info.id, info.geo, coverage_end, pd[0]));
  Digest cf = content_digest(info.id, info.geo, info.committed_frontier, pd[1]);
  b.snapshot_digest = to_hex(snapshot_digest(info.id, info.geo, info.committed_frontier, cf));
  if (info.has_tokens) b.prefix_tokens_sha256 = to_hex(prefix_tokens_digest(dump.tokens(), coverage_end));
  return b;
}

void check_source_fields(const SourceBinding& r, const DumpReader& dump) {
  const auto& info = dump.info();
  const auto& d = info.id;
  KVT_CHECK(d.tenant_namespace == r.id.tenant_namespace, TENANT_MISMATCH,
            "the dump belongs to tenant '" << d.tenant_namespace << "' but the artifact was built for tenant '"
                                           << r.id.tenant_namespace << "'");
  KVT_CHECK(
      d.model_artifact_sha256 == r.id.model_artifact_sha256, MODEL_MISMATCH,
      "the dump comes from model " << d.model_artifact_sha256 << ", the artifact from " << r.id.model_artifact_sha256);
  KVT_CHECK(d.checkpoint_generation == r.id.checkpoint_generation, CHECKPOINT_MISMATCH,
            "checkpoint generation " << d.checkpoint_generation << " differs from the artifact's "
                                     << r.id.checkpoint_generation);
  KVT_CHECK(
      d.adapter_set_sha256 == r.id.adapter_set_sha256, ADAPTER_MISMATCH,
      "the dump's adapter set " << d.adapter_set_sha256 << " differs from the artifact's " << r.id.adapter_set_sha256);
  KVT_CHECK(canonical_rope_config(d.rope_config) == canonical_rope_config(r.id.rope_config), ROPE_MISMATCH,
            "the dump's rope_config " << d.rope_config << " differs from the artifact's " << r.id.rope_config);
  KVT_CHECK(d.position_contract == r.id.position_contract, POSITION_CONTRACT_MISMATCH,
            "position contract '" << d.position_contract << "' differs from the artifact's '" << r.id.position_contract
                                  << "'");
  KVT_CHECK(d.representation == r.id.representation, REPRESENTATION_MISMATCH,
            "representation '" << d.representation << "' differs from the artifact's '" << r.id.representation << "'");
  KVT_CHECK(d.q_to_kv_head == r.id.q_to_kv_head, HEAD_MAP_MISMATCH,
            "the dump's q_to_kv_head mapping differs from the artifact's");
  const auto& g = info.geo;
  KVT_CHECK(g.layers == r.geo.layers && g.kv_heads == r.geo.kv_heads && g.head_dim == r.geo.head_dim &&
                g.dtype == r.geo.dtype,
            GEOMETRY_MISMATCH,
            "the dump is [L=" << g.layers << ", H_kv=" << g.kv_heads << ", d=" << g.head_dim << "] "
                              << dtype_name(g.dtype) << ", the artifact was built from [L=" << r.geo.layers << ", H_kv="
                              << r.geo.kv_heads << ", d=" << r.geo.head_dim << "] " << dtype_name(r.geo.dtype));
  if (!r.prefix_tokens_sha256.empty() && info.has_tokens && r.coverage_end <= g.tokens) {
    std::string now = to_hex(prefix_tokens_digest(dump.tokens(), r.coverage_end));
    KVT_CHECK(now == r.prefix_tokens_sha256, PREFIX_MISMATCH,
              "the dump's token ids of the prefix [0, " << r.coverage_end
                                                        << ") differ from the prefix the artifact was built for");
  }
  KVT_CHECK(r.coverage_end <= info.committed_frontier, COVERAGE_BEYOND_FRONTIER,
            "the artifact covers rows [0, " << r.coverage_end << ") but the dump commits only [0, "
                                            << info.committed_frontier << ")");
}

void check_source_rows(const SourceBinding& r, const DumpReader& dump) {
  const auto& info = dump.info();
  const auto& d = info.id;
  const auto& g = info.geo;
  Digest pd = payload_digest(dump, r.coverage_end);
  KVT_CHECK(to_hex(pd) == r.payload_sha256, PAYLOAD_MISMATCH,
            "the dump's K/V rows in [0, " << r.coverage_end << ") differ from the rows the artifact was built from");
  std::string cd = to_hex(content_digest(d, g, r.coverage_end, pd));
  KVT_CHECK(
      cd == r.content_digest, STALE_SOURCE,
      "the content digest of [0, " << r.coverage_end << ") is " << cd << ", the artifact records " << r.content_digest);
}

void check_source(const SourceBinding& r, const DumpReader& dump, bool strict_snapshot) {
  check_source_fields(r, dump);
  check_source_rows(r, dump);
  if (strict_snapshot) {
    SourceBinding now = bind_source(dump, r.coverage_end);
    KVT_CHECK(now.snapshot_digest == r.snapshot_digest, SNAPSHOT_MISMATCH,
              "strict_snapshot: the dump's snapshot digest " << now.snapshot_digest << " differs from the recorded "
                                                             << r.snapshot_digest
                                                             << " (generations or frontier changed)");
  }
}

}  // namespace kvtool
