// kvtool keygen -o KEY.pem [--json]
#include <iostream>

#include "commands.h"

namespace kvtool::cmd {

cli::Command register_keygen(CLI::App& app, Flags& flags) {
  auto out = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "keygen", "Create an Ed25519 signing key (KEY.pem, mode 0600) and KEY.pub.pem; never overwrites");
  sub->add_option("-o,--output", *out, "private key path, e.g. key.pem")->required();
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [out, &flags] {
            std::string pub = generate_keypair(*out);
            PublicKeyRaw raw = load_public_key(pub);
            json j{{"schema_version", kJsonSchemaVersion},
                   {"ok", true},
                   {"private_key", *out},
                   {"public_key", pub},
                   {"key_id", key_id(raw)}};
            return emit(flags, j, [&] {
              std::cout << "wrote " << *out << " (private, mode 0600) and " << pub << "\nkey id " << key_id(raw)
                        << "\n";
            });
          }};
}

}  // namespace kvtool::cmd
