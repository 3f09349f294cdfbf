// kvtool seal PATH -o SEAL.json [--sign-key K] [--shard I/N|auto] [--store-kind K] [--force]
// kvtool seal --merge SEAL... -o SEAL.json [--sign-key K]
// The SHA-256 of every file of a cache store (or of one file), so that `kvtool verify PATH --seal`
// finds the bit rot no stack detects (formats/seal-v1.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "commands.h"
#include "env.h"
#include "kvtool/atomic_file.h"
#include "kvtool/store_check.h"
#include "parse.h"

namespace kvtool::cmd {

namespace {

struct SealArgs {
  std::string path, out, sign_key, shard, kind;
  std::vector<std::string> merge;
  int64_t shard_count = 0;
  bool force = false, resume = false;
};

void write_seal(const json& seal, const std::string& out, bool force) {
  AtomicOutput o(out, force);
  const std::string text = seal.dump(1) + "\n";
  write_all(o.fd(), text.data(), text.size(), "the seal '" + out + "'");
  o.commit();
}

// A seal written inside the folder it seals would be a file of that folder, "added" at the next
// verify: refused.
void refuse_seal_inside(const std::string& store, const std::string& out) {
  char* s = ::realpath(store.c_str(), nullptr);
  const std::string parent = out.find('/') == std::string::npos ? "." : out.substr(0, out.rfind('/') + 1);
  char* o = ::realpath(parent.c_str(), nullptr);
  const bool inside = s && o && (std::string(o) == s || std::string(o).rfind(std::string(s) + "/", 0) == 0);
  std::free(s), std::free(o);
  KVT_CHECK(!inside, USAGE, "'" << out << "' is inside '" << store << "': write the seal outside the folder it seals");
}

int run_seal(const SealArgs& a, const Flags& flags) {
  json seal;
  if (!a.merge.empty()) {
    KVT_CHECK(a.path.empty() && a.shard.empty(), USAGE, "--merge takes seals, not a PATH or --shard");
    std::vector<json> shards;
    for (const std::string& m : a.merge) shards.push_back(read_seal(m));
    seal = merge_seals(shards, a.sign_key);
  } else {
    KVT_CHECK(!a.path.empty(), USAGE, "give the store directory or file to seal (or --merge SEAL...)");
    refuse_seal_inside(a.path, a.out);
    SealOptions o;
    o.store.kind = a.kind;
    o.threads = cli::default_threads();
    o.quiet = flags.quiet || flags.json;
    o.sign_key = a.sign_key;
    o.journal = a.out + ".partial", o.resume = a.resume;
    if (!a.force) {  // refused before hours of hashing, not after
      struct stat st {};
      KVT_CHECK(::stat(a.out.c_str(), &st) != 0, OUTPUT_EXISTS, "'" << a.out << "' exists; --force overwrites it");
    }
    if (!a.shard.empty()) cli::parse_shard(a.shard, o.shard_index, o.shard_count, a.shard_count);
    seal = make_seal(a.path, o);
  }
  write_seal(seal, a.out, a.force);
  if (a.merge.empty()) ::unlink((a.out + ".partial").c_str());
  const json summary = {
      {"schema_version", kJsonSchemaVersion}, {"seal", a.out},          {"kind", seal["kind"]},
      {"files", seal["files"].size()},        {"shard", seal["shard"]}, {"signed", seal.contains("signature")}};
  return emit(flags, summary, [&] {
    std::cout << a.out << ": " << seal["files"].size() << " files of " << seal["name"].get<std::string>() << " ("
              << seal["kind"].get<std::string>() << ") sealed, shard " << seal["shard"]["index"] << "/"
              << seal["shard"]["count"] << (seal.contains("signature") ? ", signed" : "") << "\n";
  });
}

}  // namespace

cli::Command register_seal(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<SealArgs>();
  auto* sub = app.add_subcommand(
      "seal", "Record the SHA-256 of every file of a cache store (or of one file) so that verify --seal finds bit rot");
  sub->add_option("PATH", a->path, "store directory (vLLM, LMCache, SGLang or any folder) or a single file");
  sub->add_option("-o,--output", a->out, "the seal to write (JSON, formats/seal-v1.md)")->required();
  sub->add_flag("--force", a->force, "overwrite an existing seal");
  sub->add_option("--sign-key", a->sign_key, "Ed25519 private key (PEM, kvtool keygen) to sign the seal with");
  sub->add_option("--shard", a->shard,
                  "seal the files of shard I of N only (I/N, or auto in a Slurm array or Kubernetes indexed Job); "
                  "merge the shard seals with --merge");
  sub->add_option("--shard-count", a->shard_count, "shards of a Kubernetes indexed Job (with --shard auto)");
  sub->add_option("--store-kind", a->kind,
                  "vllm | lmcache | sglang: whose temporaries are left out (default: recognised)")
      ->check(CLI::IsMember(store_kinds()));
  sub->add_flag("--resume", a->resume,
                "continue a seal that was interrupted: files OUT.partial recorded at their present size and "
                "modification time are not hashed again (OUT.partial is written while sealing, removed at the end)");
  sub->add_option("--merge", a->merge, "merge these shard seals (every shard of one tree, once) into one");
  sub->add_flag("--json", flags.json, "machine-readable output");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress and no summary");
  return {sub, [a, &flags] { return run_seal(*a, flags); }};
}

}  // namespace kvtool::cmd
