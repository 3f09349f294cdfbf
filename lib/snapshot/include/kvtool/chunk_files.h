// The chunk and page files serving stacks write for their offloaded K/V caches, read natively
// (formats/lmcache.md, formats/sglang-hicache.md): LMCache v1 raw chunks (local disk backend,
// headerless), LMCache FS-connector chunks (a 28-byte header before the bytes), LMCache v0
// safetensors chunks (`kv_chunk`) and SGLang HiCache page files in the three host pool layouts. The
// files, given in token order, are joined: chunk/page i holds rows [i x size, ...). Every size is
// checked against the real file sizes and the options before anything is allocated. The registry
// (kvtool/snapshot.h) reads them as a KvSnapshot, one format name each.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvtool {

struct ChunkOptions {
  // "lmcache-raw" | "lmcache-fs" | "lmcache-v0" | "sglang-page" (open_snapshot sets it from the
  // request's format); empty: not a chunk format.
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
void check_no_chunk_options(const ChunkOptions& o);

}  // namespace kvtool
