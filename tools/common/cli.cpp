#include "cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <new>

#include "config.h"
#include "env.h"
#include "kvtool/atomic_file.h"
#include "kvtool/dump.h"
#include "kvtool/progress.h"
#include "parse.h"

namespace kvtool::cli {

namespace {
void print_error(const std::string& tool, const std::string& reason, const std::string& msg, bool as_json) {
  // The library names no flags; the commands that write an output take --force to replace it.
  const std::string hint = reason == "OUTPUT_EXISTS" ? " (--force replaces it)" : "";
  std::cerr << tool << ": error [" << reason << "]: " << printable(msg) << hint << "\n";
  if (as_json)
    std::cout << json_text(
                     json{{"schema_version", kJsonSchemaVersion}, {"ok", false}, {"reason", reason}, {"message", msg}},
                     2)
              << std::endl;
}

// std::cout through printable() while it lives (when `on`), a line at a time, so that nothing a
// command prints can carry a control character or a byte that is not UTF-8 to the terminal.
class PrintableStdout : public std::streambuf {
 public:
  explicit PrintableStdout(bool on) : out_(on ? std::cout.rdbuf(this) : nullptr) {}
  ~PrintableStdout() override {
    if (!out_) return;
    sync();
    std::cout.rdbuf(out_);
  }
  PrintableStdout(const PrintableStdout&) = delete;
  PrintableStdout& operator=(const PrintableStdout&) = delete;

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    line_.push_back(traits_type::to_char_type(c));
    if (line_.back() == '\n') emit();
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; ++i) overflow(traits_type::to_int_type(s[i]));
    return n;
  }
  int sync() override {
    emit();
    return out_->pubsync();
  }

 private:
  void emit() {
    const std::string p = printable(line_);
    out_->sputn(p.data(), static_cast<std::streamsize>(p.size()));
    line_.clear();
  }
  std::streambuf* out_;
  std::string line_;
};

// Whether the command line holds --json (before a "--" that ends the options).
bool asks_for_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return false;
    if (a == "--json") return true;
  }
  return false;
}

// Options of every program, accepted before or after the subcommand: --config FILE (config.h reads
// it before parsing) and -v/--verbose (diagnostics on stderr: libhdf5's error stacks, the config
// file applied).
void add_global_options(CLI::App& app, bool& verbose) {
  static std::string unused;
  app.add_option("--config", unused,
                 "config file of defaults (store, tenant, trusted-keys, threads, ...); flags and environment win");
  app.add_flag("-v,--verbose", verbose, "diagnostics on stderr (libhdf5 error stacks, the config file applied)");
  std::vector<CLI::App*> todo = app.get_subcommands({});
  while (!todo.empty()) {
    CLI::App* c = todo.back();
    todo.pop_back();
    if (c->get_prefix_command()) continue;  // `kvtool build KIND ...` hands everything to the kind
    c->fallthrough();
    for (CLI::App* s : c->get_subcommands({})) todo.push_back(s);
  }
}

// The library's progress reports on stderr: on a TTY a bar redrawn at most every 0.1 s and closed
// when the work ends; otherwise a line every 5 s, and a last one only for work that ran 5 s or more
// (short jobs stay silent in logs). -q/--quiet and --json ask the library for no reports.
bool draw_progress(bool tty, const ProgressUpdate& u) {
  if (u.final ? !(tty || u.elapsed_s >= 5.0) : u.since_shown_s < (tty ? 0.1 : 5.0)) return false;
  const double rate = u.elapsed_s > 0 ? static_cast<double>(u.done) / u.elapsed_s : 0;
  const double eta = rate > 0 ? static_cast<double>(u.total - u.done) / rate : 0;
  const int pct = u.total > 0 ? static_cast<int>(100 * u.done / u.total) : 100;
  if (tty) {
    char bar[31];
    const int fill = pct * 30 / 100;
    for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    std::fprintf(stderr, "\r%s [%s] %lld/%lld parts %3d%%  %.1f parts/s  ETA %.0fs   %s", u.label.c_str(), bar,
                 static_cast<long long>(u.done), static_cast<long long>(u.total), pct, rate, eta, u.final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s: %lld/%lld parts (%d%%), %.1f parts/s, ETA %.0fs\n", u.label.c_str(),
                 static_cast<long long>(u.done), static_cast<long long>(u.total), pct, rate, eta);
  }
  std::fflush(stderr);
  return true;
}

}  // namespace

