// Shared by the libFuzzer targets (fuzz/README.md): what counts as a finding, and the query pass
// that takes an admitted artifact through its selectors the way `kvtool query` does
// (tools/kvtool/commands/query.cpp).
#pragma once
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "kvtool/admission.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/query.h"

namespace kvtool::fuzz {

// The fuzzer's bytes read front to back as a structure's choices: zeros once they run out.
struct FuzzBytes {
  const uint8_t* p;
  size_t n, at = 0;
  uint8_t u8() { return at < n ? p[at++] : 0; }
  std::vector<uint8_t> take(size_t want) {
    const size_t k = std::min(want, n - at);
    std::vector<uint8_t> out(p + at, p + at + k);
    at += k;
    return out;
  }
};

// Rejected input is fine when it carries a reason a person can act on (exit 1 or 2 in the CLI).
// INTERNAL, any exception that is not a kvtool::Error (exit 4 in the CLI)
// and out-of-memory (a bounded input must not need unbounded memory) are findings, so
// the target aborts and libFuzzer keeps the input.
inline void on_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    if (err.reason() != Reason::INTERNAL && err.reason() != Reason::OUT_OF_MEMORY) return;
    std::fprintf(stderr, "fuzz finding: %s: %s\n", err.reason_name(), err.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fuzz finding: std::bad_alloc escaped\n");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "fuzz finding: exception that is not a kvtool::Error: %s\n", ex.what());
  } catch (...) {
    std::fprintf(stderr, "fuzz finding: unknown exception\n");
  }
  std::abort();
}

// One query per part listed in kind_data.parts, through the first query head that maps to the
// part's kv head, at the last covered row. Keys (lsh) are synthetic rows, bounded in size.
inline void query_every_part(const ArtifactReader& r) {
  const SourceBinding& src = r.source();
  const int64_t dim = src.geo.head_dim, end = src.coverage_end;
  if (dim <= 0 || dim > 4096 || end <= 0) return;
  SelectorSet sel(r);
  const auto params = sel.params();
  std::vector<float> q(static_cast<size_t>(dim));
  for (int64_t i = 0; i < dim; ++i) q[static_cast<size_t>(i)] = static_cast<float>((i % 7) - 3) * 0.25f;
  std::vector<float> krows;
  KeyRows keys;
  if (sel.kind().needs_keys) {
    if (end * dim > (int64_t(1) << 22)) return;  // keep an iteration cheap; not a finding
    krows.resize(static_cast<size_t>(end * dim));
    for (size_t i = 0; i < krows.size(); ++i) krows[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.1f;
    keys = KeyRows{krows.data(), end, dim};
  }
  const json& parts = r.manifest()["kind_data"].value("parts", json::array());
  int queries = 0;
  for (const auto& p : parts) {
    if (!p.is_object() || !p.contains("layer") || !p.contains("kv_head")) continue;
    if (!p["layer"].is_number_integer() || !p["kv_head"].is_number_integer()) continue;
    const int64_t layer = p["layer"].get<int64_t>(), kv = p["kv_head"].get<int64_t>();
    for (size_t h = 0; h < src.id.q_to_kv_head.size() && static_cast<int64_t>(h) < src.geo.q_heads; ++h) {
      if (src.id.q_to_kv_head[h] != kv) continue;
      sel.query(layer, static_cast<int64_t>(h), q.data(), end - 1, *params, sel.kind().needs_keys ? &keys : nullptr);
      break;
    }
    if (++queries == 16) break;
  }
  // The last query head the binding claims: SelectorSet must check it against the head map itself
  // (a binding whose q_heads is larger than its q_to_kv_head).
  if (!parts.empty() && src.geo.q_heads > 0 && src.geo.q_heads <= (int64_t(1) << 20)) {
    const auto& p = parts.front();
    if (p.is_object() && p.value("layer", json()).is_number_integer())
      sel.query(p["layer"].get<int64_t>(), src.geo.q_heads - 1, q.data(), end - 1, *params,
                sel.kind().needs_keys ? &keys : nullptr);
  }
}

// Admission (signature, digests, structure) and then the query pass; rejected input returns.
inline void admit_and_query(const ArtifactReader& r) {
  admit_artifact(r, {});
  query_every_part(r);
}

// A few rows of every array of an accepted dump, inside the geometry the reader validated: what
// `kvtool verify` and the readers touch (fuzz_dump, fuzz_dump_struct).
inline void read_dump_rows(const DumpReader& d) {
  const DumpInfo& in = d.info();
  const int64_t dim = in.geo.head_dim, rows = std::min<int64_t>(in.geo.tokens, 4);
  std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(rows * dim, 1)));
  for (int64_t l = 0; l < std::min<int64_t>(in.geo.layers, 3); ++l)
    for (int64_t h = 0; h < std::min<int64_t>(in.geo.kv_heads, 3); ++h) {
      d.read_k(l, h, 0, rows, buf.data());
      d.read_v(l, h, in.geo.tokens - rows, in.geo.tokens, buf.data());
    }
  if (in.has_q && in.geo.q_heads > 0 && in.geo.q_tokens * dim <= (int64_t(1) << 22)) {
    std::vector<float> q(static_cast<size_t>(std::max<int64_t>(in.geo.q_tokens * dim, 1)));
    d.read_q(0, in.geo.q_heads - 1, q.data());
    d.q_positions();
  }
  if (in.geo.tokens <= (int64_t(1) << 22)) {
    if (in.has_tokens) d.tokens();
    d.positions();
  }
}

}  // namespace kvtool::fuzz
