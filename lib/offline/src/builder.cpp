#include "kvtool/builder.h"

#include <dlfcn.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/prng.h"
#include "kvtool/progress.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

int64_t parse_int(const std::string& s, const char* what) {
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    KVT_CHECK(pos == s.size(), USAGE, "'" << s << "' is not an integer (" << what << ")");
    return v;
  } catch (const Error&) {
    throw;
  } catch (...) {
    KVT_THROW(USAGE, "'" << s << "' is not an integer (" << what << ")");
  }
}

int cgroup_cpu_limit() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota, period;
  if (v2 >> quota >> period && quota != "max") {
    double q = std::atof(quota.c_str()), p = std::atof(period.c_str());
    if (q > 0 && p > 0) return std::max(1, static_cast<int>(std::ceil(q / p)));
  }
  std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  long long q = -1, p = -1;
  if (q1 >> q && p1 >> p && q > 0 && p > 0) return std::max(1, static_cast<int>((q + p - 1) / p));
  return 0;
}

}  // namespace

int default_threads() {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (int c = cgroup_cpu_limit(); c > 0) n = std::min(n, c);
  if (const char* s = std::getenv("SLURM_CPUS_PER_TASK")) {
    int v = std::atoi(s);
    if (v > 0) n = std::min(n, v);
  }
  return std::max(1, n);
}

void parse_shard(const std::string& spec, int64_t& index, int64_t& count) {
  if (spec == "auto") {
    const char* id = std::getenv("SLURM_ARRAY_TASK_ID");
    const char* cnt = std::getenv("SLURM_ARRAY_TASK_COUNT");
    KVT_CHECK(id && cnt, USAGE, "--shard auto needs SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (run inside a Slurm job array)");
    const char* mn = std::getenv("SLURM_ARRAY_TASK_MIN");
    index = parse_int(id, "SLURM_ARRAY_TASK_ID") - (mn ? parse_int(mn, "SLURM_ARRAY_TASK_MIN") : 0);
    count = parse_int(cnt, "SLURM_ARRAY_TASK_COUNT");
  } else {
    auto slash = spec.find('/');
    KVT_CHECK(slash != std::string::npos, USAGE, "--shard must be I/N (e.g. 0/4) or auto, got '" << spec << "'");
    index = parse_int(spec.substr(0, slash), "--shard index");
    count = parse_int(spec.substr(slash + 1), "--shard count");
  }
  KVT_CHECK(count >= 1 && index >= 0 && index < count, USAGE,
            "shard " << index << "/" << count << " is invalid (need 0 <= I < N)");
}

void parse_layers(const std::string& spec, int64_t& first, int64_t& last) {
  auto dash = spec.find('-');
  if (dash == std::string::npos) {
    first = last = parse_int(spec, "--layers");
  } else {
    first = parse_int(spec.substr(0, dash), "--layers");
    last = parse_int(spec.substr(dash + 1), "--layers");
  }
  KVT_CHECK(first >= 0 && last >= first, USAGE, "--layers '" << spec << "' is an empty or negative range");
}

void pin_blas_single_thread() {
  using SetThreads = void (*)(int);
  for (const char* name : {"openblas_set_num_threads", "goto_set_num_threads"})
    if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, name))) f(1);
  omp_set_num_threads(1);
}

int64_t PartInput::row_begin() const { return std::min(sink, coverage_end); }
int64_t PartInput::row_end() const { return std::max(row_begin(), coverage_end - local); }

