// kvtool verify FILE [--source DUMP] [--strict-snapshot] [--pubkey P | --trusted-keys DIR]
// [--require-signature] [--json]
#include <sys/stat.h>

#include "commands.h"
#include "kvtool/llama_state.h"
#include "kvtool/report.h"
#include "stdin_input.h"

namespace kvtool::cmd {

namespace {

struct VerifyArgs {
  std::string path;
  VerifyOptions opt;
  TrustArgs trust;
  LlamaStateArgs llama;
  std::string stdin_limit = "16G";
};

void require_file(const std::string& p, const char* what) {
  struct stat st {};
  KVT_CHECK(stat(p.c_str(), &st) == 0, IO_ERROR, what << " '" << p << "' does not exist");
}

int run_verify(VerifyArgs& a, const Flags& flags) {
  const cli::InputFile in(a.path, a.stdin_limit);
  if (looks_like_llama_state(in.path())) {
    KVT_CHECK(a.trust.pubkeys.empty() && !a.trust.require_signature && !a.opt.strict_snapshot, USAGE,
              "signature and snapshot options apply to artifacts, not to llama.cpp state files");
    if (!a.opt.source.empty()) require_file(a.opt.source, "source dump");
    return run_llama_verify(in.path(), a.path, a.opt.source, a.llama, flags);
  }
  FileKind k = detect_file_kind(in.path());
  KVT_CHECK(k != FileKind::unknown, UNKNOWN_FILE_TYPE,
            "'" << a.path << "' is neither a kvdump (HDF5) nor a kvi artifact");
  VerifyOptions& o = a.opt;
  const StoreTrust trust = load_trust(a.trust);
  if (!o.source.empty()) require_file(o.source, "source dump");
  if (k == FileKind::dump) {
    KVT_CHECK(o.source.empty() && !a.trust.any() && !o.strict_snapshot, USAGE,
              "--source, --strict-snapshot and signature options apply to artifacts, not to dumps");
    DumpVerification v = verify_dump(in.path());
    v.path = a.path;  // "-", not the temporary that held stdin
    return emit(flags, v.to_json(), [&] { cli::print_verify_result(v); });
  }
  // The policy `store get` and `load` apply: <tenant>/ key folders vouch for that tenant only.
  TrustPolicy p = trust.all;
  if (!trust.tenant_keys.empty()) {
    const ArtifactReader r(in.path());
    p = tenant_policy(trust, r.source().id.tenant_namespace, r.is_signed());
  }
  o.trusted_keys = p.trusted;
  o.require_signature = p.require_signature;
  ArtifactVerification v = verify_artifact(in.path(), o);
  v.path = a.path;
  return emit(flags, v.to_json(), [&] { cli::print_verify_result(v); });
}

}  // namespace

cli::Command register_verify(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<VerifyArgs>();
  auto* sub = app.add_subcommand(
      "verify", "Check structure, every digest, the signature and (with --source) the binding to a dump");
  sub->add_option("FILE", a->path, "dump, artifact or llama.cpp state file; - reads standard input")->required();
  sub->add_option("--source", a->opt.source,
                  "dump the artifact must have been built from (content digest of its covered range); for a "
                  "llama.cpp state file, a dump whose K/V the state must equal within --tolerance");
  add_llama_state_options(sub, a->llama, true);
  sub->add_flag("--strict-snapshot", a->opt.strict_snapshot,
                "also require the dump's snapshot digest (generations, frontier) to match");
  add_trust_options(sub, a->trust, "fail unsigned artifacts (needs --pubkey or --trusted-keys)");
  cli::add_stdin_limit_option(sub, a->stdin_limit);
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] { return run_verify(*a, flags); }};
}

}  // namespace kvtool::cmd
