// kvtool import [INPUT...] --layout AXES (--k K --v V | --kv KV) [--q Q] --meta META.json -o OUT.h5
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "kvtool/import.h"

namespace kvtool::cmd {

namespace {

constexpr const char* kImportHelp =
    R"(Import K/V tensors from NumPy .npy/.npz or safetensors files into a kvdump v1 file.

--layout names the axes of the K/V tensors in storage order (comma-separated):
  L   layers; without L, one tensor per layer: put {layer} in the reference
  2   K (index 0) and V (index 1) stacked in one tensor (--kv)
  H   KV heads      T   rows (tokens)      d   head dimension
  Hd  heads x head dim merged (H outer), split with --kv-heads or --head-dim
  B   batch; --batch-index picks the sequence
A reference is NAME (a tensor of the INPUT files; a .npy file's tensor is its file name without
.npy, an .npz member's its name without .npy) or PATH:NAME (PATH: for a .npy file).

Examples:
  kvtool import k.npy v.npy --layout L,H,T,d --meta meta.json -o d.h5
  kvtool import cache.npz --layout L,B,H,T,d --k keys --v values --meta meta.json -o d.h5
  kvtool import --layout T,H,d --k 'kv.safetensors:k.{layer}' --v 'kv.safetensors:v.{layer}' \
      --meta meta.json -o d.h5
  kvtool import --layout 2,T,Hd --kv-heads 8 \
      --kv 'STORE/HASH/model.layers.{layer}.self_attn.attn.safetensors:kv_cache' --meta meta.json -o d.h5
(the last: vLLM's example KV connector, one safetensors file per layer). See kvtool-import(1).)";

json read_meta(const std::string& path) {
  if (path.empty()) return json::object();
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open --meta file '" << path << "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_json(ss.str(), Reason::BAD_ATTRIBUTE, "the --meta file '" + path + "'");
}

}  // namespace

cli::Command register_import(CLI::App& app, Flags& flags) {
  struct Args {
    ImportOptions opt;
    std::string out, meta, dtype;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  ImportOptions& o = a->opt;
  auto* sub = app.add_subcommand("import", "Import K/V tensors from .npy/.npz/safetensors files into a dump");
  sub->footer(kImportHelp);
  sub->add_option("inputs", o.inputs, "tensor files whose tensors plain NAME references find");
  sub->add_option("--layout", o.layout, "axes of the K/V tensors, e.g. L,H,T,d | T,H,d | 2,T,Hd")
      ->capture_default_str();
  sub->add_option("--k", o.k, "K tensor reference (layouts without a 2 axis)")->capture_default_str();
  sub->add_option("--v", o.v, "V tensor reference (layouts without a 2 axis)")->capture_default_str();
  sub->add_option("--kv", o.kv, "K/V tensor reference (layouts with a 2 axis)")->capture_default_str();
  sub->add_option("--q", o.q, "post-RoPE query tensor reference (optional; writes /kv/q)");
  sub->add_option("--q-layout", o.q_layout, "axes of the query tensors (default: --layout without 2)");
  sub->add_option("--q-positions", o.q_positions, "integer tensor: the row of each query (default: the last T_q rows)");
  sub->add_option("--tokens", o.tokens, "integer tensor: the token id of each row (optional)");
  sub->add_option("--positions", o.positions, "integer tensor: the logical position of each row (optional)");
  sub->add_option("--layers", o.layers, "layers (default: the L axis, or per-layer tensors found from layer 0 on)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--kv-heads", o.kv_heads, "KV heads, to split an Hd axis")->check(CLI::NonNegativeNumber);
  sub->add_option("--head-dim", o.head_dim, "head dimension, to split an Hd axis")->check(CLI::NonNegativeNumber);
  sub->add_option("--batch-index", o.batch_index, "sequence on a B axis")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--meta", a->meta,
                  "JSON object of the dump's root attributes (model_artifact_sha256 and rope_config required)");
  sub->add_option("--dtype", a->dtype, "dump dtype f16 | bf16 | f32 (default: the source's; f64 becomes f32)");
  sub->add_option("-o,--output", a->out, "output dump (.h5)")->required();
  sub->add_flag("--force", a->force, "overwrite an existing output");
  sub->add_flag("--json", flags.json, "machine-readable summary");
  sub->add_flag("-q,--quiet", flags.quiet, "print nothing on success");
  return {sub, [a, &flags] {
            if (!a->dtype.empty()) a->opt.dtype = parse_dtype(a->dtype);
            a->opt.meta = read_meta(a->meta);
            a->opt.overwrite = a->force;
            const ImportSummary s = import_dump(a->opt, a->out);
            json j = s.to_json();
            j["schema_version"] = kJsonSchemaVersion;
            j["ok"] = true;
            j["output"] = a->out;
            return emit(flags, j, [&] {
              std::cout << "imported " << s.source_format << " (" << s.source_dtype << ") into " << a->out << ": "
                        << s.geo.layers << " layers x " << s.geo.kv_heads << " kv heads x " << s.geo.tokens
                        << " rows x d=" << s.geo.head_dim << ", " << dtype_name(s.geo.dtype)
                        << (s.has_q ? ", " + std::to_string(s.geo.q_tokens) + " queries" : std::string()) << "\n";
            });
          }};
}

}  // namespace kvtool::cmd
