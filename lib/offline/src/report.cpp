#include "kvtool/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "impl/h5util.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/kinds.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

struct SliceHealth {
  int64_t nan = 0, inf = 0, nonfinite_committed = 0, first_bad_row = -1;
  double max_abs = 0;
  std::vector<std::pair<int64_t, double>> top;  // (channel, max |x|)
};

SliceHealth slice_health(const std::vector<float>& x, int64_t rows, int64_t d, int64_t frontier, int top_channels) {
  SliceHealth h;
  std::vector<double> ch(static_cast<size_t>(d), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i) {
      float v = x[static_cast<size_t>(r * d + i)];
      if (!std::isfinite(v)) {
        (std::isnan(v) ? h.nan : h.inf)++;
        if (r < frontier) {
          h.nonfinite_committed++;
          if (h.first_bad_row < 0) h.first_bad_row = r;
        }
        continue;
      }
      double a = std::fabs(v);
      h.max_abs = std::max(h.max_abs, a);
      ch[i] = std::max(ch[i], a);
    }
  std::vector<int64_t> idx(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return ch[a] > ch[b]; });
  for (int i = 0; i < top_channels && i < d; ++i) h.top.emplace_back(idx[i], ch[idx[i]]);
  return h;
}

json health_json(const SliceHealth& h) {
  json top = json::array();
  for (auto& [c, v] : h.top) top.push_back({{"channel", c}, {"max_abs", v}});
  return {{"nan", h.nan}, {"inf", h.inf}, {"max_abs", h.max_abs}, {"top_channels", top}};
}

json identity_json(const DumpInfo& info) {
  const auto& id = info.id;
  return {{"model_artifact_sha256", id.model_artifact_sha256},
          {"checkpoint_generation", id.checkpoint_generation},
          {"adapter_set_sha256", id.adapter_set_sha256},
          {"position_contract", id.position_contract},
          {"rope_config", id.rope_config},
          {"tenant_namespace", id.tenant_namespace},
          {"namespace_generation", id.namespace_generation},
          {"request_generation", id.request_generation},
          {"cache_generation", id.cache_generation},
          {"publication_generation", id.publication_generation},
          {"q_to_kv_head", id.q_to_kv_head},
          {"representation", id.representation}};
}

bool is_hex64(const std::string& s) {
  Digest d;
  return from_hex(s, d);
}

}  // namespace

FileKind detect_file_kind(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open '" << path << "'");
  if (looks_like_artifact(path)) return FileKind::artifact;
  // A damaged header still leaves the footer magic: report it as an artifact (BAD_MAGIC).
  f.seekg(0, std::ios::end);
  if (f.tellg() >= 4) {
    char tail[4] = {};
    f.seekg(-4, std::ios::end);
    f.read(tail, 4);
    if (f.gcount() == 4 && std::string(tail, 4) == "KVI1") return FileKind::artifact;
  }
  if (looks_like_hdf5(path)) return FileKind::dump;
  return FileKind::unknown;
}

