#include "kvtool/builder.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <exception>
#include <map>
#include <thread>

#include "kvtool/ordered_pool.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/prng.h"
#include "kvtool/progress.h"
#include "kvtool/source_binding.h"

namespace kvtool {

void pin_blas_single_thread() {
  using SetThreads = void (*)(int);
  for (const char* name : {"openblas_set_num_threads", "goto_set_num_threads"})
    if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, name))) f(1);
  omp_set_num_threads(1);
}

int64_t PartInput::row_begin() const { return std::min(sink, coverage_end); }
int64_t PartInput::row_end() const { return std::max(row_begin(), coverage_end - local); }

namespace {

// The parts [p0, p1) of a build, in (layer, kv head) order from layer_first.
struct PartRange {
  int64_t layer_first, kv_heads, head_dim, p0, p1;
  int64_t coverage_end, sink, local;
};

struct BuiltParts {
  json parts = json::array();  // kind_data.parts
  uint64_t raw_bytes = 0;      // section bytes before compression
};

// Builds the parts on `threads` workers and writes them in part order (run_ordered), so the
// artifact is the same bytes for any thread count; 2 * threads parts in flight bound the memory.
BuiltParts build_parts(const DumpReader& dump, const KindBuilder& kind, const BuildOptions& opt, const PartRange& r,
                       int threads, ArtifactWriter& writer) {
  std::vector<std::vector<float>> keys(static_cast<size_t>(threads));  // per worker, reused
  auto build = [&](int64_t i, int worker) {
    pin_blas_single_thread();  // the worker's own BLAS/OpenMP settings: parallelism is across parts
    const int64_t p = r.p0 + i;
    PartInput in;
    in.layer = r.layer_first + p / r.kv_heads;
    in.kv_head = p % r.kv_heads;
    in.head_dim = r.head_dim;
    in.coverage_end = r.coverage_end;
    in.sink = r.sink;
    in.local = r.local;
    in.seed = part_seed(opt.seed, static_cast<uint64_t>(in.layer), static_cast<uint64_t>(in.kv_head));
    in.base_seed = opt.seed;
    std::vector<float>& k = keys[static_cast<size_t>(worker)];
    k.resize(static_cast<size_t>(r.coverage_end * r.head_dim));
    dump.read_k(in.layer, in.kv_head, 0, r.coverage_end, k.data());
    in.keys = k.data();
    in.dump = &dump;
    PartOutput out = kind.build_part(in);
    out.meta["layer"] = in.layer;
    out.meta["kv_head"] = in.kv_head;
    return out;
  };
  BuiltParts built;
  Progress progress("kvtool-" + kind.kind() + " build", r.p1 - r.p0, opt.quiet);
  auto write = [&](int64_t, PartOutput&& out) {
    const int64_t layer = out.meta["layer"], head = out.meta["kv_head"];
    for (const auto& s : out.sections) {
      writer.add_section(s.name, s.dtype, s.shape, s.bytes.data(), s.bytes.size(), layer, head, s.filter);
      built.raw_bytes += s.bytes.size();
    }
    built.parts.push_back(std::move(out.meta));
    progress.advance();
  };
  run_ordered(r.p1 - r.p0, OrderedPoolOptions{threads, 2 * static_cast<int64_t>(threads)}, build, write);
  progress.finish();
  return built;
}

}  // namespace

