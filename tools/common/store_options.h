// The options of cache stores that inspect, verify and seal share (formats/cache-stores.md), and
// the printer of a store report.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "kvtool/store_check.h"

namespace kvtool::cli {

struct StoreArgs {
  StoreCheckOptions check;
  // A prompt whose blocks are found in the store (verify, import): one of these, and --hash-seed
  // for vLLM.
  std::string prompt, prompt_file, token_ids, tokens_from, hash_seed, ns;
  CLI::Option* hash_seed_option = nullptr;
  std::string shard;        // seal, verify --seal: I/N or auto
  int64_t shard_count = 0;  // --shard-count for --shard auto in a Kubernetes indexed Job
};
// --model, --store-kind, --block-tokens, --store-layout, --store-dtype; with `checks` also
// --model-name and --sample (inspect, verify).
void add_store_options(CLI::App* sub, StoreArgs& a, bool checks = true);
// --prompt, --prompt-file, --token-ids, --tokens-from, --hash-seed, --namespace (verify, import).
void add_store_prompt_options(CLI::App* sub, StoreArgs& a);
// Fills a.check.prompt and prompt_options from those options (tokenized with the --model GGUF);
// false when none was given.
bool resolve_store_prompt(StoreArgs& a);
// True when `path` names a directory (inspect and verify read it as a store).
bool is_store_path(const std::string& path);
// USAGE when a store option was given for a single file.
void refuse_store_options(const StoreArgs& a, const std::string& path);
void print_store_report(const StoreReport& r, bool verify);

}  // namespace kvtool::cli
