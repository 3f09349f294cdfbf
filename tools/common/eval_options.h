// The options `kvtool eval` and `kvtool compare` share: the swept query options (--budget,
// --min-collisions, --quantile, -o NAME=VALUE), the position sample and --threads.
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "kvtool/atomic_file.h"
#include "kvtool/eval.h"

namespace kvtool::cli {

struct SweepFlags {
  std::string csv, plot;  // --csv, --plot: what each command writes there is its own
  std::vector<std::string> budgets;
  std::vector<int64_t> min_collisions;
  std::vector<std::string> quantiles;  // as given: the kind parses them (USAGE naming the option)
  std::vector<std::string> reranks;    // --rerank F: budget kinds' rerank factors (1: none)
  std::vector<std::string> top_ps;     // --top-p P: budget kinds' adaptive budgets (0: none)
  std::vector<std::string> options;    // --option NAME=VALUE: one more swept value of that option
  std::string positions = "all";
  uint64_t positions_seed = 0;
  int threads = 0;
  bool share_kv_head = false;  // --share-kv-head

  // Declares the options on `sub`; `defaults` says what an unnamed knob sweeps (per command).
  struct Defaults {
    std::string budget, min_collisions, quantile;
  };
  void add(CLI::App* sub, const Defaults& defaults);
  // The values of the per-kind flags by option name (USAGE for a malformed --budget, whatever the
  // kind); the --option values are apart, in named_options().
  std::map<std::string, std::vector<std::string>> flag_values() const;
  std::map<std::string, std::vector<std::string>> named_options() const;
  // The position sample, progress (quiet) and threads of `eo`.
  void fill(EvalOptions& eo, bool quiet) const;
  // --csv and --plot opened before the work, so that a path that cannot be written fails first.
  struct Outputs {
    std::unique_ptr<AtomicOutput> csv, plot;
  };
  // `inputs`: the files the command reads; an output naming one of them (or --csv and --plot naming
  // one file) is USAGE, before anything is written.
  Outputs open_outputs(const std::vector<std::string>& inputs) const;
};

}  // namespace kvtool::cli
