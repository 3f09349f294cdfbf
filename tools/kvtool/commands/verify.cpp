// kvtool verify FILE [--source DUMP] [--strict-snapshot] [--pubkey P | --trusted-keys DIR]
// [--require-signature] [--json]
#include "commands.h"
#include "env.h"
#include "kvtool/report.h"
#include "snapshot_options.h"
#include "parse.h"
#include "store_options.h"
#include "stdin_input.h"

namespace kvtool::cmd {

namespace {

struct VerifyArgs {
  std::string path;
  VerifyOptions opt;
  TrustArgs trust;
  cli::LlamaStateArgs llama;
  std::string stdin_limit = "16G";
  cli::StoreArgs store;
};

// A store directory: every check of kvtool/store_check.h; exit 1 when any finding is not a warning.
int run_verify_store(VerifyArgs& a, const Flags& flags) {
  KVT_CHECK(a.opt.source.empty() && !a.opt.strict_snapshot && !a.opt.model_check && a.llama.gguf.empty(), USAGE,
            "--source, --strict-snapshot, --model-check and --gguf apply to files; a store takes --model");
  cli::resolve_store_prompt(a.store);
  StoreCheckOptions o = a.store.check;
  o.threads = cli::default_threads(), o.quiet = flags.quiet || flags.json;
  if (a.llama.tolerance >= 0) o.tolerance = a.llama.tolerance;
  if (a.trust.any()) {
    KVT_CHECK(!o.seal.empty(), USAGE, "--pubkey / --trusted-keys check a store's seal: give --seal");
    o.trusted_keys = load_trust(a.trust).all.trusted;
  }
  if (!a.store.shard.empty()) {
    KVT_CHECK(!o.seal.empty(), USAGE, "--shard picks the files a seal is compared with: give --seal");
    cli::parse_shard(a.store.shard, o.shard_index, o.shard_count, a.store.shard_count);
  }
  const StoreReport r = verify_store(a.path, o);
  emit(flags, r.to_json(), [&] { cli::print_store_report(r, true); });
  return r.ok() ? 0 : 1;
}

// A single file against its seal (formats/seal-v1.md): exit 1 when it changed.
int run_verify_sealed_file(VerifyArgs& a, const std::string& seal, const Flags& flags) {
  StoreReport r;
  r.root = a.path, r.kind = "file";
  std::vector<PublicKeyRaw> trusted;
  if (a.trust.any()) trusted = load_trust(a.trust).all.trusted;
  check_seal(a.path, read_seal(seal), trusted, 1, flags.quiet || flags.json, r.findings, r.sealed_files);
  emit(flags, r.to_json(), [&] { cli::print_store_report(r, true); });
  return r.ok() ? 0 : 1;
}

int run_verify(VerifyArgs& a, const Flags& flags) {
  if (cli::is_store_path(a.path)) return run_verify_store(a, flags);
  const std::string seal = a.store.check.seal;
  a.store.check.seal.clear();
  cli::refuse_store_options(a.store, a.path);
  KVT_CHECK(!cli::resolve_store_prompt(a.store), USAGE, "--prompt and its kin apply to store directories");
  if (!seal.empty()) return run_verify_sealed_file(a, seal, flags);
  const cli::InputFile in(a.path, a.stdin_limit);
  VerifyOptions& o = a.opt;
  o.gguf = a.llama.gguf;
  o.llama = cli::llama_state_options(a.llama);
  o.tolerance = cli::llama_state_tolerance(a.llama);
  o.threads = cli::default_threads();
  if (detect_file_kind(in.path()) == FileKind::artifact) {
    // The policy `store get` and `load` apply: <tenant>/ key folders vouch for that tenant only.
    const StoreTrust trust = load_trust(a.trust);
    TrustPolicy p = trust.all;
    if (!trust.tenant_keys.empty()) {
      const ArtifactReader r(in.path());
      p = tenant_policy(trust, r.source().id.tenant_namespace, r.is_signed());
    }
    o.trusted_keys = p.trusted;
    o.require_signature = p.require_signature;
  } else {
    KVT_CHECK(!a.trust.any(), USAGE, "signature options apply to artifacts, not to '" << a.path << "'");
  }
  FileVerification v = verify_file(in.path(), o);
  // The path as given ("-", not the temporary that held stdin).
  if (v.dump) v.dump->path = a.path;
  if (v.artifact) v.artifact->path = a.path;
  if (v.state) v.state->state.path = a.path;
  return emit(flags, v.to_json(), [&] {
    if (v.dump) cli::print_verify_result(*v.dump);
    if (v.artifact) cli::print_verify_result(*v.artifact);
    if (v.state) cli::print_verify_result(*v.state);
  });
}

}  // namespace

cli::Command register_verify(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<VerifyArgs>();
  auto* sub = app.add_subcommand(
      "verify", "Check structure, every digest, the signature and (with --source) the binding to a dump");
  sub->add_option(
         "FILE", a->path,
         "dump, artifact, llama.cpp state file or cache store directory (formats/cache-stores.md); - reads standard "
         "input")
      ->required();
  sub->add_option("--source", a->opt.source,
                  "dump the artifact must have been built from (content digest of its covered range); for a "
                  "llama.cpp state file, a dump whose K/V the state must equal within --tolerance");
  cli::add_llama_state_options(sub, a->llama, true);
  sub->add_flag("--model-check", a->opt.model_check,
                "llama.cpp state files: run the --gguf model over the state's tokens and require its K to equal "
                "the state's (a state another model wrote is MODEL_MISMATCH; docs/models.md)");
  sub->add_flag("--strict-snapshot", a->opt.strict_snapshot,
                "also require the dump's snapshot digest (generations, frontier) to match");
  add_trust_options(sub, a->trust, "fail unsigned artifacts (needs --pubkey or --trusted-keys)");
  cli::add_stdin_limit_option(sub, a->stdin_limit);
  cli::add_store_options(sub, a->store);
  cli::add_store_prompt_options(sub, a->store);
  sub->add_option("--seal", a->store.check.seal,
                  "compare the store directory or file with this seal (kvtool seal): a changed, removed or added file "
                  "fails; with --pubkey / --trusted-keys the seal must be signed by one of them");
  sub->add_option("--shard", a->store.shard,
                  "with --seal: compare shard I of N of the files only (I/N, or auto in a Slurm array or Kubernetes "
                  "indexed Job)");
  sub->add_option("--shard-count", a->store.shard_count, "shards of a Kubernetes indexed Job (with --shard auto)");
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] { return run_verify(*a, flags); }};
}

}  // namespace kvtool::cmd