json inspect_dump(const std::string& path, int top_channels) {
  DumpReader r(path);
  const auto& info = r.info();
  const auto& g = info.geo;
  size_t es = dtype_size(g.dtype);
  json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["type"] = "kvdump";
  j["path"] = path;
  j["kvdump_version"] = 1;
  j["synthetic"] = info.synthetic;
  j["generator"] = info.generator;
  j["geometry"] = {{"layers", g.layers}, {"kv_heads", g.kv_heads}, {"q_heads", g.q_heads}, {"tokens", g.tokens},
                   {"head_dim", g.head_dim}, {"dtype", dtype_name(g.dtype)}, {"q_tokens", g.q_tokens}};
  j["identity"] = identity_json(info);
  j["committed_frontier"] = info.committed_frontier;
  j["uncommitted_rows"] = g.tokens - info.committed_frontier;
  j["has"] = {{"q", info.has_q}, {"tokens", info.has_tokens}, {"positions", info.has_positions}};
  uint64_t per_token = 2ull * g.layers * g.kv_heads * g.head_dim * es;
  j["bytes"] = {{"per_token_all_layers", per_token},
                {"per_token_per_layer", per_token / static_cast<uint64_t>(g.layers)},
                {"kv_total", per_token * static_cast<uint64_t>(g.tokens)},
                {"q_total", static_cast<uint64_t>(g.layers * g.q_heads * g.q_tokens * g.head_dim) * es}};
  json health = json::array();
  std::vector<float> buf(static_cast<size_t>(g.tokens * g.head_dim));
  int64_t nan = 0, inf = 0, bad = 0;
  double mk = 0, mv = 0;
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.kv_heads; ++h) {
      r.read_k(l, h, 0, g.tokens, buf.data());
      SliceHealth hk = slice_health(buf, g.tokens, g.head_dim, info.committed_frontier, top_channels);
      r.read_v(l, h, 0, g.tokens, buf.data());
      SliceHealth hv = slice_health(buf, g.tokens, g.head_dim, info.committed_frontier, top_channels);
      nan += hk.nan + hv.nan;
      inf += hk.inf + hv.inf;
      bad += hk.nonfinite_committed + hv.nonfinite_committed;
      mk = std::max(mk, hk.max_abs);
      mv = std::max(mv, hv.max_abs);
      health.push_back({{"layer", l}, {"kv_head", h}, {"k", health_json(hk)}, {"v", health_json(hv)}});
    }
  j["health"] = health;
  j["health_summary"] = {{"nan", nan}, {"inf", inf}, {"nonfinite_committed", bad}, {"max_abs_k", mk}, {"max_abs_v", mv}};
  return j;
}

json verify_dump(const std::string& path) {
  DumpReader r(path);
  const auto& info = r.info();
  const auto& g = info.geo;
  KVT_CHECK(is_hex64(info.id.model_artifact_sha256), BAD_ATTRIBUTE,
            "model_artifact_sha256 is not a 64-digit hex SHA-256: '" << info.id.model_artifact_sha256 << "'");
  KVT_CHECK(is_hex64(info.id.adapter_set_sha256), BAD_ATTRIBUTE,
            "adapter_set_sha256 is not a 64-digit hex SHA-256: '" << info.id.adapter_set_sha256 << "'");
  canonical_rope_config(info.id.rope_config);
  KVT_CHECK(!info.id.tenant_namespace.empty(), BAD_ATTRIBUTE, "tenant_namespace is empty");
  KVT_CHECK(!info.id.representation.empty() && !info.id.position_contract.empty(), BAD_ATTRIBUTE,
            "representation and position_contract must not be empty");
  std::vector<float> buf(static_cast<size_t>(info.committed_frontier * g.head_dim));
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.kv_heads; ++h)
      for (int which = 0; which < 2; ++which) {
        if (which == 0)
          r.read_k(l, h, 0, info.committed_frontier, buf.data());
        else
          r.read_v(l, h, 0, info.committed_frontier, buf.data());
        for (size_t i = 0; i < buf.size(); ++i)
          KVT_CHECK(std::isfinite(buf[i]), NON_FINITE,
                    (which == 0 ? "K" : "V") << " of layer " << l << ", kv head " << h << " has a non-finite value at row "
                                             << static_cast<int64_t>(i) / g.head_dim << ", channel "
                                             << static_cast<int64_t>(i) % g.head_dim << " (below the committed frontier "
                                             << info.committed_frontier << ")");
      }
  if (info.has_positions) {
    auto p = r.positions();
    for (size_t i = 1; i < p.size(); ++i)
      KVT_CHECK(p[i] > p[i - 1], BAD_ATTRIBUTE, "/kv/positions is not strictly increasing at row " << i);
  }
  SourceBinding b = bind_source(r, info.committed_frontier);
  json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["ok"] = true;
  j["type"] = "kvdump";
  j["path"] = path;
  j["committed_frontier"] = info.committed_frontier;
  j["uncommitted_rows"] = g.tokens - info.committed_frontier;
  j["content_digest"] = b.content_digest;
  j["snapshot_digest"] = b.snapshot_digest;
  j["checks"] = {"attributes", "shapes", "head_map", "frontier", "finite_committed_rows"};
  return j;
}

