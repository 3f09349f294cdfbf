// kvtool merge SHARD.kvi... -o OUT.kvi [--sign-key K] [--json] [-q]
#include <iostream>

#include "commands.h"
#include "kvtool/builder.h"

namespace kvtool::cmd {

cli::Command register_merge(CLI::App& app, Flags& flags) {
  struct Args {
    std::vector<std::string> in;
    std::string out, key;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "merge", "Combine shard artifacts (same source, kind, params) into the artifact an unsharded build gives");
  sub->add_option("SHARDS", a->in, "shard artifacts")->required();
  sub->add_option("-o,--output", a->out, "merged artifact")->required();
  sub->add_option("--sign-key", a->key, "Ed25519 private key (PEM) to sign the merged artifact");
  sub->add_flag("--json", flags.json, "machine-readable summary");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress");
  return {sub, [a, &flags] {
            MergeSummary s = merge_artifacts(a->in, a->out, a->key, flags.quiet || flags.json);
            return emit(flags, s.to_json(), [&] {
              std::cout << "merged " << s.shards << " shards (" << s.parts_total << " parts) into " << a->out << "\n";
            });
          }};
}

}  // namespace kvtool::cmd
