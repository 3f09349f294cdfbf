// kvtool-lsh: MagicPIG SimHash tables. Argument parsing only; the logic is lib/src/kinds/lsh.cpp.
#include <iostream>

#include "cli.h"
#include "lsh/lsh.h"

using namespace kvtool;

int main(int argc, char** argv) {
  CLI::App app{"kvtool-lsh: MagicPIG SimHash sampling tables over K/V dumps (see kvtool-lsh(1))"};
  app.set_version_flag("--version", std::string("kvtool-lsh ") + KVTOOL_VERSION);
  app.require_subcommand(1);
  bool as_json = false;
  cli::BuilderCli b;
  LshParams p;
  std::string dump;
  auto* build = app.add_subcommand("build", "Center keys, hash them with K-bit SimHash into L tables of CSR buckets");
  build->add_option("DUMP", dump, "kvdump v1 file")->required();
  build->add_option("--bits,-K", p.bits, "bits per table code, 1..16")->capture_default_str();
  build->add_option("--tables,-L", p.tables, "number of tables")->capture_default_str();
  cli::add_builder_options(build, b);
  return cli::run("kvtool-lsh", app, argc, argv, &as_json, [&]() -> int {
    as_json = b.json;
    cli::finish_builder_options(b);
    json j = build_artifact(dump, b.opt, LshBuilder(p));
    if (b.json) cli::print_json(j);
    else if (!b.opt.quiet) cli::print_build_summary(j);
    return 0;
  });
}
