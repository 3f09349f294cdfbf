// kvtool merge SHARD.kvi... -o OUT.kvi [--sign-key K] [--json] [-q]
#include <iostream>

#include "commands.h"
#include "kvtool/builder.h"
#include "kvtool/output_path.h"

namespace kvtool::cmd {

cli::Command register_merge(CLI::App& app, Flags& flags) {
  struct Args {
    std::vector<std::string> in;
    std::string out, key;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "merge", "Combine shard artifacts (same source, kind, params) into the artifact an unsharded build gives");
  sub->add_option("SHARDS", a->in, "shard artifacts")->required();
  sub->add_option("-o,--output", a->out, "merged artifact")->required();
  sub->add_option("--sign-key", a->key, "Ed25519 private key (PEM) to sign the merged artifact");
  sub->add_flag("--force", a->force, "overwrite an existing output (never one of the shards)");
  sub->add_flag("--json", flags.json, "machine-readable summary");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress");
  return {sub, [a, &flags] {
            // Writing over a shard would destroy an input the merge still reads, whatever --force
            // says; the same file may hide behind another path or a symlink.
            for (const auto& in : a->in)
              KVT_CHECK(!same_file(a->out, in), USAGE,
                        "-o '" << a->out << "' is the shard '" << in
                               << "'; merging into one of its own inputs is refused, even with --force");
            if (!a->force) refuse_existing_output(a->out);
            MergeSummary s = merge_artifacts(a->in, a->out, a->key, flags.quiet || flags.json);
            return emit(flags, s.to_json(), [&] {
              std::cout << "merged " << s.shards << " shards (" << s.parts_total << " parts) into " << a->out << "\n";
            });
          }};
}

}  // namespace kvtool::cmd