int run(const std::string& tool, CLI::App& app, int argc, char** argv, const bool* json_errors,
        const std::function<int()>& body) {
  install_cleanup_handlers();
  const bool tty = isatty(STDERR_FILENO) == 1;
  set_progress_callback([tty](const ProgressUpdate& u) { return draw_progress(tty, u); });
  bool verbose = false;
  add_global_options(app, verbose);
  try {
    std::string config;
    try {
      config = apply_config_file(argc, argv);  // before parsing: its values become the options' environment
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      // CLI11's message quotes the arguments it could not place, any bytes included; --json was
      // perhaps not reached by the parser, so it is looked for among the arguments.
      print_error(tool, "USAGE", e.what(), asks_for_json(argc, argv));
      std::cerr << "Run '" << tool << " --help' for usage.\n";
      return static_cast<int>(ExitCode::usage);
    }
    if (verbose) {
      set_hdf5_error_stacks(true);
      if (!config.empty()) std::cerr << tool << ": note: settings from config file '" << printable(config) << "'\n";
    }
    apply_read_budget_from_env();
    // Text output may quote paths and strings of files: it reaches the terminal through printable(),
    // as every error does. --json output is json_text(), already safe and kept byte for byte.
    PrintableStdout text_only(!(json_errors && *json_errors));
    return body();
  } catch (...) {
    Error e = error_from_exception(std::current_exception());
    print_error(tool, e.reason_name(), e.what(), (json_errors && *json_errors) || asks_for_json(argc, argv));
    return static_cast<int>(e.exit_code());
  }
}

int run_chosen(const std::vector<Command>& cmds) {
  for (const auto& c : cmds)
    if (*c.sub) return c.run();
  return 2;
}

void print_json(const json& j) { std::cout << json_text(j, 2) << std::endl; }

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), format, again);
  va_end(again);
  out.pop_back();
  return out;
}

void add_identity_options(CLI::App* cmd, IdentityOptions& o) {
  cmd->add_option("--tenant", o.tenant_namespace, "tenant namespace recorded in the dump")->capture_default_str();
  cmd->add_option("--checkpoint-generation", o.checkpoint_generation, "checkpoint generation")->capture_default_str();
  cmd->add_option("--namespace-generation", o.namespace_generation, "namespace generation")->capture_default_str();
  cmd->add_option("--request-generation", o.request_generation, "request generation")->capture_default_str();
  cmd->add_option("--cache-generation", o.cache_generation, "cache generation")->capture_default_str();
  cmd->add_option("--publication-generation", o.publication_generation, "publication generation")
      ->capture_default_str();
  cmd->add_option("--frontier", o.frontier, "committed frontier (default: all rows)");
}

void add_builder_options(CLI::App* cmd, BuilderCli& b) {
  cmd->add_option("-o,--output", b.opt.output, "output artifact (.kvi)")->required();
  cmd->add_option("--prefix", b.opt.prefix, "coverage [0, N) (default: the dump's committed frontier)");
  cmd->add_option("--sink", b.opt.sink, "first N rows are sinks: not indexed, always included (default: per kind)");
  cmd->add_option("--local", b.opt.local,
                  "last N covered rows are the local window: not indexed, always included (default: per kind)");
  cmd->add_option("--layers", b.layers, "layer range A-B (inclusive; default: all layers)");
  cmd->add_option("--seed", b.opt.seed, "seed of every random choice (per part: seed, layer, kv head)")
      ->capture_default_str();
  cmd->add_option("--threads", b.opt.threads, "worker threads (default: the CPUs this process may use; at most 1024)")
      ->check(CLI::Range(0, kMaxThreads))
      ->envname("KVTOOL_THREADS");
  cmd->add_option("--shard", b.shard,
                  "build only shard I/N of the parts (contiguous ranges in (layer, kv head) order), or 'auto' from the "
                  "scheduler: a Slurm job array (SLURM_ARRAY_TASK_*), else a Kubernetes indexed Job "
                  "(JOB_COMPLETION_INDEX with --shard-count or KVTOOL_SHARD_COUNT)");
  cmd->add_option("--shard-count", b.shard_count,
                  "with --shard auto in a Kubernetes indexed Job: the number of shards (the Job's completions; "
                  "default: KVTOOL_SHARD_COUNT)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--sign-key", b.opt.sign_key, "Ed25519 private key (PEM) to sign the artifact");
  cmd->add_option("--zstd-level", b.opt.zstd_level, "zstd level of the sections (0 = store raw)")
      ->capture_default_str()
      ->check(CLI::Range(0, 19));
  cmd->add_flag("--json", b.json, "print a JSON summary on stdout");
  cmd->add_flag("-q,--quiet", b.opt.quiet, "no progress on stderr");
}

