// Each index kind's command line, written once: the kvtool-KIND binaries are aliases of
// kind_main(), and `kvtool build KIND ARGS...` runs the same app in process (run_kind_build).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "kind_main.h"
#include "kvtool/append.h"
#include "kvtool/output_path.h"

namespace kvtool::cli {

// Registers a kind's subcommands on `app` (the kvtool-KIND app): build, and append where the kind
// has one. `as_json` is the flag cli::run reads when it prints an error.
using AddKindCommands = void (*)(CLI::App& app, std::vector<Command>& cmds, bool& as_json);
// One per line of kvtool/kinds.def, defined in tools/common/kind_options/KIND.cpp.
#define KVTOOL_KIND(name, about) void add_##name##_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json);
#include "kvtool/kinds.def"
#undef KVTOOL_KIND

struct KindCli {
  std::string kind;   // "pq": the program is kvtool-pq
  std::string about;  // its --help description
  AddKindCommands add;
};
const std::vector<KindCli>& kind_clis();  // kvtool/kinds.def's kinds, in its order
std::string kind_names(const char* separator);

// `kvtool build KIND ARGS...` = `kvtool-KIND build ARGS...`; USAGE for an unknown kind.
int run_kind_build(const std::string& kind, const std::vector<std::string>& args);

// What every kind's build has in common: DUMP, the kind's options, the builder options; the run
// finishes the options, builds the artifact and prints its summary.
struct BuildCommand {
  std::string about, dump_help;
  std::function<void(CLI::App*)> options;              // declares the kind's parameters
  std::function<std::unique_ptr<KindBuilder>()> make;  // after the builder options are checked
};
Command add_build_command(CLI::App& app, BuildCommand spec, bool& as_json);

// What every kind's append has in common: ART DUMP -o --prefix, the kind's options, --sign-key,
// --json, -q; the run calls the library and prints the kind's summary (PqAppendSummary, ...): its
// to_json() with --json, else `summary` unless -q. The options bound to the library's
// AppendOptions (quiet: -q) and the tool's own --force.
struct AppendArgs : AppendOptions {
  bool force = false;
};
struct AppendHelp {
  std::string about, art_help, dump_help, prefix_help;
  std::function<void(CLI::App*)> options;  // the kind's options; may be empty
};
template <typename Summary>
struct AppendCommand {
  AppendHelp help;
  std::function<Summary(const AppendOptions&)> append;                // the library call (quiet also with --json)
  std::function<void(const AppendOptions&, const Summary&)> summary;  // the text output
};
// The "append" subcommand with the shared options bound to `a` (the part that is not per Summary).
CLI::App* add_append_options(CLI::App& app, const AppendHelp& help, AppendArgs& a, bool& as_json);
template <typename Summary>
Command add_append_command(CLI::App& app, AppendCommand<Summary> spec, bool& as_json) {
  auto a = std::make_shared<AppendArgs>();
  CLI::App* sub = add_append_options(app, spec.help, *a, as_json);
  return {sub, [a, &as_json, append = std::move(spec.append), summary = std::move(spec.summary)] {
            for (const std::string* in : {&a->artifact, &a->dump})  // never over an input, even with --force
              KVT_CHECK(!same_file(a->output, *in), USAGE, "-o '" << a->output << "' is the input '" << *in << "'");
            if (!a->force) refuse_existing_output(a->output);  // before any work, as every output
            AppendOptions o = *a;
            o.quiet = a->quiet || as_json;
            Summary s = append(o);
            if (as_json)
              print_json(s.to_json());
            else if (!a->quiet)
              summary(*a, s);
            return 0;
          }};
}

}  // namespace kvtool::cli
