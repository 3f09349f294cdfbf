// verify of snapshots (kvtool/report.h): a snapshot's rows against a dump's at the same positions,
// and the llama.cpp state-file check built on it (formats/llama-state.md, "Verify against a dump").
#include <algorithm>
#include <cmath>
#include <map>

#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/report.h"

namespace kvtool {

namespace {

// Largest |a - b| over the rows of one (layer, head), relative to max |b| of the dump's slice.
double slice_error(const float* a, const std::vector<float>& b, int64_t d, const std::vector<int64_t>& dump_rows) {
  double diff = 0, mx = 0;
  for (float y : b) mx = std::max(mx, static_cast<double>(std::fabs(y)));
  for (size_t t = 0; t < dump_rows.size(); ++t)
    for (int64_t i = 0; i < d; ++i) {
      const double x = a[static_cast<int64_t>(t) * d + i];
      diff = std::max(diff, std::fabs(x - b[static_cast<size_t>(dump_rows[t] * d + i)]));
    }
  return mx > 0 ? diff / mx : diff;
}

// The dump row of every snapshot row (matched by position); PAYLOAD_MISMATCH when one is missing.
std::vector<int64_t> dump_rows_for(const DumpReader& src, const SnapshotInfo& s) {
  std::map<int64_t, int64_t> at;
  const std::vector<int64_t> pos = src.positions();
  for (size_t i = 0; i < pos.size(); ++i) at[pos[i]] = static_cast<int64_t>(i);
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < s.geo.tokens; ++t) {
    const int64_t p = s.positions.empty() ? t : s.positions[static_cast<size_t>(t)];
    auto it = at.find(p);
    KVT_CHECK(it != at.end(), PAYLOAD_MISMATCH,
              "the snapshot holds position " << p << ", which the dump '" << src.path() << "' does not have");
    rows.push_back(it->second);
  }
  return rows;
}

}  // namespace

SnapshotComparison compare_snapshot_with_dump(KvSnapshot& snap, const std::string& dump_path) {
  DumpReader src(dump_path);
  const auto& g = src.info().geo;
  const DumpGeometry& m = snap.info().geo;
  KVT_CHECK(g.layers == m.layers && g.kv_heads == m.kv_heads && g.head_dim == m.head_dim, GEOMETRY_MISMATCH,
            "the dump has " << g.layers << " layers x " << g.kv_heads << " kv heads x d=" << g.head_dim
                            << "; the snapshot has " << m.layers << " x " << m.kv_heads << " x " << m.head_dim);
  const std::vector<int64_t> rows = dump_rows_for(src, snap.info());
  const int64_t d = m.head_dim, slice = m.tokens * d;
  std::vector<float> k, v, bk(static_cast<size_t>(g.tokens * d)), bv(bk.size());
  SnapshotComparison c;
  for (int64_t l = 0; l < m.layers; ++l) {
    snap.read_kv(l, k, v);
    double layer_err = 0;
    for (int64_t h = 0; h < m.kv_heads; ++h) {
      src.read_k(l, h, 0, g.tokens, bk.data());
      src.read_v(l, h, 0, g.tokens, bv.data());
      const double ek = slice_error(k.data() + h * slice, bk, d, rows);
      const double ev = slice_error(v.data() + h * slice, bv, d, rows);
      c.max_rel_err_k = std::max(c.max_rel_err_k, ek);
      c.max_rel_err_v = std::max(c.max_rel_err_v, ev);
      layer_err = std::max({layer_err, ek, ev});
    }
    c.layer_rel_err.push_back(layer_err);
  }
  return c;
}

json LlamaStateVerification::to_json() const {
  json j = state.to_json();
  j["ok"] = true;
  if (!source.empty()) {
    j["source"] = source;
    j["tolerance"] = tolerance;
    j["max_rel_err_k"] = max_rel_err_k;
    j["max_rel_err_v"] = max_rel_err_v;
    j["layer_rel_err"] = layer_rel_err;
  }
  if (model_check) j["model_check"] = model_check->to_json();
  return j;
}

LlamaStateVerification verify_llama_state(const std::string& path, const GgufModel* model, const LlamaStateOptions& o,
                                          const std::string& source_dump, std::optional<double> tolerance) {
  LlamaStateVerification v;
  v.state = inspect_llama_state(path, model, o);
  const LlamaStateInspection& s = v.state;
  if (!s.seq_id && s.seq_ids.size() > 1) {
    std::string ids;
    for (size_t i = 0; i < s.seq_ids.size() && i < 16; ++i) ids += (i ? ", " : "") + std::to_string(s.seq_ids[i]);
    KVT_THROW(USAGE, "the state file holds sequences " << ids << (s.seq_ids.size() > 16 ? ", ..." : "")
                                                       << "; choose one with seq_id");
  }
  KVT_CHECK(s.rows > 0, SHAPE_MISMATCH, "the state file holds no cells (an empty cache)");
  for (const auto& h : s.health)
    KVT_CHECK(h.nonfinite_k == 0 && h.nonfinite_v == 0, NON_FINITE,
              "the state file has " << h.nonfinite_k + h.nonfinite_v << " NaN/Inf values at layer " << h.layer
                                    << (model ? ", head " + std::to_string(h.head) : std::string()));
  if (source_dump.empty()) return v;
  KVT_CHECK(model, USAGE, "source needs gguf: the model gives the heads and head_dim to compare");
  v.source = source_dump;
  v.tolerance = tolerance.value_or(
      std::max(default_state_tolerance(s.layers.front().k_type), default_state_tolerance(s.layers.front().v_type)));
  SnapshotRequest r;
  r.inputs = {path};
  r.format = "llama-state";
  r.llama = o;
  r.gguf = model->path;
  const std::unique_ptr<KvSnapshot> snap = open_snapshot(r);
  const SnapshotComparison c = compare_snapshot_with_dump(*snap, source_dump);
  v.max_rel_err_k = c.max_rel_err_k;
  v.max_rel_err_v = c.max_rel_err_v;
  v.layer_rel_err = c.layer_rel_err;
  KVT_CHECK(v.max_rel_err_k <= v.tolerance && v.max_rel_err_v <= v.tolerance, PAYLOAD_MISMATCH,
            "the state's K/V differ from the dump '" << source_dump << "' by up to " << v.max_rel_err_k << " (K) and "
                                                     << v.max_rel_err_v << " (V) of max|x|; tolerance " << v.tolerance);
  return v;
}

}  // namespace kvtool
