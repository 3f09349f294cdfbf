// The options of cache snapshots that inspect, verify and import share: today those of llama.cpp
// state files (formats/llama-state.md), which need the model's GGUF; and their text printers.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "kvtool/llama_state.h"
#include "kvtool/report.h"

namespace kvtool::cli {

struct LlamaStateArgs {
  std::string gguf, rotation = "auto";
  int64_t seq_id = -1;    // -1: the only sequence
  double tolerance = -1;  // -1: the cache type's default
};
void add_llama_state_options(CLI::App* sub, LlamaStateArgs& a, bool with_tolerance);
LlamaStateOptions llama_state_options(const LlamaStateArgs& a);
std::optional<double> llama_state_tolerance(const LlamaStateArgs& a);

void print_llama_state(const LlamaStateInspection& s);
void print_verify_result(const LlamaStateVerification& v);

}  // namespace kvtool::cli
