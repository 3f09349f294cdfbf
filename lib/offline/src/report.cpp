#include "kvtool/report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "impl/h5util.h"
#include "kvtool/admission.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/kinds.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

SliceHealth slice_health(const std::vector<float>& x, int64_t rows, int64_t d, int64_t frontier, int top_channels) {
  SliceHealth h;
  std::vector<double> ch(static_cast<size_t>(d), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i) {
      float v = x[static_cast<size_t>(r * d + i)];
      if (!std::isfinite(v)) {
        (std::isnan(v) ? h.nan : h.inf)++;
        if (r < frontier) h.nonfinite_committed++;
        continue;
      }
      double a = std::fabs(v);
      h.max_abs = std::max(h.max_abs, a);
      ch[i] = std::max(ch[i], a);
    }
  std::vector<int64_t> idx(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return ch[a] > ch[b]; });
  for (int i = 0; i < top_channels && i < d; ++i) h.top_channels.push_back({idx[i], ch[idx[i]]});
  return h;
}

json identity_json(const DumpIdentity& id) {
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
  // A FIFO or a device would block or never end the reads below (threat model: special files).
  struct stat st {};
  KVT_CHECK(stat(path.c_str(), &st) == 0, IO_ERROR, "cannot open '" << path << "': " << std::strerror(errno));
  KVT_CHECK(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode), IO_ERROR,
            "'" << path << "' is not a regular file (a FIFO, socket or device): kvtool reads files and directories");
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
  if (looks_like_llama_state(path)) return FileKind::llama_state;
  return FileKind::unknown;
}

json SliceHealth::to_json() const {
  json top = json::array();
  for (const auto& c : top_channels) top.push_back({{"channel", c.channel}, {"max_abs", c.max_abs}});
  return {{"nan", nan}, {"inf", inf}, {"max_abs", max_abs}, {"top_channels", top}};
}

DumpInspection inspect_dump(const std::string& path, int top_channels) {
  DumpReader r(path);
  const auto& info = r.info();
  const auto& g = info.geo;
  const size_t es = dtype_size(g.dtype);
  DumpInspection d;
  d.path = path;
  d.synthetic = info.synthetic;
  d.generator = info.generator;
  d.geometry = g;
  d.identity = info.id;
  d.committed_frontier = info.committed_frontier;
  d.uncommitted_rows = g.tokens - info.committed_frontier;
  d.has_q = info.has_q;
  d.has_tokens = info.has_tokens;
  d.has_positions = info.has_positions;
  const uint64_t per_token = 2ull * g.layers * g.kv_heads * g.head_dim * es;
  d.bytes = {per_token, per_token / static_cast<uint64_t>(g.layers), per_token * static_cast<uint64_t>(g.tokens),
             static_cast<uint64_t>(g.layers * g.q_heads * g.q_tokens * g.head_dim) * es};
  std::vector<float> buf(static_cast<size_t>(g.tokens * g.head_dim));
  auto& sum = d.health_summary;
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.kv_heads; ++h) {
      PartHealth p{l, h, {}, {}};
      r.read_k(l, h, 0, g.tokens, buf.data());
      p.k = slice_health(buf, g.tokens, g.head_dim, info.committed_frontier, top_channels);
      r.read_v(l, h, 0, g.tokens, buf.data());
      p.v = slice_health(buf, g.tokens, g.head_dim, info.committed_frontier, top_channels);
      sum.nan += p.k.nan + p.v.nan;
      sum.inf += p.k.inf + p.v.inf;
      sum.nonfinite_committed += p.k.nonfinite_committed + p.v.nonfinite_committed;
      sum.max_abs_k = std::max(sum.max_abs_k, p.k.max_abs);
      sum.max_abs_v = std::max(sum.max_abs_v, p.v.max_abs);
      d.health.push_back(std::move(p));
    }
  return d;
}

