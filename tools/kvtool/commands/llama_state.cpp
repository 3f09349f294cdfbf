// The llama.cpp state-file paths of kvtool inspect, verify and import (formats/llama-state.md):
// their shared options and printing. The commands detect a state file by its magic and call here.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "kvtool/llama_state.h"

namespace kvtool::cmd {

namespace {

constexpr const char* kRotationHelp =
    "quantized caches: read them as stored Hadamard-rotated (on), as stored plainly (off), or as the llama.cpp "
    "version formats/llama-state.md names writes them (auto: rotated when head_dim is a multiple of 64)";

void print_health(const LlamaStateInspection& s) {
  if (s.health.empty()) return;
  std::cout << "  layer head  K max|x|    K NaN/Inf  V max|x|    V NaN/Inf"
            << (s.model.empty() ? "  (per layer: give --gguf for heads)" : "") << "\n";
  for (const auto& h : s.health) {
    char line[160];
    std::snprintf(line, sizeof line, "  %5lld %4lld  %-11.5g %9lld  %-11.5g %9lld\n", static_cast<long long>(h.layer),
                  static_cast<long long>(h.head), h.max_abs_k, static_cast<long long>(h.nonfinite_k), h.max_abs_v,
                  static_cast<long long>(h.nonfinite_v));
    std::cout << line;
  }
}

void print_state(const LlamaStateInspection& s) {
  std::cout << "llama.cpp " << (s.magic == "ggsq" ? "sequence state" : "session") << " file (" << s.magic << " v"
            << s.version << "): " << s.path << "\n";
  if (!s.arch.empty()) std::cout << "  architecture       " << s.arch << "\n";
  std::cout << "  bytes              " << s.file_bytes << "\n";
  std::cout << "  tokens             " << s.n_tokens << "\n";
  std::cout << "  streams, cells     " << s.streams << ", " << s.cells << "\n";
  std::cout << "  sequence ids       " << json(s.seq_ids).dump() << "\n";
  if (!s.seq_id) {
    std::cout << "  (several sequences: choose one with --seq-id for rows and health)\n";
    return;
  }
  std::cout << "  sequence read      " << *s.seq_id << ": " << s.rows << " rows, positions " << s.pos_min << ".."
            << s.pos_max << ", " << s.gaps << " gaps, cells " << (s.cells_in_order ? "in" : "out of")
            << " position order\n";
  if (!s.layers.empty())
    std::cout << "  cache              K " << s.layers.front().k_type << ", V " << s.layers.front().v_type << " ("
              << s.layers.size() << " layers, " << s.layers.front().k_width << " values per row), V "
              << (s.v_trans ? "transposed" : "by row") << (s.rotated ? ", read un-rotated (Hadamard)" : "") << "\n";
  print_health(s);
}

std::optional<GgufModel> model_of(const LlamaStateArgs& a) {
  if (a.gguf.empty()) return std::nullopt;
  return read_gguf_model(a.gguf);
}

LlamaStateOptions options_of(const LlamaStateArgs& a) {
  LlamaStateOptions o;
  if (a.seq_id >= 0) o.seq_id = static_cast<int32_t>(a.seq_id);
  o.rotation = parse_llama_rotation(a.rotation);
  return o;
}

}  // namespace

void add_llama_state_options(CLI::App* sub, LlamaStateArgs& a, bool with_tolerance) {
  sub->add_option("--gguf", a.gguf,
                  "llama.cpp state files: the model's GGUF file (only its metadata is read): layers, heads, head_dim, "
                  "RoPE");
  sub->add_option("--seq-id", a.seq_id, "llama.cpp state files: the sequence to read (default: the only one)")
      ->check(CLI::Range(0, 2147483647));
  sub->add_option("--llama-rotation", a.rotation, kRotationHelp)
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  if (with_tolerance)
    sub->add_option("--tolerance", a.tolerance,
                    "llama.cpp state files with --source: largest |difference| allowed, relative to max|x| of each "
                    "(layer, head) (default by cache type: f32 and f16 1e-2, bf16 and q8_0 1e-1)")
        ->check(CLI::Range(0.0, 1.0));
}

int run_llama_inspect(const std::string& path, const std::string& shown, const LlamaStateArgs& a, const Flags& flags) {
  const auto m = model_of(a);
  LlamaStateInspection s = inspect_llama_state(path, m ? &*m : nullptr, options_of(a));
  s.path = shown;
  return emit(flags, s.to_json(), [&] { print_state(s); });
}

int run_llama_verify(const std::string& path, const std::string& shown, const std::string& source,
                     const LlamaStateArgs& a, const Flags& flags) {
  const auto m = model_of(a);
  std::optional<double> tol;
  KVT_CHECK(!std::isnan(a.tolerance), USAGE, "--tolerance is not a number");
  if (a.tolerance >= 0) tol = a.tolerance;
  LlamaStateVerification v = verify_llama_state(path, m ? &*m : nullptr, options_of(a), source, tol);
  v.state.path = shown;
  return emit(flags, v.to_json(), [&] {
    std::cout << "OK: llama.cpp " << v.state.magic << " state " << shown << ": every size adds up, " << v.state.rows
              << " rows of sequence " << v.state.seq_id.value_or(-1) << " at unique positions, all values finite\n";
    if (v.source.empty()) return;
    std::cout << "  matches " << v.source << ": max |diff| / max|x| = " << v.max_rel_err_k << " (K), "
              << v.max_rel_err_v << " (V), tolerance " << v.tolerance << "\n  per layer:";
    for (double e : v.layer_rel_err) std::cout << " " << e;
    std::cout << "\n";
  });
}

ImportSummary run_llama_import(const std::string& path, const LlamaStateArgs& a, const ImportOptions& io,
                               const std::string& out) {
  KVT_CHECK(!a.gguf.empty(), USAGE,
            "'" << path << "' is a llama.cpp state file: give the model's GGUF with --gguf (layers, heads, head_dim "
                << "and RoPE are not in the state file)");
  const GgufModel m = read_gguf_model(a.gguf);
  const ImportOptions plain;
  KVT_CHECK(io.block_table.empty() && io.slot_mapping.empty() && io.tokens.empty() && io.positions.empty() &&
                io.k_scale.empty() && io.v_scale.empty() && io.q_layout.empty() && io.fp8.empty() &&
                io.layout == plain.layout && io.k == plain.k && io.v == plain.v && io.kv == plain.kv &&
                io.layers == 0 && io.kv_heads == 0 && io.head_dim == 0 && io.batch_index == 0 && io.num_tokens == 0,
            USAGE,
            "'" << path << "' is a llama.cpp state file: tensor-file options (--layout, --tokens, --positions, "
                << "--block-table, scales, --q-layout) do not apply; see formats/llama-state.md");
  LlamaStateOptions o = options_of(a);
  o.q_path = io.q;
  o.q_positions_path = io.q_positions;
  return import_llama_state(path, m, o, io.meta, io.dtype, out, io.overwrite);
}

}  // namespace kvtool::cmd