void finish_builder_options(BuilderCli& b) {
  if (!b.layers.empty()) parse_layers(b.layers, b.opt.layer_first, b.opt.layer_last);
  KVT_CHECK(b.shard_count == 0 || !b.shard.empty(), USAGE, "--shard-count goes with --shard auto");
  if (!b.shard.empty()) parse_shard(b.shard, b.opt.shard_index, b.opt.shard_count, b.shard_count);
  KVT_CHECK(b.opt.prefix >= -1 && b.opt.sink >= -1 && b.opt.local >= -1, USAGE,
            "--prefix, --sink and --local must be >= 0");
  if (b.opt.threads == 0) b.opt.threads = default_threads();
}

void print_build_summary(const BuildSummary& s) {
  std::cout << "wrote " << s.output << ": kind " << s.kind << ", parts " << s.part_begin << "-" << s.part_end << " of "
            << s.parts_total << ", coverage [0, " << s.coverage_end << "), " << human_bytes(s.section_raw_bytes)
            << " of sections" << (s.is_signed ? ", signed" : "") << "\n";
}

std::string human_bytes(uint64_t b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, i == 0 ? "%.0f %s" : "%.2f %s", v, u[i]);
  return buf;
}

void print_dump_inspection(const DumpInspection& d) {
  const auto& g = d.geometry;
  const auto& id = d.identity;
  std::cout << "kvdump v1: " << d.path << (d.synthetic ? "  [SYNTHETIC]" : "") << "\n";
  if (!d.generator.empty()) std::cout << "  generator          " << d.generator << "\n";
  std::cout << "  shape [L,H_kv,T,d] [" << g.layers << ", " << g.kv_heads << ", " << g.tokens << ", " << g.head_dim
            << "]  dtype " << dtype_name(g.dtype) << "\n";
  std::cout << "  query heads        " << g.q_heads << "  q_to_kv_head " << json(id.q_to_kv_head).dump() << "\n";
  std::cout << "  dumped queries     " << g.q_tokens << "\n";
  std::cout << "  committed frontier " << d.committed_frontier << " (" << d.uncommitted_rows << " uncommitted rows)\n";
  std::cout << "  model              " << id.model_artifact_sha256 << " (checkpoint generation "
            << id.checkpoint_generation << ")\n";
  std::cout << "  adapter set        " << id.adapter_set_sha256 << "\n";
  std::cout << "  tenant             " << id.tenant_namespace << " (namespace generation " << id.namespace_generation
            << ")\n";
  std::cout << "  position contract  " << id.position_contract << "\n";
  std::cout << "  rope config        " << id.rope_config << "\n";
  std::cout << "  representation     " << id.representation << "\n";
  std::cout << "  generations        request " << id.request_generation << ", cache " << id.cache_generation
            << ", publication " << id.publication_generation << "\n";
  const auto& b = d.bytes;
  std::cout << "  bytes              " << human_bytes(b.per_token_all_layers) << " per token (all layers), "
            << human_bytes(b.kv_total) << " K/V total, " << human_bytes(b.q_total) << " queries\n";
  const auto& s = d.health_summary;
  std::cout << "  health             NaN " << s.nan << ", Inf " << s.inf << " (" << s.nonfinite_committed
            << " below the frontier), max|K| " << s.max_abs_k << ", max|V| " << s.max_abs_v << "\n";
  std::cout << "  layer head  K max|x|  K NaN/Inf  K top channels            V max|x|  V NaN/Inf\n";
  for (const auto& h : d.health) {
    char line[256];
    std::string top;
    for (const auto& t : h.k.top_channels) {
      char c[48];
      std::snprintf(c, sizeof c, "%s%lld:%.2f", top.empty() ? "" : " ", static_cast<long long>(t.channel), t.max_abs);
      top += c;
    }
    std::snprintf(line, sizeof line, "  %5lld %4lld  %8.3f  %4lld/%-4lld  %-24s  %8.3f  %4lld/%-4lld\n",
                  static_cast<long long>(h.layer), static_cast<long long>(h.kv_head), h.k.max_abs,
                  static_cast<long long>(h.k.nan), static_cast<long long>(h.k.inf), top.c_str(), h.v.max_abs,
                  static_cast<long long>(h.v.nan), static_cast<long long>(h.v.inf));
    std::cout << line;
  }
}