json DumpInspection::to_json() const {
  const auto& g = geometry;
  json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["type"] = "kvdump";
  j["path"] = path;
  j["kvdump_version"] = 1;
  j["synthetic"] = synthetic;
  j["generator"] = generator;
  j["geometry"] = {{"layers", g.layers},    {"kv_heads", g.kv_heads}, {"q_heads", g.q_heads},
                   {"tokens", g.tokens},    {"head_dim", g.head_dim}, {"dtype", dtype_name(g.dtype)},
                   {"q_tokens", g.q_tokens}};
  j["identity"] = identity_json(identity);
  j["committed_frontier"] = committed_frontier;
  j["uncommitted_rows"] = uncommitted_rows;
  j["has"] = {{"q", has_q}, {"tokens", has_tokens}, {"positions", has_positions}};
  j["bytes"] = {{"per_token_all_layers", bytes.per_token_all_layers},
                {"per_token_per_layer", bytes.per_token_per_layer},
                {"kv_total", bytes.kv_total},
                {"q_total", bytes.q_total}};
  json parts = json::array();
  for (const auto& p : health)
    parts.push_back({{"layer", p.layer}, {"kv_head", p.kv_head}, {"k", p.k.to_json()}, {"v", p.v.to_json()}});
  j["health"] = parts;
  const auto& s = health_summary;
  j["health_summary"] = {{"nan", s.nan},
                         {"inf", s.inf},
                         {"nonfinite_committed", s.nonfinite_committed},
                         {"max_abs_k", s.max_abs_k},
                         {"max_abs_v", s.max_abs_v}};
  return j;
}

DumpVerification verify_dump(const std::string& path) {
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
                    (which == 0 ? "K" : "V")
                        << " of layer " << l << ", kv head " << h << " has a non-finite value at row "
                        << static_cast<int64_t>(i) / g.head_dim << ", channel " << static_cast<int64_t>(i) % g.head_dim
                        << " (below the committed frontier " << info.committed_frontier << ")");
      }
  if (info.has_positions) {
    auto p = r.positions();
    for (size_t i = 1; i < p.size(); ++i)
      KVT_CHECK(p[i] > p[i - 1], BAD_ATTRIBUTE, "/kv/positions is not strictly increasing at row " << i);
  }
  SourceBinding b = bind_source(r, info.committed_frontier);
  return {path, info.committed_frontier, g.tokens - info.committed_frontier, b.content_digest, b.snapshot_digest};
}

json DumpVerification::to_json() const {
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"type", "kvdump"},
          {"path", path},
          {"committed_frontier", committed_frontier},
          {"uncommitted_rows", uncommitted_rows},
          {"content_digest", content_digest},
          {"snapshot_digest", snapshot_digest},
          {"checks", {"attributes", "shapes", "head_map", "frontier", "finite_committed_rows"}}};
}

ArtifactInspection inspect_artifact(const std::string& path, bool admit) {
  ArtifactReader r(path);
  if (admit) admit_artifact(r, {});
  const json& m = r.manifest();
  ArtifactInspection a;
  a.path = path;
  a.kind = r.kind();
  a.file_bytes = r.file_size();
  a.manifest_sha256 = to_hex(r.manifest_digest());
  a.manifest_bytes = r.manifest_text().size();
  a.manifest = m;
  a.index_generation = m["index_generation"];
  a.selector_generation = m["selector_generation"];
  a.params = m["params"];
  a.params_digest = m["params_digest"];
  a.semantics = m["semantics"];
  a.sections = r.sections();
  for (const auto& s : a.sections) {
    a.section_raw_bytes += s.raw_size;
    a.section_stored_bytes += s.stored_size;
  }
  a.is_signed = r.is_signed();
  if (r.is_signed()) a.key_id = key_id(*r.signer());
  a.source = r.source();
  a.index = index_bytes(r);
  if (const KindSpec* k = find_kind(r.kind()); k && k->summarize) {
    try {  // inspect shows artifacts it has not validated: a malformed kind_data gets no summary
      a.kind_summary = k->summarize(r);
    } catch (const json::exception&) {}
  }
  return a;
}

json ArtifactInspection::to_json() const {
  json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["type"] = "kvi";
  j["path"] = path;
  j["format_version"] = manifest["format_version"];
  j["file_bytes"] = file_bytes;
  j["kind"] = kind;
  j["manifest_sha256"] = manifest_sha256;
  j["manifest_bytes"] = manifest_bytes;
  j["manifest"] = manifest;
  json secs = json::array();
  for (const auto& s : sections) secs.push_back(s.to_json());
  j["sections"] = secs;
  j["section_bytes"] = {{"raw", section_raw_bytes}, {"stored", section_stored_bytes}, {"count", sections.size()}};
  if (is_signed)
    j["signature"] = {{"algorithm", "ed25519"}, {"key_id", key_id}};
  else
    j["signature"] = nullptr;
  j["source"] = source.to_json();
  if (kind_summary) j["kind_summary"] = *kind_summary;
  j["index_bytes"] = index.to_json();
  return j;
}