json inspect_artifact(const std::string& path) {
  ArtifactReader r(path);
  json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["type"] = "kvi";
  j["path"] = path;
  j["format_version"] = r.manifest()["format_version"];
  j["file_bytes"] = r.file_size();
  j["kind"] = r.kind();
  j["manifest_sha256"] = to_hex(r.manifest_digest());
  j["manifest_bytes"] = r.manifest_text().size();
  j["manifest"] = r.manifest();
  uint64_t raw = 0, stored = 0;
  json secs = json::array();
  for (const auto& s : r.sections()) {
    raw += s.raw_size;
    stored += s.stored_size;
    secs.push_back(s.to_json());
  }
  j["sections"] = secs;
  j["section_bytes"] = {{"raw", raw}, {"stored", stored}, {"count", r.sections().size()}};
  if (r.is_signed())
    j["signature"] = {{"algorithm", "ed25519"}, {"key_id", key_id(*r.signer())}};
  else
    j["signature"] = nullptr;
  j["source"] = r.source().to_json();
  if (const KindSpec* k = find_kind(r.kind()); k && k->summarize) j["kind_summary"] = k->summarize(r);
  return j;
}

json verify_artifact(const std::string& path, const VerifyOptions& opt) {
  ArtifactReader r(path);
  r.verify_sections();
  validate_kind(r);
  r.verify_signature(opt.trusted_keys, opt.require_signature);
  json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["ok"] = true;
  j["type"] = "kvi";
  j["path"] = path;
  j["kind"] = r.kind();
  j["manifest_sha256"] = to_hex(r.manifest_digest());
  j["sections_verified"] = r.sections().size();
  j["signed"] = r.is_signed();
  if (r.is_signed()) j["key_id"] = key_id(*r.signer());
  j["signature_trusted"] = r.is_signed() && !opt.trusted_keys.empty();
  j["content_digest"] = r.source().content_digest;
  j["coverage"] = {0, r.source().coverage_end};
  if (!opt.source.empty()) {
    DumpReader d(opt.source);
    check_source(r.source(), d, opt.strict_snapshot);
    j["source_checked"] = opt.source;
    j["strict_snapshot"] = opt.strict_snapshot;
  }
  return j;
}

json export_artifact(const std::string& artifact_path, const std::string& out_path) {
  using namespace h5;
  ArtifactReader r(artifact_path);
  r.verify_sections();
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  silence_h5();
  AtomicOutput out(out_path, true);
  out.release_fd();
  {
    Hid f(H5Fcreate(out.temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    KVT_CHECK(f.ok(), IO_ERROR, "cannot create HDF5 file '" << out_path << "'");
    write_str_attr(f, "kvi_manifest", r.manifest_text());
    write_str_attr(f, "kvi_manifest_sha256", to_hex(r.manifest_digest()));
    write_str_attr(f, "kind", r.kind());
    Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl, 1);
    for (const auto& s : r.sections()) {
      std::vector<uint8_t> bytes = r.read_section(s);
      std::string name = s.layer >= 0 ? "/parts/layer_" + std::to_string(s.layer) + "/kv_head_" +
                                            std::to_string(s.kv_head) + "/" + s.name
                                      : "/sections/" + s.name;
      std::vector<hsize_t> dims(s.shape.begin(), s.shape.end());
      if (dims.empty()) dims.push_back(1);
      Hid sp(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
      hid_t t = s.dtype == "u8" ? H5T_STD_U8LE : s.dtype == "u16" ? H5T_STD_U16LE : s.dtype == "u32" ? H5T_STD_U32LE
              : s.dtype == "u64" ? H5T_STD_U64LE : s.dtype == "i32" ? H5T_STD_I32LE : s.dtype == "i64" ? H5T_STD_I64LE
              : s.dtype == "f32" ? H5T_IEEE_F32LE : f16_type();
      Hid ds(H5Dcreate2(f, name.c_str(), t, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
      KVT_CHECK(ds.ok(), IO_ERROR, "cannot create dataset " << name);
      if (!bytes.empty())
        KVT_CHECK(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0, IO_ERROR, "cannot write " << name);
      write_str_attr(ds, "sha256", s.sha256);
      write_str_attr(ds, "kvi_dtype", s.dtype);
    }
    KVT_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0, IO_ERROR, "cannot flush '" << out_path << "'");
  }
  out.commit();
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"artifact", artifact_path}, {"output", out_path},
          {"sections", r.sections().size()}};
}

}  // namespace kvtool
