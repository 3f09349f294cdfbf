#include "store_options.h"

#include <sys/stat.h>

#include <iostream>

#include "env.h"
#include "kvtool/gguf_tokenizer.h"
#include "kvtool/producers.h"
#include "kvtool/random_access_file.h"
#include "kvtool/gguf_tokenizer.h"
#include "kvtool/producers.h"
#include "kvtool/random_access_file.h"

namespace kvtool::cli {

void add_store_options(CLI::App* sub, StoreArgs& a, bool checks) {
  StoreCheckOptions& c = a.check;
  sub->add_option("--model", c.model,
                  "stores: the model's GGUF or Hugging Face config.json; gives the geometry every block's size and "
                  "values are checked against");
  sub->add_option("--store-kind", c.store.kind, "stores: vllm | lmcache | sglang (default: recognised from the names)")
      ->check(CLI::IsMember(store_kinds()));
  sub->add_option("--block-tokens", c.store.block_tokens,
                  "stores: tokens per SGLang page (required to map SGLang pages) or per LMCache chunk (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  sub->add_option(
      "--store-layout", c.store.memory_format,
      "stores: vLLM page layout nhd (default) | hnd | split; LMCache layerwise KV_T2D | KV_2TD; SGLang host "
      "layout layer_first (default) | page_first | page_first_direct | page_head");
  sub->add_option("--store-dtype", c.store.dtype,
                  "stores: the K/V dtype every namespace must hold (f16 | bf16 | f32); SGLang pages record none")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
  if (!checks) return;
  sub->add_option("--model-name", c.store.model_name,
                  "stores: every namespace must be of this model (as the stack names it)");
  sub->add_option("--sample", c.sample, "stores: read the values of N block files spread over the store (default: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
}

void add_store_prompt_options(CLI::App* sub, StoreArgs& a) {
  sub->add_option("--prompt", a.prompt, "stores: the prompt whose blocks to find, tokenized by the --model GGUF");
  sub->add_option("--prompt-file", a.prompt_file, "stores: the same, read from a file (UTF-8)");
  sub->add_option("--token-ids", a.token_ids, "stores: the prompt as token ids (a JSON array file)");
  sub->add_option("--tokens-from", a.tokens_from,
                  "stores: the prompt's tokens recorded in a dump or llama.cpp state file");
  a.hash_seed_option = sub->add_option("--hash-seed", a.hash_seed,
                                       "stores: the PYTHONHASHSEED the vLLM server ran with (vLLM's block hashes "
                                       "start from it)");
  sub->add_option("--namespace", a.ns, "stores: the namespace to read the prompt from (default: the one holding most)");
}

bool resolve_store_prompt(StoreArgs& a) {
  const int sources = !a.prompt.empty() + !a.prompt_file.empty() + !a.token_ids.empty() + !a.tokens_from.empty();
  if (sources == 0) {
    KVT_CHECK(!a.hash_seed_option || !a.hash_seed_option->count(), USAGE,
              "--hash-seed names a prompt's vLLM blocks: give the prompt");
    return false;
  }
  KVT_CHECK(sources == 1, USAGE, "give the prompt once: --prompt, --prompt-file, --token-ids or --tokens-from");
  KVT_CHECK(!a.check.model.empty(), USAGE,
            "a prompt's blocks are found and compared with a GGUF model: give --model M.gguf");
  if (!a.token_ids.empty()) {
    a.check.prompt = read_token_ids(a.token_ids);
  } else if (!a.tokens_from.empty()) {
    a.check.prompt = tokens_from(a.tokens_from, a.check.model);
  } else {
    std::string text = a.prompt;
    if (!a.prompt_file.empty()) {
      const RandomAccessFile f(a.prompt_file);
      KVT_CHECK(f.size() <= (uint64_t{1} << 30), USAGE, "prompt file '" << a.prompt_file << "' is larger than 1 GiB");
      text.resize(static_cast<size_t>(f.size()));
      f.pread_exact(0, text.size(), text.data());
    }
    a.check.prompt = GgufTokenizer(a.check.model).encode(text, true);
  }
  if (a.hash_seed_option && a.hash_seed_option->count()) a.check.prompt_options.hash_seed = a.hash_seed;
  a.check.prompt_options.namespace_name = a.ns;
  return true;
}

bool is_store_path(const std::string& path) {
  struct stat st {};
  return path != "-" && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void refuse_store_options(const StoreArgs& a, const std::string& path) {
  const StoreCheckOptions& c = a.check;
  KVT_CHECK(c.model.empty() && c.store.kind.empty() && !c.store.block_tokens && c.store.memory_format.empty() &&
                c.store.dtype.empty() && c.store.model_name.empty() && !c.sample && a.shard.empty(),
            USAGE,
            "--model, --store-kind, --block-tokens, --store-layout, --store-dtype, --model-name, --sample and --shard "
            "apply to "
            "store directories, not to '"
                << path << "'");
}

namespace {

void print_health(const StoreReport& r) {
  if (r.health.empty()) return;
  std::cout << "  values (layer, head: max|x|, non-finite), " << r.blocks_read << " blocks read:\n";
  std::string ns;
  for (const HeadHealth& h : r.health) {
    if (h.ns != ns) std::cout << "    " << (ns = h.ns) << "\n";
    std::cout << "      L" << h.layer << " H" << h.head << ": " << h.max_abs << (h.nonfinite ? ", " : "")
              << (h.nonfinite ? std::to_string(h.nonfinite) + " non-finite" : std::string()) << "\n";
  }
}

}  // namespace

void print_store_report(const StoreReport& r, bool verify) {
  std::cout << r.root << ": " << r.kind << " store, " << r.blocks << " blocks (" << r.block_bytes << " bytes), "
            << r.configs << " config files, " << r.temporaries << " temporaries, " << r.foreign << " foreign entries\n";
  for (const StoreNamespace& n : r.namespaces)
    std::cout << "  namespace " << n.name << ": model " << (n.model.empty() ? "?" : n.model) << ", dtype "
              << (n.dtype.empty() ? "?" : n.dtype) << ", " << n.world_size << " rank(s), " << n.blocks << " blocks, "
              << n.bytes << " bytes\n";
  for (const auto& [why, n] : r.not_read) std::cout << "  values not read for " << n << " blocks: " << why << "\n";
  print_health(r);
  if (r.sealed_files) std::cout << "  seal: " << r.sealed_files << " files compared\n";
  if (r.content)
    std::cout << "  prompt: " << r.content->found.files.size() << " of its " << r.content->found.blocks_wanted
              << " blocks found in " << r.content->found.ns << " (" << r.content->tokens
              << " tokens); largest difference from the model: K " << r.content->max_rel_err_k << ", V "
              << r.content->max_rel_err_v << " of max|x| (tolerance " << r.content->tolerance << ")\n";
  for (const StoreFinding& f : r.findings)
    std::cout << (f.warning ? "  warning " : "  ") << reason_name(f.reason) << " " << (f.path.empty() ? "-" : f.path)
              << ": " << f.message << "\n";
  if (verify) std::cout << (r.ok() ? "OK" : "FAILED") << " (" << r.findings.size() << " findings)\n";
}

}  // namespace kvtool::cli
