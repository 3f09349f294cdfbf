// Helpers several kvtool commands share.
#include "commands.h"

namespace kvtool::cmd {

int emit(const Flags& flags, const json& j, const std::function<void()>& text) {
  if (flags.json)
    cli::print_json(j);
  else if (!flags.quiet)
    text();
  return 0;
}

std::vector<PublicKeyRaw> trusted_keys(const std::vector<std::string>& pubkeys, const std::string& dir) {
  std::vector<PublicKeyRaw> keys;
  for (const auto& p : pubkeys) keys.push_back(load_public_key(p));
  if (!dir.empty()) {
    auto more = load_trusted_keys(dir);
    KVT_CHECK(!more.empty(), USAGE, "--trusted-keys directory '" << dir << "' holds no *.pem keys");
    keys.insert(keys.end(), more.begin(), more.end());
  }
  return keys;
}

void add_dump_output_options(CLI::App* sub, std::string& out, IdentityOptions& ident, Flags& flags) {
  sub->add_option("-o,--output", out, "output dump (.h5)")->required();
  cli::add_identity_options(sub, ident);
  sub->add_flag("--json", flags.json, "machine-readable summary");
  sub->add_flag("-q,--quiet", flags.quiet, "print nothing on success");
}

}  // namespace kvtool::cmd
