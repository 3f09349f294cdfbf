// The options of cache snapshots that inspect, verify and import share (today those of llama.cpp
// state files, formats/llama-state.md) and their printers.
#include "snapshot_options.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>

namespace kvtool::cli {

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

// The caches of an iSWA or hybrid memory (formats/llama-state.md, "Variants").
void print_sections(const LlamaStateInspection& s) {
  if (s.memory == "kv" && !s.cell_ext) return;
  std::cout << "  memory             " << s.memory << (s.cell_ext ? ", M-RoPE cells" : "") << "\n";
  for (const auto& x : s.sections)
    std::cout << "    " << std::left << std::setw(17) << (x.name + " cache") << "layers " << json(x.layers).dump()
              << ": " << x.rows << " rows, positions " << x.pos_min << ".." << x.pos_max << "\n";
  if (s.memory == "hybrid")
    std::cout << "    recurrent state  " << s.recurrent_cells << " cells, " << s.recurrent_entries << " entries, "
              << s.recurrent_bytes << " bytes (not K/V: skipped)\n";
  if (s.cell_ext)
    std::cout << "    image cells      " << s.image_cells << " (x or y is not the position; import refuses them)\n";
}

void print_state(const LlamaStateInspection& s) {
  if (s.magic == "blob")
    std::cout << "llama.cpp sequence blob (llama_state_seq_get_data, taken from sequence " << s.blob_seq_id
              << "; no tokens, no version): " << s.path << "\n";
  else
    std::cout << "llama.cpp " << (s.magic == "ggsq" ? "sequence state" : "session") << " file (" << s.magic << " v"
              << s.version << "): " << s.path << "\n";
  if (!s.arch.empty()) std::cout << "  architecture       " << s.arch << "\n";
  std::cout << "  bytes              " << s.file_bytes << "\n";
  std::cout << "  tokens             " << s.n_tokens << "\n";
  std::cout << "  streams, cells     " << s.streams << ", " << s.cells << "\n";
  std::cout << "  sequence ids       " << json(s.seq_ids).dump() << "\n";
  if (!s.seq_id) {
    std::cout << (s.seq_ids.empty() ? "  (no sequence: the cache is empty)\n"
                                    : "  (several sequences: choose one with --seq-id for rows and health)\n");
    return;
  }
  print_sections(s);
  std::cout << "  sequence read      " << *s.seq_id << ": " << s.rows << " rows, positions " << s.pos_min << ".."
            << s.pos_max << ", " << s.gaps << " gaps, cells " << (s.cells_in_order ? "in" : "out of")
            << " position order"
            << (s.sections.size() > 1 ? " (the positions every cache holds: what import reads)" : "") << "\n";
  if (!s.layers.empty())
    std::cout << "  cache              K " << s.layers.front().k_type << ", V " << s.layers.front().v_type << " ("
              << s.layers.size() << " layers, " << s.layers.front().k_width << " values per row), V "
              << (s.v_trans ? "transposed" : "by row") << (s.rotated ? ", read un-rotated (Hadamard)" : "") << "\n";
  print_health(s);
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

LlamaStateOptions llama_state_options(const LlamaStateArgs& a) {
  LlamaStateOptions o;
  if (a.seq_id >= 0) o.seq_id = static_cast<int32_t>(a.seq_id);
  o.rotation = parse_llama_rotation(a.rotation);
  return o;
}

std::optional<double> llama_state_tolerance(const LlamaStateArgs& a) {
  KVT_CHECK(!std::isnan(a.tolerance), USAGE, "--tolerance is not a number");
  if (a.tolerance >= 0) return a.tolerance;
  return std::nullopt;
}

void print_llama_state(const LlamaStateInspection& s) { print_state(s); }

void print_verify_result(const LlamaStateVerification& v) {
  std::cout << "OK: llama.cpp " << v.state.magic << " state " << v.state.path << ": every size adds up, "
            << v.state.rows << " rows of sequence " << v.state.seq_id.value_or(-1)
            << " at unique positions, all values finite\n";
  if (v.model_check)
    std::cout << "  model " << v.model_check->model
              << " recomputes its K: max |diff| / max|K| = " << v.model_check->max_rel_err << ", tolerance "
              << v.model_check->tolerance << "\n";
  if (v.source.empty()) return;
  std::cout << "  matches " << v.source << ": max |diff| / max|x| = " << v.max_rel_err_k << " (K), " << v.max_rel_err_v
            << " (V), tolerance " << v.tolerance << "\n  per layer:";
  for (double e : v.layer_rel_err) std::cout << " " << e;
  std::cout << "\n";
}

}  // namespace kvtool::cli
