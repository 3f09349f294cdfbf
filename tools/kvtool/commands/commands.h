// kvtool's subcommands, one file each. register_X declares X's options on the app and returns the
// run that executes it (a library call and the printing); main.cpp holds the table.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "cli.h"
#include "kvtool/import.h"
#include "kvtool/signing.h"
#include "kvtool/store.h"

namespace kvtool::cmd {

// The flags of one command line that several subcommands bind: --json (cli::run also reads it to
// print errors as JSON) and -q/--quiet.
struct Flags {
  bool json = false, quiet = false;
};

using Register = cli::Command (*)(CLI::App& app, Flags& flags);
cli::Command register_inspect(CLI::App& app, Flags& flags);
cli::Command register_verify(CLI::App& app, Flags& flags);
cli::Command register_export(CLI::App& app, Flags& flags);
cli::Command register_keygen(CLI::App& app, Flags& flags);
cli::Command register_seal(CLI::App& app, Flags& flags);
cli::Command register_sign(CLI::App& app, Flags& flags);
cli::Command register_dump(CLI::App& app, Flags& flags);
cli::Command register_synth(CLI::App& app, Flags& flags);
cli::Command register_import(CLI::App& app, Flags& flags);
cli::Command register_demo(CLI::App& app, Flags& flags);
cli::Command register_query(CLI::App& app, Flags& flags);
cli::Command register_eval(CLI::App& app, Flags& flags);
cli::Command register_eval_decode(CLI::App& app, Flags& flags);
cli::Command register_compare(CLI::App& app, Flags& flags);
cli::Command register_merge(CLI::App& app, Flags& flags);
cli::Command register_build(CLI::App& app, Flags& flags);
cli::Command register_store(CLI::App& app, Flags& flags);
cli::Command register_load(CLI::App& app, Flags& flags);
cli::Command register_reasons(CLI::App& app, Flags& flags);
cli::Command register_completion(CLI::App& app, Flags& flags);

// Helpers several commands share (shared.cpp).
// A command's result: `j` as JSON with --json, else `text()` unless -q. Returns 0.
int emit(const Flags& flags, const json& j, const std::function<void()>& text);
// The trust options of every command that checks signatures (verify, load, store put/get): one
// set of flags, one loader (load_store_trust), the same accepted forms and errors everywhere.
struct TrustArgs {
  std::vector<std::string> pubkeys;
  std::string dir;
  bool require_signature = false;
  CLI::Option* dir_option = nullptr;
  bool any() const;  // some trust option was given
};
void add_trust_options(CLI::App* sub, TrustArgs& t, const std::string& require_help);
// USAGE for an empty --trusted-keys / KVTOOL_TRUSTED_KEYS and for --require-signature without a key.
StoreTrust load_trust(const TrustArgs& t);
// What the dump producers (dump, synth) write and say: -o, --force, the identity options, --json, -q.
void add_dump_output_options(CLI::App* sub, std::string& out, bool& force, IdentityOptions& ident, Flags& flags);

}  // namespace kvtool::cmd