// The index-bytes line (kvtool/report.h, IndexBytes): fractions of K+V, stored and raw.
void print_index_bytes(const IndexBytes& b) {
  char line[512];
  std::snprintf(line, sizeof line,
                "  index bytes        %.6f of K+V stored, %.6f raw (%llu stored, %llu raw bytes of sections over %llu "
                "K+V bytes: %lld parts x %lld rows x d %lld x 2 x %s)\n",
                b.stored_fraction(), b.raw_fraction(), static_cast<unsigned long long>(b.stored),
                static_cast<unsigned long long>(b.raw), static_cast<unsigned long long>(b.kv),
                static_cast<long long>(b.parts), static_cast<long long>(b.rows), static_cast<long long>(b.head_dim),
                b.kv_dtype.c_str());
  std::cout << line;
}

void print_artifact_inspection(const ArtifactInspection& a) {
  const auto& m = a.manifest;
  const auto& src = a.source;
  std::cout << "kvi artifact: " << a.path << "\n";
  std::cout << "  format version     " << m["format_version"][0] << "." << m["format_version"][1] << "  ("
            << human_bytes(a.file_bytes) << ")\n";
  std::cout << "  kind               " << a.kind << "\n";
  std::cout << "  params             " << a.params.dump() << "\n";
  std::cout << "  params digest      " << a.params_digest << "\n";
  std::cout << "  builder            " << m["builder"]["name"].get<std::string>() << " "
            << m["builder"]["version"].get<std::string>() << "\n";
  std::cout << "  generations        index " << a.index_generation << ", selector " << a.selector_generation << "\n";
  std::cout << "  semantics          " << a.semantics << "\n";
  std::cout << "  manifest sha256    " << a.manifest_sha256 << " (" << a.manifest_bytes << " bytes)\n";
  if (!a.is_signed)
    std::cout << "  signature          none\n";
  else
    std::cout << "  signature          ed25519, key id " << a.key_id << "\n";
  std::cout << "  source binding\n";
  std::cout << "    coverage         [0, " << src.coverage_end << ") of frontier " << src.committed_frontier << ", T "
            << src.geo.tokens << "\n";
  std::cout << "    content digest   " << src.content_digest << "\n";
  std::cout << "    snapshot digest  " << src.snapshot_digest << "\n";
  std::cout << "    model            " << src.id.model_artifact_sha256 << "\n";
  std::cout << "    tenant           " << src.id.tenant_namespace << "\n";
  std::cout << "    geometry         [L=" << src.geo.layers << ", H_kv=" << src.geo.kv_heads
            << ", d=" << src.geo.head_dim << "] " << dtype_name(src.geo.dtype) << "\n";
  if (a.kind_summary) {
    std::cout << "  " << a.kind << " summary";
    for (const auto& [k, v] : a.kind_summary->items()) std::cout << "  " << k << " " << v.dump();
    std::cout << "\n";
  }
  std::cout << "  sections           " << a.sections.size() << " (" << human_bytes(a.section_raw_bytes) << " raw, "
            << human_bytes(a.section_stored_bytes) << " stored)\n";
  std::cout
      << "    name                 layer head  dtype shape              codec       raw        stored     sha256\n";
  for (const auto& s : a.sections) {
    char line[512];
    std::snprintf(line, sizeof line, "    %-20s %5lld %4lld  %-5s %-18s %-10s  %-10llu %-10llu %.16s…\n",
                  s.name.c_str(), static_cast<long long>(s.layer), static_cast<long long>(s.kv_head), s.dtype.c_str(),
                  json(s.shape).dump().c_str(), s.codec.c_str(), static_cast<unsigned long long>(s.raw_size),
                  static_cast<unsigned long long>(s.stored_size), s.sha256.c_str());
    std::cout << line;
  }
}

