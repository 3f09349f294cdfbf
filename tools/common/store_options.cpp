#include "store_options.h"

#include <sys/stat.h>

#include <iostream>

#include "env.h"

namespace kvtool::cli {

void add_store_options(CLI::App* sub, StoreArgs& a) {
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
  sub->add_option("--model-name", c.store.model_name,
                  "stores: every namespace must be of this model (as the stack names it)");
  sub->add_option("--sample", c.sample, "stores: read the values of N block files spread over the store (default: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
}

bool is_store_path(const std::string& path) {
  struct stat st {};
  return path != "-" && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void refuse_store_options(const StoreArgs& a, const std::string& path) {
  const StoreCheckOptions& c = a.check;
  KVT_CHECK(c.model.empty() && c.store.kind.empty() && !c.store.block_tokens && c.store.memory_format.empty() &&
                c.store.dtype.empty() && c.store.model_name.empty() && !c.sample,
            USAGE,
            "--model, --store-kind, --block-tokens, --store-layout, --store-dtype, --model-name and --sample apply to "
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
  for (const StoreFinding& f : r.findings)
    std::cout << (f.warning ? "  warning " : "  ") << reason_name(f.reason) << " " << (f.path.empty() ? "-" : f.path)
              << ": " << f.message << "\n";
  if (verify) std::cout << (r.ok() ? "OK" : "FAILED") << " (" << r.findings.size() << " findings)\n";
}

}  // namespace kvtool::cli