json build_artifact(const std::string& dump_path, const BuildOptions& opt, const KindBuilder& kind) {
  KVT_CHECK(!opt.output.empty(), USAGE, "an output path (-o) is required");
  DumpReader dump(dump_path);
  const auto& info = dump.info();
  const auto& g = info.geo;
  const int64_t E = opt.prefix < 0 ? info.committed_frontier : opt.prefix;
  KVT_CHECK(E <= info.committed_frontier, USAGE,
            "--prefix " << E << " is beyond the dump's committed frontier " << info.committed_frontier);
  const int64_t sink = opt.sink < 0 ? kind.default_sink() : opt.sink;
  const int64_t local = opt.local < 0 ? kind.default_local() : opt.local;
  const int64_t lf = opt.layer_first, ll = opt.layer_last < 0 ? g.layers - 1 : opt.layer_last;
  KVT_CHECK(lf >= 0 && lf <= ll && ll < g.layers, USAGE,
            "--layers " << lf << "-" << ll << " is outside the dump's layers 0-" << g.layers - 1);
  KVT_CHECK(opt.shard_count >= 1 && opt.shard_index >= 0 && opt.shard_index < opt.shard_count, USAGE, "bad shard");
  kind.check(g.head_dim);
  KVT_CHECK(opt.threads >= 0, USAGE, "--threads must be positive");
  const int threads = opt.threads > 0 ? opt.threads : default_threads();

  // Parts in (layer, kv head) order; shard I of N gets the I-th contiguous range.
  const int64_t total = (ll - lf + 1) * g.kv_heads;
  const int64_t p0 = total * opt.shard_index / opt.shard_count, p1 = total * (opt.shard_index + 1) / opt.shard_count;

  // The source binding reads and hashes every committed row; it runs beside the part workers
  // (the dump reader serialises the reads) and is joined before the manifest is written.
  SourceBinding binding;
  std::exception_ptr binding_error;
  std::thread binder([&] {
    try {
      binding = bind_source(dump, E);  // also rejects non-finite committed rows
    } catch (...) {
      binding_error = std::current_exception();
    }
  });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } join_binder{binder};
  std::unique_ptr<SigningKey> key;
  if (!opt.sign_key.empty()) key = std::make_unique<SigningKey>(SigningKey::load(opt.sign_key));
  ArtifactWriter writer(opt.output, opt.zstd_level);
  pin_blas_single_thread();

  struct Slot {
    bool ready = false;
    PartOutput out;
    std::exception_ptr err;
  };
  std::vector<Slot> slots(static_cast<size_t>(p1 - p0));
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int64_t> next{p0};
  std::atomic<bool> stop{false};
  int64_t written = p0;
  const int64_t window = 2 * threads;  // bounds the parts held in memory
  auto worker = [&] {
    pin_blas_single_thread();
    std::vector<float> keys;
    while (!stop) {
      int64_t p;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || next.load() < written + window || next.load() >= p1; });
        if (stop) return;
        p = next++;
        if (p >= p1) return;
      }
      Slot& slot = slots[static_cast<size_t>(p - p0)];
      try {
        PartInput in;
        in.layer = lf + p / g.kv_heads;
        in.kv_head = p % g.kv_heads;
        in.head_dim = g.head_dim;
        in.coverage_end = E;
        in.sink = sink;
        in.local = local;
        in.seed = part_seed(opt.seed, static_cast<uint64_t>(in.layer), static_cast<uint64_t>(in.kv_head));
        in.base_seed = opt.seed;
        keys.resize(static_cast<size_t>(E * g.head_dim));
        dump.read_k(in.layer, in.kv_head, 0, E, keys.data());
        in.keys = keys.data();
        in.dump = &dump;
        slot.out = kind.build_part(in);
        slot.out.meta["layer"] = in.layer;
        slot.out.meta["kv_head"] = in.kv_head;
      } catch (...) {
        slot.err = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(mu);
      slot.ready = true;
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < std::min<int64_t>(threads, std::max<int64_t>(1, p1 - p0)); ++i) pool.emplace_back(worker);
  Progress progress("kvtool-" + kind.kind() + " build", p1 - p0, opt.quiet);
  json parts = json::array();
  std::exception_ptr failure;
  uint64_t raw_bytes = 0;
  try {
    for (int64_t p = p0; p < p1; ++p) {
      Slot& slot = slots[static_cast<size_t>(p - p0)];
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return slot.ready; });
      }
      if (slot.err) std::rethrow_exception(slot.err);
      int64_t layer = slot.out.meta["layer"], head = slot.out.meta["kv_head"];
      for (const auto& s : slot.out.sections) {
        writer.add_section(s.name, s.dtype, s.shape, s.bytes.data(), s.bytes.size(), layer, head);
        raw_bytes += s.bytes.size();
      }
      parts.push_back(slot.out.meta);
      slot.out = PartOutput{};
      {
        std::lock_guard<std::mutex> lk(mu);
        written = p + 1;
      }
      cv.notify_all();
      progress.advance();
    }
  } catch (...) {
    failure = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  binder.join();
  if (binding_error) std::rethrow_exception(binding_error);
  if (failure) std::rethrow_exception(failure);
  progress.finish();

  ManifestCore core;
  core.kind = kind.kind();
  core.params = kind.params();
  core.params["sink"] = sink;
  core.params["local"] = local;
  core.params["layers"] = {lf, ll};
  core.params["seed"] = opt.seed;
  core.params["zstd_level"] = opt.zstd_level;
  core.source = binding;
  core.kind_data = {{"parts", parts}, {"part_range", {p0, p1}}, {"parts_total", total}};
  // Artifact-level state that needs every part (squeeze thresholds) exists only in complete
  // artifacts; kvtool merge computes it the same way.
  if (const KindInfo* ki = find_kind(kind.kind()); ki && ki->finalize && p0 == 0 && p1 == total)
    core.kind_data.update(ki->finalize(core.params, parts));
  Digest md = writer.finish(core, key.get());
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"output", opt.output},
          {"kind", kind.kind()},
          {"parts", p1 - p0},
          {"parts_total", total},
          {"part_range", {p0, p1}},
          {"coverage", {0, E}},
          {"content_digest", binding.content_digest},
          {"manifest_sha256", to_hex(md)},
          {"section_raw_bytes", raw_bytes},
          {"threads", threads},
          {"signed", key != nullptr}};
}

json merge_artifacts(const std::vector<std::string>& paths, const std::string& output, const std::string& sign_key,
                     bool quiet) {
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
              "'" << s->path() << "' covers parts [" << a << ", " << b << ") which overlap parts already merged [0, " << expect << ")");
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
  if (const KindInfo* ki = find_kind(core.kind); ki && ki->finalize) core.kind_data.update(ki->finalize(core.params, parts));
  Digest md = writer.finish(core, key.get());
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"output", output}, {"shards", shards.size()},
          {"parts_total", total}, {"manifest_sha256", to_hex(md)}, {"signed", key != nullptr}};
}

}  // namespace kvtool
