// Shared CLI helpers for every kvtool binary: error → exit-code mapping, --json error objects,
// identity options, and the human-readable renderers of the library's JSON reports.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/compare.h"
#include "kvtool/eval.h"
#include "kvtool/json.h"
#include "kvtool/loader.h"
#include "kvtool/builder.h"
#include "kvtool/producers.h"
#include "kvtool/report.h"

namespace kvtool::cli {

// Runs `body` (which parses and executes) and maps every failure to an exit code (README.md, "Exit codes"):
// CLI11 parse errors → 2 (help/version → 0), kvtool::Error → its reason's code, anything else → 4.
// With *json_errors set, failures are also printed as {"ok":false,...} on stdout.
int run(const std::string& tool, CLI::App& app, int argc, char** argv, const bool* json_errors,
        const std::function<int()>& body);

// One subcommand: the CLI11 app that declares its options, and what runs when it was chosen.
struct Command {
  CLI::App* sub = nullptr;
  std::function<int()> run;
};
// Runs the command the parsed command line chose (2 when none was).
int run_chosen(const std::vector<Command>& cmds);

void print_json(const json& j);
// printf's formatting into a string, for text that goes through std::cout (which run() keeps
// printable; std::printf would pass it by).
std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));
// Identity attributes for produced dumps (--tenant, --*-generation, --frontier).
void add_identity_options(CLI::App* cmd, IdentityOptions& o);

// The options every builder shares (-o, --prefix, --sink, --local, --layers, --seed, --threads,
// --shard, --shard-count, --sign-key, --zstd-level, --json, --quiet); finish_builder_options() parses the strings
// and sets the thread count the library needs (--threads, or default_threads() from env.h).
struct BuilderCli {
  BuildOptions opt;
  std::string layers, shard;
  int64_t shard_count = 0;  // --shard-count, for --shard auto in a Kubernetes indexed Job
  bool json = false;
};
void add_builder_options(CLI::App* cmd, BuilderCli& b);
void finish_builder_options(BuilderCli& b);

std::string human_bytes(uint64_t b);
void print_build_summary(const BuildSummary& s);
void print_eval(const EvalReport& r);
// kvtool compare's table: one row per (artifact, setting), eval's numbers side by side.
void print_compare(const CompareReport& r);
void print_dump_inspection(const DumpInspection& d);
void print_artifact_inspection(const ArtifactInspection& a);
// The index-bytes line of inspect and eval (kvtool/report.h, IndexBytes): fractions of K+V.
void print_index_bytes(const IndexBytes& b);
void print_verify_result(const ArtifactVerification& v);
void print_verify_result(const DumpVerification& v);
void print_load(const LoadReport& r);  // kvtool load text output

}  // namespace kvtool::cli
