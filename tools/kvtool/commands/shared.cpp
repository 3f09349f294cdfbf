// Helpers several kvtool commands share.
#include <cstdlib>

#include "commands.h"

namespace kvtool::cmd {

int emit(const Flags& flags, const json& j, const std::function<void()>& text) {
  if (flags.json)
    cli::print_json(j);
  else if (!flags.quiet)
    text();
  return 0;
}

void add_trust_options(CLI::App* sub, TrustArgs& t, const std::string& require_help) {
  sub->add_option("--pubkey", t.pubkeys, "trusted Ed25519 public key (PEM), for every tenant; may be repeated");
  t.dir_option = sub->add_option("--trusted-keys", t.dir,
                                 "directory of trusted public keys (*.pem for every tenant, <tenant>/*.pem for that "
                                 "tenant only)")
                     ->envname("KVTOOL_TRUSTED_KEYS");
  sub->add_flag("--require-signature", t.require_signature, require_help);
}

StoreTrust load_trust(const TrustArgs& t) {
  // An empty value names no directory; read as "no trust options" it would admit artifacts signed
  // by any key, so it is refused rather than ignored (CLI11 skips an empty environment value).
  const char* env = std::getenv("KVTOOL_TRUSTED_KEYS");
  const bool given = t.dir_option && t.dir_option->count() > 0;
  KVT_CHECK(!(given && t.dir.empty()), USAGE, "--trusted-keys is empty; name a directory of trusted keys");
  KVT_CHECK(given || !env || *env, USAGE,
            "KVTOOL_TRUSTED_KEYS is set but empty; unset it or name a directory of trusted keys");
  StoreTrust trust = load_store_trust(t.pubkeys, t.dir, t.require_signature);
  // Any key can sign anything: "signed" alone says nothing about who wrote the manifest.
  KVT_CHECK(!t.require_signature || !trust.all.trusted.empty() || !trust.tenant_keys.empty(), USAGE,
            "--require-signature needs --pubkey or --trusted-keys: a signature only means something when it is "
            "checked against a key you trust");
  return trust;
}

bool TrustArgs::any() const { return !pubkeys.empty() || !dir.empty() || require_signature; }

void add_dump_output_options(CLI::App* sub, std::string& out, bool& force, IdentityOptions& ident, Flags& flags) {
  sub->add_option("-o,--output", out, "output dump (.h5)")->required();
  sub->add_flag("--force", force, "overwrite an existing output");
  cli::add_identity_options(sub, ident);
  sub->add_flag("--json", flags.json, "machine-readable summary");
  sub->add_flag("-q,--quiet", flags.quiet, "print nothing on success");
}

}  // namespace kvtool::cmd
