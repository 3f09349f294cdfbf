// kvtool: one CLI11 app, one subcommand per file under commands/ (argument parsing and printing
// only; all logic lives in libkvtool).
#include <iostream>
#include <memory>
#include <string>

#include "commands/commands.h"

using namespace kvtool;

namespace {

// The usage line keeps "SUBCOMMAND", not "[SUBCOMMAND]": a command is required, although the parser
// accepts none so that `kvtool` alone can print the command list (main).
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, std::move(name));
    if (app->get_parent() == nullptr) {
      if (size_t at = usage.rfind(" [SUBCOMMAND]"); at != std::string::npos) usage.replace(at, 13, " SUBCOMMAND");
    }
    return usage;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kvtool: offline retrieval indexes over dumped attention K/V caches.\n"
      "Dumps are kvdump v1 (HDF5); artifacts are signed kvi v1 containers. See kvtool(1)."};
  app.formatter(std::make_shared<Formatter>());
  app.set_version_flag("--version", std::string("kvtool ") + KVTOOL_VERSION);
  // One command at most; none (`kvtool` alone) prints the command list and is a usage error (below).
  app.require_subcommand(0, 1);
  // In the order `kvtool --help` lists them.
  static constexpr cmd::Register table[] = {
      cmd::register_inspect,     cmd::register_verify,  cmd::register_export,  cmd::register_keygen,
      cmd::register_seal,        cmd::register_sign,    cmd::register_dump,    cmd::register_synth,
      cmd::register_import,      cmd::register_demo,    cmd::register_query,   cmd::register_eval,
      cmd::register_eval_decode, cmd::register_compare, cmd::register_merge,   cmd::register_build,
      cmd::register_store,       cmd::register_load,    cmd::register_reasons, cmd::register_completion};
  cmd::Flags flags;
  std::vector<cli::Command> commands;
  for (cmd::Register add : table) commands.push_back(add(app, flags));
  return cli::run("kvtool", app, argc, argv, &flags.json, [&] {
    // No command: what `kvtool --help` prints (the commands and global options), on stderr, then
    // USAGE (exit 2), as for any other incomplete command line.
    if (app.get_subcommands().empty()) {
      std::cerr << app.help();
      KVT_THROW(USAGE, "no command given; choose one of the commands above (kvtool COMMAND --help for its options)");
    }
    return cli::run_chosen(commands);
  });
}
