// The options of cache stores that inspect, verify and seal share (formats/cache-stores.md), and
// the printer of a store report.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "kvtool/store_check.h"

namespace kvtool::cli {

struct StoreArgs {
  StoreCheckOptions check;
  std::string shard;        // seal, verify --seal: I/N or auto
  int64_t shard_count = 0;  // --shard-count for --shard auto in a Kubernetes indexed Job
};
// --model, --store-kind, --block-tokens, --store-layout, --store-dtype, --model-name, --sample.
void add_store_options(CLI::App* sub, StoreArgs& a);
// True when `path` names a directory (inspect and verify read it as a store).
bool is_store_path(const std::string& path);
// USAGE when a store option was given for a single file.
void refuse_store_options(const StoreArgs& a, const std::string& path);
void print_store_report(const StoreReport& r, bool verify);

}  // namespace kvtool::cli
