// kvtool inspect FILE [--top-channels N] [--json]
#include "commands.h"
#include "kvtool/llama_state.h"
#include "kvtool/report.h"
#include "stdin_input.h"

namespace kvtool::cmd {

cli::Command register_inspect(CLI::App& app, Flags& flags) {
  struct Args {
    std::string path;
    int top_channels = 3;
    bool unchecked = false;
    LlamaStateArgs llama;
    std::string stdin_limit = "16G";
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("inspect",
                                 "Show shapes, identity, byte ledger and health of a dump, or the manifest, sections "
                                 "and signature of an artifact");
  sub->add_option("FILE", a->path,
                  "dump (.h5), artifact (.kvi) or llama.cpp state file; detected by content; - reads standard input")
      ->required();
  sub->add_option("--top-channels", a->top_channels, "outlier channels listed per (layer, head)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_flag("--unchecked", a->unchecked,
                "artifacts: show a file that fails verification (container and manifest schema still checked); "
                "by default inspect refuses what verify, query and load refuse");
  add_llama_state_options(sub, a->llama, false);
  cli::add_stdin_limit_option(sub, a->stdin_limit);
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] {
            const cli::InputFile in(a->path, a->stdin_limit);
            if (looks_like_llama_state(in.path())) return run_llama_inspect(in.path(), a->path, a->llama, flags);
            FileKind k = detect_file_kind(in.path());
            KVT_CHECK(k != FileKind::unknown, UNKNOWN_FILE_TYPE,
                      "'" << a->path << "' is neither a kvdump (HDF5) nor a kvi artifact");
            if (k == FileKind::dump) {
              DumpInspection d = inspect_dump(in.path(), a->top_channels);
              d.path = a->path;  // "-", not the temporary that held stdin
              return emit(flags, d.to_json(), [&] { cli::print_dump_inspection(d); });
            }
            ArtifactInspection r = inspect_artifact(in.path(), !a->unchecked);
            r.path = a->path;
            return emit(flags, r.to_json(), [&] {
              cli::print_artifact_inspection(r);
              cli::print_index_bytes(r.index);
            });
          }};
}

}  // namespace kvtool::cmd
