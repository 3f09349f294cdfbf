#include "kvtool/append.h"

#include <algorithm>
#include <memory>

#include "kvtool/admission.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/progress.h"
#include "kvtool/signing.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

// Rewrites every old part into `w` in the old order: dense parts keep their meta (with the new
// indexed_rows) and have no sections; indexed parts go through the kind's step with their new rows.
json append_parts(const ArtifactReader& old, const DumpReader& dump, const AppendPlan& plan, int64_t gen, bool quiet,
                  KindAppender& kind, ArtifactWriter& w) {
  const json& old_parts = old.manifest()["kind_data"]["parts"];
  const int64_t d = old.source().geo.head_dim, n_new = std::max<int64_t>(plan.rows_end - plan.rows_begin, 0);
  std::vector<float> rows(static_cast<size_t>(n_new * d));
  json parts = json::array();
  Progress progress("kvtool-" + kind.kind() + " append", static_cast<int64_t>(old_parts.size()), quiet);
  for (const auto& pm : old_parts) {
    const int64_t layer = pm["layer"], head = pm["kv_head"];
    PartOutput out;
    out.meta = pm;
    out.meta["indexed_rows"] = plan.indexed_rows;
    if (!pm["dense"].get<bool>()) {
      if (n_new > 0) dump.read_k(layer, head, plan.rows_begin, plan.rows_end, rows.data());
      kind.append_part({old, layer, head, d, gen, rows.data(), plan.rows_begin, plan.rows_end}, out);
      for (const auto& s : out.sections)
        w.add_section(s.name, s.dtype, s.shape, s.bytes.data(), s.bytes.size(), layer, head, s.filter);
    }
    parts.push_back(std::move(out.meta));
    progress.advance();
  }
  progress.finish();
  return parts;
}

}  // namespace

AppendSummary append_generation(const AppendOptions& o, KindAppender& kind) {
  ArtifactReader old(o.artifact);
  KVT_CHECK(old.kind() == kind.kind(), USAGE,
            "'" << o.artifact << "' is a " << old.kind() << " artifact, not " << kind.kind());
  admit_artifact(old, {});  // what is appended to (and re-signed) passes what verify checks
  DumpReader dump(o.dump);
  check_source(old.source(), dump, false);  // rows under the old coverage must be unchanged
  const int64_t frontier = dump.info().committed_frontier;
  const int64_t P = o.prefix < 0 ? frontier : o.prefix;
  KVT_CHECK(P <= frontier, USAGE, "prefix " << P << " is beyond the dump's committed frontier " << frontier);
  const AppendPlan plan = kind.plan(old, P);
  SourceBinding binding = bind_source(dump, plan.coverage_end);
  const json& m = old.manifest();
  const int64_t gen = m["index_generation"].get<int64_t>() + 1;
  std::unique_ptr<SigningKey> key;
  if (!o.sign_key.empty()) key = std::make_unique<SigningKey>(SigningKey::load(o.sign_key));
  ArtifactWriter w(o.output, m["params"].value("zstd_level", 3));
  json parts = append_parts(old, dump, plan, gen, o.quiet, kind, w);

  ManifestCore core;
  core.kind = kind.kind();
  core.params = m["params"];
  core.source = binding;
  core.index_generation = gen;
  core.selector_generation = m["selector_generation"];
  core.kind_data = m["kind_data"];
  core.kind_data["parts"] = parts;
  json gens = core.kind_data.value("generations", json::array({kind.first_generation()}));
  gens.push_back(kind.generation(gen));
  core.kind_data["generations"] = gens;
  Digest md = w.finish(core, key.get());
  return {o.output, to_hex(md), gen, plan.coverage_end, static_cast<int64_t>(parts.size())};
}

json AppendSummary::to_json() const {
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"output", output},
          {"index_generation", index_generation},
          {"coverage", {0, coverage_end}},
          {"manifest_sha256", manifest_sha256}};
}

}  // namespace kvtool
