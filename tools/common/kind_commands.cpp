#include "kind_commands.h"

#include <iostream>

#include "env.h"

namespace kvtool::cli {

const std::vector<KindCli>& kind_clis() {
  static const std::vector<KindCli> kinds{
#define KVTOOL_KIND(name, about) \
  {#name, "kvtool-" #name ": " about " (see kvtool-" #name "(1))", add_##name##_commands},
#include "kvtool/kinds.def"
#undef KVTOOL_KIND
  };
  return kinds;
}

std::string kind_names(const char* separator) {
  std::string s;
  for (const auto& k : kind_clis()) s += (s.empty() ? "" : separator) + k.kind;
  return s;
}

namespace {
const KindCli* find_kind_cli(const std::string& kind) {
  for (const auto& k : kind_clis())
    if (k.kind == kind) return &k;
  return nullptr;
}
}  // namespace

int kind_main(const std::string& kind, int argc, char** argv) {
  const std::string tool = "kvtool-" + kind;
  const KindCli* found = find_kind_cli(kind);
  if (!found) {  // a programming error: the aliases and run_kind_build pass known kinds
    std::cerr << tool << ": error [INTERNAL]: no index kind '" << kind << "' (kinds: " << kind_names(", ") << ")\n";
    return static_cast<int>(ExitCode::internal);
  }
  const KindCli& k = *found;
  CLI::App app{k.about};
  app.set_version_flag("--version", tool + " " + KVTOOL_VERSION);
  app.require_subcommand(1);
  bool as_json = false;
  std::vector<Command> cmds;
  k.add(app, cmds, as_json);
  return run(tool, app, argc, argv, &as_json, [&] { return run_chosen(cmds); });
}

int run_kind_build(const std::string& kind, const std::vector<std::string>& args) {
  KVT_CHECK(find_kind_cli(kind), USAGE, "unknown index kind '" << kind << "' (kinds: " << kind_names(", ") << ")");
  // argv[0] as the sibling program's path: help text reads as it did when this was an exec.
  std::vector<std::string> words{sibling_program("kvtool-" + kind), "build"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return kind_main(kind, static_cast<int>(words.size()), argv.data());
}

Command add_build_command(CLI::App& app, BuildCommand spec, bool& as_json) {
  struct Args {
    BuilderCli b;
    std::string dump;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("build", spec.about);
  sub->add_option("DUMP", a->dump, spec.dump_help)->required();
  spec.options(sub);
  add_builder_options(sub, a->b);
  sub->add_flag("--force", a->force, "overwrite an existing output");
  return {sub, [a, &as_json, make = std::move(spec.make)] {
            as_json = a->b.json;
            finish_builder_options(a->b);
            KVT_CHECK(!same_file(a->b.opt.output, a->dump), USAGE,
                      "-o '" << a->b.opt.output << "' is the input dump; choose another path");
            if (!a->force) refuse_existing_output(a->b.opt.output);
            BuildSummary s = build_artifact(a->dump, a->b.opt, *make());
            if (a->b.json)
              print_json(s.to_json());
            else if (!a->b.opt.quiet)
              print_build_summary(s);
            return 0;
          }};
}

CLI::App* add_append_options(CLI::App& app, const AppendHelp& help, AppendArgs& a, bool& as_json) {
  auto* sub = app.add_subcommand("append", help.about);
  sub->add_option("ART", a.artifact, help.art_help)->required();
  sub->add_option("DUMP", a.dump, help.dump_help)->required();
  sub->add_option("-o,--output", a.output, "new artifact")->required();
  sub->add_option("--prefix", a.prefix, help.prefix_help);
  if (help.options) help.options(sub);
  sub->add_option("--sign-key", a.sign_key, "Ed25519 private key (PEM)");
  sub->add_flag("--force", a.force, "overwrite an existing output");
  sub->add_flag("--json", as_json, "JSON summary");
  sub->add_flag("-q,--quiet", a.quiet, "no progress");
  return sub;
}

}  // namespace kvtool::cli