void print_verify_result(const ArtifactVerification& v) {
  std::cout << "OK: " << v.path << " is a valid kvi artifact (kind " << v.kind << ", " << v.sections_verified
            << " section digests verified";
  if (v.is_signed)
    std::cout << ", signed by " << v.key_id.substr(0, 16)
              << (v.signature_trusted ? " (trusted)" : " (signature valid, key not checked against a trust list)");
  else
    std::cout << ", unsigned";
  std::cout << ")\n";
  if (!v.source_checked.empty())
    std::cout << "    bound to " << v.source_checked << ": content digest of [0, " << v.coverage_end << ") matches"
              << (v.strict_snapshot ? ", snapshot digest matches" : "") << "\n";
}

void print_verify_result(const DumpVerification& v) {
  std::cout << "OK: " << v.path << " is a valid kvdump dump (frontier " << v.committed_frontier << ", "
            << v.uncommitted_rows << " uncommitted rows)\n";
  std::cout << "    content digest  " << v.content_digest << "\n";
  std::cout << "    snapshot digest " << v.snapshot_digest << "\n";
}

}  // namespace kvtool::cli

namespace kvtool::cli {

void print_eval(const EvalReport& r) {
  std::cout << "kvtool eval: " << r.kind << " artifact " << r.artifact << " on " << r.source << "\n";
  std::cout << "  support = covered rows [0, " << r.coverage_end << "): " << r.indexed_rows << " indexed, "
            << r.always_included_rows << " always included (sink + local); " << r.query_positions
            << " query positions x query heads x layers\n";
  print_index_bytes(r.index);
  const bool sampling = r.mode == SelectionMode::collision_sampling;
  const bool centroids = !r.settings.empty() && r.settings[0].overall.centroids_scored_mean.has_value();
  // The table's label: the setting's, with a space for the CSV's '/' ("q=0.8 hier").
  auto label = [](const EvalSetting& s) {
    std::string l = s.label;
    std::replace(l.begin(), l.end(), '/', ' ');
    return l;
  };
  std::cout << cli::strprintf("  %-12s %9s %9s %9s %9s %9s %8s %9s %9s %10s %12s%s%s\n",
                              sampling || centroids ? "setting" : "budget", "sel.frac", "kv.union", "retained",
                              "ret.p10", "oracle", "ratio", "recall", "out.err", "rel.err", "rows bytes",
                              sampling ? "  est.err  sampled" : "", centroids ? "  centroids" : "");
  for (const auto& s : r.settings) {
    const EvalStats& b = s.overall;
    std::cout << cli::strprintf("  %-12s %9.4f %9.4f %9.4f %9.4f %9.4f %8.3f %9.4f %9.4f %10.4f %12.0f",
                                label(s).c_str(), b.selected_fraction_mean, b.selected_fraction_kv_union_mean,
                                b.retained_mass_mean, b.retained_mass_p10, b.oracle_retained_mass_mean, b.quality_ratio,
                                b.recall_support_mean, b.output_error_mean, b.relative_output_error_mean,
                                b.selected_row_bytes_mean);
    if (sampling)
      std::cout << cli::strprintf("  %7.4f  %7.4f", b.estimator_output_error_mean.value_or(0),
                                  b.sampled_fraction_mean.value_or(0));
    if (centroids) std::cout << cli::strprintf("  %9.1f", b.centroids_scored_mean.value_or(0));
    std::cout << cli::strprintf("\n");
  }
  if (sampling)
    std::cout << "  out.err: top-k renormalization over the sampled set; est.err: importance-sampling estimator\n";
  std::cout << "  kv.union: per KV head, the union of its query heads' rows at one position (what a GQA engine "
               "fetches)\n";
  if (r.settings.empty()) return;
  const EvalSetting& s0 = r.settings[0];
  std::cout << "  index bytes " << human_bytes(s0.index_bytes) << ", metadata bytes " << human_bytes(s0.metadata_bytes)
            << ", selected full-row bytes " << r.selected_row_bytes_per_row << " per row per head\n";
  std::cout << "  per layer (" << label(s0) << "):";
  for (const auto& [layer, st] : s0.per_layer)
    std::cout << cli::strprintf(" L%lld %.3f/%.3f", static_cast<long long>(layer), st.retained_mass_mean,
                                st.oracle_retained_mass_mean);
  std::cout << "  (retained/oracle)\n";
}

void print_compare(const CompareReport& r) {
  std::cout << "kvtool compare: " << r.artifacts.size() << " artifact" << (r.artifacts.size() == 1 ? "" : "s") << " on "
            << r.source << "\n";
  size_t w = 8;
  for (const auto& a : r.artifacts) w = std::max(w, a.report.artifact.size());
  for (const auto& a : r.artifacts) {
    const EvalReport& e = a.report;
    std::cout << cli::strprintf(
        "  %-*s %s, covered rows [0, %lld) (%lld indexed), %llu query positions, index %s = %.4f of K+V\n",
        static_cast<int>(w), e.artifact.c_str(), e.kind.c_str(), static_cast<long long>(e.coverage_end),
        static_cast<long long>(e.indexed_rows), static_cast<unsigned long long>(e.query_positions),
        human_bytes(e.index.stored).c_str(), e.index.stored_fraction());
  }
  std::cout << cli::strprintf("\n  %-*s %-9s %-12s %9s %9s %9s %9s %8s %8s %9s %9s %12s\n", static_cast<int>(w),
                              "artifact", "kind", "setting", "sel.frac", "kv.union", "retained", "oracle", "ratio",
                              "recall@k", "out.err", "rel.err", "index bytes");
  for (const auto& a : r.artifacts)
    for (const auto& s : a.report.settings) {
      const EvalStats& b = s.overall;
      std::cout << cli::strprintf("  %-*s %-9s %-12s %9.4f %9.4f %9.4f %9.4f %8.3f %8.3f %9.4f %9.4f %12llu\n",
                                  static_cast<int>(w), a.report.artifact.c_str(), a.report.kind.c_str(),
                                  s.label.c_str(), b.selected_fraction_mean, b.selected_fraction_kv_union_mean,
                                  b.retained_mass_mean, b.oracle_retained_mass_mean, b.quality_ratio,
                                  b.recall_support_mean, b.output_error_mean, b.relative_output_error_mean,
                                  static_cast<unsigned long long>(s.index_bytes));
    }
  std::cout << "  oracle: dense top-k with each query's selected row count; ratio = retained / oracle; recall@k: "
               "the share of that top-k the selection holds; out.err = |o_R - o|, rel.err = out.err / |o| (mean over "
               "queries); kv.union: per KV head, the union of its query heads' rows (what a GQA engine fetches)\n";
}

void print_load(const LoadReport& j) {
  std::ios saved(nullptr);
  saved.copyfmt(std::cout);
  std::cout << "pool: host tier"
            << (!j.device ? std::string(" only (no GPU in use)") : " + device tier (" + *j.device + ")") << "\n";
  for (const auto& [path, r] : j.receipts) {
    std::cout << "published " << r.key << " as generation " << r.generation << " (" << r.kind << ", index generation "
              << r.index_generation << "): host " << human_bytes(static_cast<uint64_t>(r.host_bytes)) << ", device "
              << human_bytes(static_cast<uint64_t>(r.device_bytes)) << "; read " << std::fixed << std::setprecision(1)
              << r.read_s * 1e3 << " ms, validate " << r.validate_s * 1e3 << " ms, decompress " << r.decompress_s * 1e3
              << " ms, copy " << r.copy_s * 1e3 << " ms\n";
    if (!r.evicted.empty()) std::cout << "  evicted to make room: " << json(r.evicted).dump() << "\n";
  }
  const PoolStats& t = j.tiers;
  std::cout << "tiers: host " << human_bytes(static_cast<uint64_t>(t.host_used)) << " of "
            << human_bytes(static_cast<uint64_t>(t.host_budget)) << ", device "
            << human_bytes(static_cast<uint64_t>(t.device_used)) << " of "
            << human_bytes(static_cast<uint64_t>(t.device_budget)) << "\n";
  std::cout << "publish: " << human_bytes(static_cast<uint64_t>(j.publish_bytes)) << " in " << std::setprecision(3)
            << j.publish_seconds << " s (" << std::setprecision(1) << j.publish_mb_per_s() << " MB/s)\n";
  const ReplayStats& q = j.queries;
  if (q.count == 0)
    std::cout << "queries: none replayed"
              << " (give --source DUMP with /kv/q; a query counts at or after an artifact's coverage end)"
              << "\n";
  else
    std::cout << "queries: " << q.count << " replayed (" << q.host << " host, " << q.device
              << " device); pool answers equal the file query path (kvtool query's selector code, so this "
                 "checks the pool, not the selectors); latency p50 "
              << q.p50_us.value_or(0) << " us, p99 " << q.p99_us.value_or(0) << " us\n";
  std::cout.copyfmt(saved);
}

}  // namespace kvtool::cli
