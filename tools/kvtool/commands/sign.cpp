// kvtool sign ART --key KEY.pem [--json]
#include <iostream>

#include "commands.h"
#include "kvtool/artifact.h"

namespace kvtool::cmd {

cli::Command register_sign(CLI::App& app, Flags& flags) {
  struct Args {
    std::string path, key;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("sign", "Sign (or re-sign) an artifact's manifest in place, atomically");
  sub->add_option("ART", a->path, "artifact (.kvi)")->required();
  sub->add_option("--key", a->key, "Ed25519 private key (PEM)")->required();
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] {
            SigningKey key = SigningKey::load(a->key);
            sign_artifact(a->path, key);
            json j{{"schema_version", kJsonSchemaVersion},
                   {"ok", true},
                   {"artifact", a->path},
                   {"key_id", key_id(key.public_key())}};
            return emit(flags, j,
                        [&] { std::cout << "signed " << a->path << " with key " << key_id(key.public_key()) << "\n"; });
          }};
}

}  // namespace kvtool::cmd
