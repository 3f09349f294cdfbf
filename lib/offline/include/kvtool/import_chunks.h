// `kvtool import --format ...`: the chunk and page files serving stacks write for their offloaded
// K/V caches, read natively (formats/lmcache.md, formats/sglang-hicache.md): LMCache v1 raw chunks
// (local disk backend, headerless), LMCache FS-connector chunks (a 28-byte header before the
// bytes), LMCache v0 safetensors chunks (`kv_chunk`) and SGLang HiCache page files in the three host
// pool layouts. The files, given in token order, are joined: chunk/page i holds rows [i x size, ...).
// Every size is checked against the real file sizes and the options before anything is allocated.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/identity.h"
#include "kvtool/import.h"
#include "kvtool/json.h"

namespace kvtool {

struct ChunkImportOptions {
  // "lmcache-raw" | "lmcache-fs" | "lmcache-v0" | "sglang-page"; empty: not a chunk import.
  std::string format;
  // lmcache-raw: KV_2LTD | KV_T2D | KV_2TD (required); lmcache-fs: KV_2LTD (optional, checked
  // against each header); lmcache-v0: vllm (default) | huggingface; sglang-page: layer_first |
  // page_first | page_first_direct (required).
  std::string memory_format;
  std::string src_dtype;                           // f16 | bf16 | f32: required by the headerless formats, else checked
  int64_t chunk_tokens = 0;                        // LMCache tokens per chunk; 0: 256, LMCache's default chunk_size
  int64_t page_size = 0;                           // SGLang tokens per page (required by sglang-page)
  int64_t layers = 0, kv_heads = 0, head_dim = 0;  // required by the headerless formats, else checked
};

// The formats --format takes, for messages and --help.
const std::vector<std::string>& chunk_formats();

// USAGE when a chunk-only option (--memory-format, --src-dtype, --chunk-tokens, --page-size) is
// given without --format.
void check_no_chunk_options(const ChunkImportOptions& o);

// Reads `inputs` (in token order) as `o.format` files and writes the dump `out` atomically (nothing
// at `out` on failure). `meta` as for import_dump (model_artifact_sha256 and rope_config required);
// `dtype` the dump dtype (default: the source's). Memory: a few copies of one layer's K and V.
ImportSummary import_chunks(const std::vector<std::string>& inputs, const ChunkImportOptions& o, const json& meta,
                            std::optional<DType> dtype, const std::string& out, bool overwrite);

}  // namespace kvtool