BuildSummary build_artifact(const std::string& dump_path, const BuildOptions& opt, const KindBuilder& kind) {
  KVT_CHECK(!opt.output.empty(), USAGE, "an output path (-o) is required");
  DumpReader dump(dump_path);
  const auto& info = dump.info();
  const auto& g = info.geo;
  const int64_t E = opt.prefix < 0 ? info.committed_frontier : opt.prefix;
  KVT_CHECK(E <= info.committed_frontier, USAGE,
            "prefix " << E << " is beyond the dump's committed frontier " << info.committed_frontier);
  const int64_t sink = opt.sink < 0 ? kind.default_sink() : opt.sink;
  const int64_t local = opt.local < 0 ? kind.default_local() : opt.local;
  const int64_t lf = opt.layer_first, ll = opt.layer_last < 0 ? g.layers - 1 : opt.layer_last;
  KVT_CHECK(lf >= 0 && lf <= ll && ll < g.layers, USAGE,
            "layers " << lf << "-" << ll << " is outside the dump's layers 0-" << g.layers - 1);
  KVT_CHECK(opt.shard_count >= 1 && opt.shard_index >= 0 && opt.shard_index < opt.shard_count, USAGE, "bad shard");
  kind.check(g.head_dim);
  // Parameters chosen from the part size (pq's and clusterkv's defaults) are fixed here, once for
  // every part and shard: each part indexes the rows [sink, E - local) (formats/kinds-v1.md 2.2).
  const int64_t rows_begin = std::min(sink, E), indexed = std::max<int64_t>(0, E - local - rows_begin);
  const std::unique_ptr<KindBuilder> resolved_kind = kind.resolved(g.head_dim, indexed);
  const KindBuilder& builder = resolved_kind ? *resolved_kind : kind;
  builder.check(g.head_dim);
  KVT_CHECK(opt.threads >= 0 && opt.threads <= kMaxThreads, USAGE,
            "threads must be 0 (every CPU) to " << kMaxThreads << ", got " << opt.threads);
  const int threads =
      opt.threads > 0 ? opt.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  // Parts in (layer, kv head) order; shard I of N gets the I-th contiguous range.
  const int64_t total = (ll - lf + 1) * g.kv_heads;
  const int64_t p0 = total * opt.shard_index / opt.shard_count, p1 = total * (opt.shard_index + 1) / opt.shard_count;

  // The source binding reads and hashes every committed row; it runs beside the part workers
  // (the dump reader serialises the reads) and is joined before the manifest is written.
  SourceBinding binding;
  std::exception_ptr binding_error;
  std::jthread binder([&] {  // a jthread: joined on every path out, errors included
    try {
      binding = bind_source(dump, E);  // also rejects non-finite committed rows
    } catch (...) {
      binding_error = std::current_exception();
    }
  });
  std::unique_ptr<SigningKey> key;
  if (!opt.sign_key.empty()) key = std::make_unique<SigningKey>(SigningKey::load(opt.sign_key));
  ArtifactWriter writer(opt.output, opt.zstd_level);
  pin_blas_single_thread();

  BuiltParts built;
  std::exception_ptr failure;
  try {
    built = build_parts(dump, builder, opt, {lf, g.kv_heads, g.head_dim, p0, p1, E, sink, local}, threads, writer);
  } catch (...) {
    failure = std::current_exception();
  }
  binder.join();
  if (binding_error) std::rethrow_exception(binding_error);  // the binding's error comes first
  if (failure) std::rethrow_exception(failure);

  ManifestCore core;
  core.kind = kind.kind();
  core.params = builder.params();
  core.params["sink"] = sink;
  core.params["local"] = local;
  core.params["layers"] = {lf, ll};
  core.params["seed"] = opt.seed;
  core.params["zstd_level"] = opt.zstd_level;
  core.source = binding;
  core.kind_data = {{"parts", built.parts}, {"part_range", {p0, p1}}, {"parts_total", total}};
  // Artifact-level state that needs every part (squeeze thresholds) exists only in complete
  // artifacts; kvtool merge computes it the same way.
  if (const KindSpec* ki = find_kind(kind.kind()); ki && ki->finalize && p0 == 0 && p1 == total)
    core.kind_data.update(ki->finalize(core.params, built.parts));
  Digest md = writer.finish(core, key.get());
  return {opt.output,      kind.kind(), total,         p0, p1, E, binding.content_digest, to_hex(md),
          built.raw_bytes, threads,     key != nullptr};
}

json BuildSummary::to_json() const {
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"output", output},
          {"kind", kind},
          {"parts", part_end - part_begin},
          {"parts_total", parts_total},
          {"part_range", {part_begin, part_end}},
          {"coverage", {0, coverage_end}},
          {"content_digest", content_digest},
          {"manifest_sha256", manifest_sha256},
          {"section_raw_bytes", section_raw_bytes},
          {"threads", threads},
          {"signed", is_signed}};
}