IndexBytes index_bytes(const ArtifactReader& r) {
  IndexBytes b;
  for (const auto& s : r.sections()) b.stored += s.stored_size, b.raw += s.raw_size;
  const SourceBinding& src = r.source();
  // inspect --unchecked reaches here with manifests no kind has validated: read parts defensively.
  const json& kd = r.manifest().contains("kind_data") ? r.manifest()["kind_data"] : json();
  const bool listed = kd.is_object() && kd.contains("parts") && kd["parts"].is_array();
  b.parts = listed ? static_cast<int64_t>(kd["parts"].size()) : src.geo.layers * src.geo.kv_heads;
  b.rows = src.coverage_end;
  b.head_dim = src.geo.head_dim;
  b.kv_dtype = dtype_name(src.geo.dtype);
  b.kv = static_cast<uint64_t>(b.parts) * static_cast<uint64_t>(b.rows) * static_cast<uint64_t>(b.head_dim) * 2 *
         dtype_size(src.geo.dtype);
  return b;
}

json IndexBytes::to_json() const {
  return {{"stored", stored},
          {"raw", raw},
          {"kv_bytes", kv},
          {"kv_dtype", kv_dtype},
          {"parts", parts},
          {"rows_per_part", rows},
          {"stored_fraction", stored_fraction()},
          {"raw_fraction", raw_fraction()},
          {"definition",
           "index = every section (stored: as in the file; raw: decompressed) / K+V = parts x rows [0, coverage_end) "
           "x head_dim x 2 (K and V) x bytes of the dump's stored dtype (f32 4, f16 and bf16 2)"}};
}

ArtifactVerification verify_artifact(const std::string& path, const VerifyOptions& opt) {
  ArtifactReader r(path);
  admit_artifact(r, TrustPolicy{opt.trusted_keys, opt.require_signature});
  ArtifactVerification v;
  v.path = path;
  v.kind = r.kind();
  v.manifest_sha256 = to_hex(r.manifest_digest());
  v.sections_verified = r.sections().size();
  v.is_signed = r.is_signed();
  if (r.is_signed()) v.key_id = key_id(*r.signer());
  v.signature_trusted = r.is_signed() && !opt.trusted_keys.empty();
  v.content_digest = r.source().content_digest;
  v.coverage_end = r.source().coverage_end;
  if (!opt.source.empty()) {
    DumpReader d(opt.source);
    check_source(r.source(), d, opt.strict_snapshot);
    v.source_checked = opt.source;
    v.strict_snapshot = opt.strict_snapshot;
  }
  return v;
}

json ArtifactVerification::to_json() const {
  json j = {{"schema_version", kJsonSchemaVersion},
            {"ok", true},
            {"type", "kvi"},
            {"path", path},
            {"kind", kind},
            {"manifest_sha256", manifest_sha256},
            {"sections_verified", sections_verified},
            {"signed", is_signed},
            {"signature_trusted", signature_trusted},
            {"content_digest", content_digest},
            {"coverage", {0, coverage_end}}};
  if (is_signed) j["key_id"] = key_id;
  if (!source_checked.empty()) {
    j["source_checked"] = source_checked;
    j["strict_snapshot"] = strict_snapshot;
  }
  return j;
}

json export_artifact(const std::string& artifact_path, const std::string& out_path) {
  using namespace h5;
  ArtifactReader r(artifact_path);
  admit_artifact(r, {});
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
      // A scalar section is stored as one element (built in one step: push_back on the empty
      // vector trips GCC 12's -Wfree-nonheap-object).
      const std::vector<hsize_t> dims =
          s.shape.empty() ? std::vector<hsize_t>{1} : std::vector<hsize_t>(s.shape.begin(), s.shape.end());
      Hid sp(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
      hid_t t = s.dtype == "u8"    ? H5T_STD_U8LE
                : s.dtype == "i8"  ? H5T_STD_I8LE
                : s.dtype == "u16" ? H5T_STD_U16LE
                : s.dtype == "u32" ? H5T_STD_U32LE
                : s.dtype == "u64" ? H5T_STD_U64LE
                : s.dtype == "i32" ? H5T_STD_I32LE
                : s.dtype == "i64" ? H5T_STD_I64LE
                : s.dtype == "f32" ? H5T_IEEE_F32LE
                                   : f16_type();
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
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"artifact", artifact_path},
          {"output", out_path},
          {"sections", r.sections().size()}};
}

}  // namespace kvtool
