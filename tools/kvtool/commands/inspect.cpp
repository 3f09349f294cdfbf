// kvtool inspect FILE [--top-channels N] [--json]
#include "commands.h"
#include "kvtool/report.h"
#include "env.h"
#include "snapshot_options.h"
#include "store_options.h"
#include "stdin_input.h"

namespace kvtool::cmd {

cli::Command register_inspect(CLI::App& app, Flags& flags) {
  struct Args {
    std::string path;
    int top_channels = 3;
    bool unchecked = false;
    cli::LlamaStateArgs llama;
    std::string stdin_limit = "16G";
    cli::StoreArgs store;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("inspect",
                                 "Show shapes, identity, byte ledger and health of a dump, or the manifest, sections "
                                 "and signature of an artifact");
  sub->add_option(
         "FILE", a->path,
         "dump (.h5), artifact (.kvi), llama.cpp state file, or a cache store directory (vLLM, LMCache, SGLang: "
         "formats/cache-stores.md); detected by content; - reads standard input")
      ->required();
  sub->add_option("--top-channels", a->top_channels, "outlier channels listed per (layer, head)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_flag("--unchecked", a->unchecked,
                "artifacts: show a file that fails verification (container and manifest schema still checked); "
                "by default inspect refuses what verify, query and load refuse");
  cli::add_llama_state_options(sub, a->llama, false);
  cli::add_stdin_limit_option(sub, a->stdin_limit);
  cli::add_store_options(sub, a->store);
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] {
            if (cli::is_store_path(a->path)) {
              StoreCheckOptions o = a->store.check;
              o.threads = cli::default_threads(), o.quiet = flags.quiet || flags.json;
              const StoreReport r = inspect_store(a->path, o);
              return emit(flags, r.to_json(), [&] { cli::print_store_report(r, false); });
            }
            cli::refuse_store_options(a->store, a->path);
            const cli::InputFile in(a->path, a->stdin_limit);
            InspectOptions o;
            o.top_channels = a->top_channels;
            o.admit = !a->unchecked;
            o.gguf = a->llama.gguf;
            o.llama = cli::llama_state_options(a->llama);
            FileInspection r = inspect_file(in.path(), o);
            // The path as given ("-", not the temporary that held stdin).
            if (r.dump) r.dump->path = a->path;
            if (r.artifact) r.artifact->path = a->path;
            if (r.state) r.state->path = a->path;
            return emit(flags, r.to_json(), [&] {
              if (r.dump) cli::print_dump_inspection(*r.dump);
              if (r.state) cli::print_llama_state(*r.state);
              if (!r.artifact) return;
              cli::print_artifact_inspection(*r.artifact);
              cli::print_index_bytes(r.artifact->index);
            });
          }};
}

}  // namespace kvtool::cmd