MergeSummary merge_artifacts(const std::vector<std::string>& paths, const std::string& output,
                             const std::string& sign_key, bool quiet) {
  KVT_CHECK(!paths.empty(), USAGE, "merge needs at least one shard artifact");
  std::vector<std::unique_ptr<ArtifactReader>> shards;
  for (const auto& p : paths) {
    shards.push_back(std::make_unique<ArtifactReader>(p));
    shards.back()->verify_sections();
  }
  // Order shards by their part range; they must tile [0, parts_total) exactly.
  auto range_of = [](const ArtifactReader& r) {
    const json& kd = r.manifest()["kind_data"];
    KVT_CHECK(kd.contains("part_range") && kd["part_range"].is_array() && kd["part_range"].size() == 2 &&
                  kd.contains("parts_total") && kd.contains("parts"),
              BAD_MANIFEST, "'" << r.path() << "' has no part range; it was not written by a kvtool builder");
    return std::make_pair(kd["part_range"][0].get<int64_t>(), kd["part_range"][1].get<int64_t>());
  };
  std::sort(shards.begin(), shards.end(), [&](const auto& a, const auto& b) { return range_of(*a) < range_of(*b); });
  const ArtifactReader& first = *shards.front();
  const json& m0 = first.manifest();
  const int64_t total = m0["kind_data"]["parts_total"];
  int64_t expect = 0;
  json parts = json::array();
  for (const auto& s : shards) {
    const json& m = s->manifest();
    KVT_CHECK(m["kind"] == m0["kind"], MERGE_MISMATCH,
              "'" << s->path() << "' is kind " << m["kind"] << ", '" << first.path() << "' is " << m0["kind"]);
    KVT_CHECK(m["params"] == m0["params"], MERGE_MISMATCH,
              "'" << s->path() << "' was built with other parameters than '" << first.path() << "'");
    KVT_CHECK(m["source"] == m0["source"], MERGE_MISMATCH,
              "'" << s->path() << "' was built from another source (content digest " << m["source"]["content_digest"]
                  << ") than '" << first.path() << "'");
    KVT_CHECK(m["index_generation"] == m0["index_generation"] && m["selector_generation"] == m0["selector_generation"],
              MERGE_MISMATCH, "'" << s->path() << "' has other generations than '" << first.path() << "'");
    KVT_CHECK(m["kind_data"]["parts_total"] == total, MERGE_MISMATCH, "'" << s->path() << "' has another part count");
    auto [a, b] = range_of(*s);
    KVT_CHECK(a >= expect, MERGE_OVERLAP,
              "'" << s->path() << "' covers parts [" << a << ", " << b << ") which overlap parts already merged [0, "
                  << expect << ")");
    KVT_CHECK(a == expect, MERGE_INCOMPLETE, "parts [" << expect << ", " << a << ") are missing from the shards");
    for (const auto& pm : m["kind_data"]["parts"]) parts.push_back(pm);
    expect = b;
  }
  KVT_CHECK(expect == total, MERGE_INCOMPLETE, "parts [" << expect << ", " << total << ") are missing from the shards");
  std::unique_ptr<SigningKey> key;
  if (!sign_key.empty()) key = std::make_unique<SigningKey>(SigningKey::load(sign_key));
  ArtifactWriter writer(output, 0);
  Progress progress("kvtool merge", static_cast<int64_t>(shards.size()), quiet);
  for (const auto& s : shards) {
    for (const auto& e : s->sections()) writer.add_stored_section(e, s->data() + e.offset);
    progress.advance();
  }
  progress.finish();
  ManifestCore core;
  core.kind = m0["kind"];
  core.params = m0["params"];
  core.source = first.source();
  core.index_generation = m0["index_generation"];
  core.selector_generation = m0["selector_generation"];
  core.kind_data = m0["kind_data"];
  core.kind_data["parts"] = parts;
  core.kind_data["part_range"] = {0, total};
  if (const KindSpec* ki = find_kind(core.kind); ki && ki->finalize)
    core.kind_data.update(ki->finalize(core.params, parts));
  Digest md = writer.finish(core, key.get());
  return {output, to_hex(md), shards.size(), total, key != nullptr};
}

json MergeSummary::to_json() const {
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"output", output},
          {"shards", shards},
          {"parts_total", parts_total},
          {"manifest_sha256", manifest_sha256},
          {"signed", is_signed}};
}

}  // namespace kvtool
