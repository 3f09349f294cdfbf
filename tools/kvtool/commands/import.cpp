// kvtool import [INPUT...] --layout AXES (--k K --v V | --kv KV) [--q Q] --meta META.json -o OUT.h5
#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "commands.h"
#include "env.h"
#include "kvtool/model_check.h"
#include "kvtool/import.h"
#include "kvtool/snapshot.h"
#include "kvtool/store_check.h"
#include "snapshot_options.h"
#include "store_options.h"

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
  N,S paged blocks and the slot in a block (with --block-table or --slot-mapping, --num-tokens)
  X   flat slots, one per token (with --slot-mapping, --num-tokens)
A reference is NAME (a tensor of the INPUT files; a .npy file's tensor is its file name without
.npy, an .npz member's its name without .npy) or PATH:NAME (PATH: for a .npy file).

Examples:
  kvtool import k.npy v.npy --layout L,H,T,d --meta meta.json -o d.h5
  kvtool import cache.npz --layout L,B,H,T,d --k keys --v values --meta meta.json -o d.h5
  kvtool import --layout T,H,d --k 'kv.safetensors:k.{layer}' --v 'kv.safetensors:v.{layer}' \
      --meta meta.json -o d.h5
  kvtool import --layout 2,T,Hd --kv-heads 8 \
      --kv 'STORE/HASH/model.layers.{layer}.self_attn.attn.safetensors:kv_cache' --meta meta.json -o d.h5
(the last: vLLM's example KV connector, one safetensors file per layer).
A paged cache, gathered in token order (vLLM FlashAttention per layer; SGLang's pool):
  kvtool import cache.safetensors --layout 2,N,S,H,d --kv 'kv.{layer}' --block-table block_table \
      --num-tokens 1000 --meta meta.json -o d.h5
  kvtool import pool.npz --layout X,H,d --k 'k.{layer}' --v 'v.{layer}' --slot-mapping req_to_token \
      --batch-index 3 --num-tokens 1000 --meta meta.json -o d.h5
fp8 caches need --k-scale and --v-scale (value = fp8 x scale); MLA latents are refused.

Offloaded chunk and page files (--format), given in token order: chunk i holds rows
[i x size, (i+1) x size); every chunk but the last is full (LMCache) or every page is (SGLang):
  kvtool import c0.pt c1.pt --format lmcache-raw --memory-format KV_2LTD --layers 32 --kv-heads 8 \
      --head-dim 128 --src-dtype bf16 --meta meta.json -o d.h5      (v1 local disk backend)
  kvtool import c0.data c1.data --format lmcache-fs --kv-heads 8 --meta meta.json -o d.h5
      (v1 FS connector: the 28-byte header gives layers, tokens, hidden and dtype)
  kvtool import c0.pt c1.pt --format lmcache-v0 --meta meta.json -o d.h5   (safetensors kv_chunk)
  kvtool import p0.bin p1.bin --format sglang-page --memory-format page_first --page-size 64 \
      --layers 32 --kv-heads 8 --head-dim 128 --src-dtype f16 --meta meta.json -o d.h5   (HiCacheFile)
KV_T2D / KV_2TD files hold one layer: give chunk 0 layers 0..L-1, then chunk 1, ...
--chunk-tokens is LMCache's chunk_size (default 256). See formats/lmcache.md, formats/sglang-hicache.md.

A llama.cpp state file (llama_state_seq_save_file: ggsq v3; session files: ggsn v10), recognised
by its magic, imports with its model's GGUF (only the GGUF's metadata is read; --meta optional:
model_artifact_sha256 defaults to the GGUF's SHA-256, rope_config to its RoPE keys):
  kvtool import prompt.state --gguf model.gguf -o d.h5
  kvtool import session.bin --gguf model.gguf --seq-id 1 -o d.h5
Rows are sorted into position order (/kv/positions keeps the true positions); f32, f16, bf16 and
q8_0 caches; see formats/llama-state.md. See kvtool-import(1).)";

json read_meta(const std::string& path) {
  if (path.empty()) return json::object();
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open --meta file '" << path << "'");
  // At most one byte past the JSON limit is read: /dev/zero or a huge file is refused, not slurped.
  std::string text(kJsonMaxBytes + 1, '\0');
  f.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  KVT_CHECK(!f.bad(), IO_ERROR, "cannot read --meta file '" << path << "'");
  return parse_json(text, Reason::BAD_ATTRIBUTE, "the --meta file '" + path + "'");
}

// --format reads chunk files: the tensor-file options (--layout, --k, --block-table, ...) and the
// llama.cpp ones do not apply, and a given one is refused rather than silently ignored.
void refuse_tensor_options(const CLI::App* sub, const std::string& format) {
  static const std::set<std::string> chunk_options = {"inputs",      "--format",    "--memory-format", "--chunk-tokens",
                                                      "--page-size", "--src-dtype", "--layers",        "--kv-heads",
                                                      "--head-dim",  "--meta",      "--dtype",         "--output",
                                                      "--force",     "--json",      "--quiet",         "--help"};
  for (const CLI::Option* opt : sub->get_options()) {
    const std::string name = opt->get_lnames().empty() ? opt->get_name() : "--" + opt->get_lnames().front();
    KVT_CHECK(opt->count() == 0 || chunk_options.count(name) > 0, USAGE,
              name << " does not apply to --format " << format << " (chunk files take --memory-format, --layers, "
                   << "--kv-heads, --head-dim, --src-dtype, --chunk-tokens or --page-size)");
  }
}

// A store's raw blocks are imported only when kvtool can tell they hold what they claim
// (formats/cache-stores.md, "A prompt's blocks"): with a GGUF model they are first compared with the
// model's forward pass (a PAYLOAD_MISMATCH refuses the import); with a config.json the page layout
// must be recorded by the store or given, since equal-sized layouts cannot be told apart.
void require_checked_blocks(const std::string& root, const StoreCheckOptions& c, const StoreModel& model,
                            const StorePromptFound& found) {
  if (!model.gguf) {
    KVT_CHECK(!found.layout_assumed, USAGE,
              "the store does not record its page layout and no forward pass can check it ("
                  << c.model << " is a config.json): give --store-layout, or a GGUF --model to compare the blocks "
                  << "with the model first");
    return;
  }
  std::vector<StoreFinding> findings;
  check_store_prompt(root, c, c.model, findings);
  for (const StoreFinding& f : findings)
    KVT_CHECK(f.warning, f.reason,
              "'" << f.path << "': " << f.message << "; nothing imported (`kvtool verify` with the same options "
                  << "reports the comparison)");
}

// A cache store directory: the prompt's blocks, found by the stack's hashes, in position order
// (formats/cache-stores.md, "A prompt's blocks").
template <typename Args>
int import_store(Args& a, const Flags& flags) {
  KVT_CHECK(cli::resolve_store_prompt(a.store), USAGE,
            "a store holds many prompts: give the prompt (--prompt, --prompt-file, --token-ids or --tokens-from) and "
            "--model M.gguf");
  if (!a.dtype.empty()) a.opt.dtype = parse_dtype(a.dtype);
  a.opt.meta = read_meta(a.meta);
  a.opt.overwrite = a.force;
  const StoreCheckOptions& c = a.store.check;
  const StoreModel model = read_store_model(c.model);
  StorePromptFound found;
  std::unique_ptr<KvSnapshot> snap =
      open_store_prompt(a.request.inputs[0], c.store, model, c.prompt, c.prompt_options, found);
  require_checked_blocks(a.request.inputs[0], c, model, found);
  const ImportSummary s = import_snapshot(*snap, a.opt, a.out);
  json j = s.to_json();
  j["schema_version"] = kJsonSchemaVersion, j["ok"] = true, j["output"] = a.out, j["store"] = found.to_json();
  return emit(flags, j, [&] {
    std::cout << "imported " << found.files.size() << " of the prompt's " << found.blocks_wanted << " blocks ("
              << s.geo.tokens << " tokens, " << s.source_dtype << ") from " << found.ns << " into " << a.out << "\n";
  });
}

}  // namespace

cli::Command register_import(CLI::App& app, Flags& flags) {
  struct Args {
    SnapshotRequest request;
    ImportOptions opt;
    std::string out, meta, dtype;
    bool force = false, queries = false;
    cli::LlamaStateArgs llama;
    cli::StoreArgs store;
  };
  auto a = std::make_shared<Args>();
  TensorLayoutOptions& o = a->request.tensors;
  auto* sub = app.add_subcommand("import", "Import K/V tensors from .npy/.npz/safetensors files into a dump");
  sub->footer(kImportHelp);
  sub->add_option("inputs", a->request.inputs, "tensor files whose tensors plain NAME references find");
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
  sub->add_option("--block-table", o.block_table,
                  "paged (N,S) layouts: integer tensor of the request's block ids [n] or [requests, n]");
  sub->add_option("--slot-mapping", o.slot_mapping,
                  "paged (N,S or X) layouts: integer tensor of each token's slot [n] or [requests, n] (req_to_token)");
  sub->add_option("--num-tokens", o.num_tokens, "paged layouts: the request's tokens T")->check(CLI::NonNegativeNumber);
  sub->add_option("--k-scale", o.k_scale, "fp8 K: dequantization scale, a number or a tensor reference");
  sub->add_option("--v-scale", o.v_scale, "fp8 V: dequantization scale, a number or a tensor reference");
  sub->add_option("--fp8", o.fp8, "read uint8 K/V tensors as fp8 codes: e4m3 | e5m2");
  sub->add_option("--dtype", a->dtype, "dump dtype f16 | bf16 | f32 (default: the source's; f64 becomes f32)");
  sub->add_option("-o,--output", a->out, "output dump (.h5)")->required();
  sub->add_flag("--force", a->force, "overwrite an existing output");
  cli::add_llama_state_options(sub, a->llama, false);
  sub->add_flag("--queries", a->queries,
                "llama.cpp state files: recompute the post-RoPE queries of every row with the --gguf model, after "
                "checking that the model recomputes the state's K (else MODEL_MISMATCH, nothing written; "
                "docs/models.md)");
  sub->add_option("--format", a->request.format,
                  "read INPUTs as this format (default: recognised by content; tensor files otherwise): "
                  "lmcache-raw | lmcache-fs | lmcache-v0 | sglang-page (formats/lmcache.md, "
                  "formats/sglang-hicache.md), llama-state, tensors");
  sub->add_option("--memory-format", a->request.chunks.memory_format,
                  "--format's layout: KV_2LTD | KV_T2D | KV_2TD (lmcache-raw, lmcache-fs); vllm | huggingface "
                  "(lmcache-v0); layer_first | page_first | page_first_direct (sglang-page)");
  sub->add_option("--chunk-tokens", a->request.chunks.chunk_tokens, "LMCache chunk size (default 256)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--page-size", a->request.chunks.page_size, "SGLang page size, tokens per page file")
      ->check(CLI::PositiveNumber);
  sub->add_option("--src-dtype", a->request.chunks.src_dtype, "dtype of headerless chunk files: f16 | bf16 | f32");
  cli::add_store_options(sub, a->store, false);
  cli::add_store_prompt_options(sub, a->store);
  sub->add_flag("--json", flags.json, "machine-readable summary");
  sub->add_flag("-q,--quiet", flags.quiet, "print nothing on success");
  return {sub, [a, &flags, sub] {
            if (a->request.inputs.size() == 1 && cli::is_store_path(a->request.inputs[0]))
              return import_store(*a, flags);
            cli::refuse_store_options(a->store, a->request.inputs.empty() ? "" : a->request.inputs[0]);
            KVT_CHECK(!cli::resolve_store_prompt(a->store), USAGE, "--prompt and its kin apply to store directories");
            if (!a->dtype.empty()) a->opt.dtype = parse_dtype(a->dtype);
            a->opt.meta = read_meta(a->meta);
            a->opt.overwrite = a->force;
            SnapshotRequest& r = a->request;
            ChunkOptions& c = r.chunks;
            const auto& chunk_names = chunk_formats();
            const bool chunked = std::find(chunk_names.begin(), chunk_names.end(), r.format) != chunk_names.end();
            if (!chunked) check_no_chunk_options(c);
            if (chunked) refuse_tensor_options(sub, r.format);
            c.layers = r.tensors.layers, c.kv_heads = r.tensors.kv_heads, c.head_dim = r.tensors.head_dim;
            r.gguf = a->llama.gguf;
            r.llama = cli::llama_state_options(a->llama);
            std::optional<ModelCheckReport> check;
            ImportSummary s;
            if (a->queries) {
              KVT_CHECK(!r.gguf.empty(), USAGE, "--queries needs --gguf: the model recomputes the queries");
              std::unique_ptr<KvSnapshot> snap = open_snapshot(r);
              KVT_CHECK(snap->info().format.rfind("llama.cpp", 0) == 0, USAGE,
                        "--queries recomputes a llama.cpp state file's queries; this input is " << snap->info().format);
              check.emplace();
              snap = with_model_queries(std::move(snap), r.gguf,
                                        ModelCheckOptions{std::nullopt, cli::default_threads()}, &*check);
              s = import_snapshot(*snap, a->opt, a->out);
            } else {
              s = import_snapshot(r, a->opt, a->out);
            }
            json j = s.to_json();
            if (check) j["model_check"] = check->to_json();
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
