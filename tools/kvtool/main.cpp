// kvtool: one CLI11 app, one subcommand per file under commands/ (argument parsing and printing
// only; all logic lives in libkvtool).
#include "commands/commands.h"

using namespace kvtool;

int main(int argc, char** argv) {
  CLI::App app{
      "kvtool: offline retrieval indexes over dumped attention K/V caches.\n"
      "Dumps are kvdump v1 (HDF5); artifacts are signed kvi v1 containers. See kvtool(1)."};
  app.set_version_flag("--version", std::string("kvtool ") + KVTOOL_VERSION);
  app.require_subcommand(1);
  // In the order `kvtool --help` lists them.
  static constexpr cmd::Register table[] = {
      cmd::register_inspect, cmd::register_verify,  cmd::register_export,    cmd::register_keygen,
      cmd::register_sign,    cmd::register_dump,    cmd::register_synth,     cmd::register_import,
      cmd::register_demo,    cmd::register_query,   cmd::register_eval,      cmd::register_eval_decode,
      cmd::register_compare, cmd::register_merge,   cmd::register_build,     cmd::register_store,
      cmd::register_load,    cmd::register_reasons, cmd::register_completion};
  cmd::Flags flags;
  std::vector<cli::Command> commands;
  for (cmd::Register add : table) commands.push_back(add(app, flags));
  return cli::run("kvtool", app, argc, argv, &flags.json, [&] { return cli::run_chosen(commands); });
}
