// SGLang's HiCache file backend (formats/sglang-hicache.md): one page per file, in the three host
// pool layouts, planned as strided pieces of their files (impl/chunk_plan.h).
#include "impl/chunk_plan.h"

namespace kvtool::chunks {

// SGLang HiCache file backend: one page per file, the bytes of MHATokenToKVPoolHost.get_data_page()
// flattened: [2, L, P, H, d] for layer_first and page_first_direct, [2, P, L, H, d] for page_first.
void plan_sglang_page(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p, Chunks& c) {
  const std::string& lay = o.memory_format;
  KVT_CHECK(lay == "layer_first" || lay == "page_first" || lay == "page_first_direct", USAGE,
            "format sglang-page needs memory_format layer_first, page_first or page_first_direct (the server's "
            "hicache_mem_layout)");
  KVT_CHECK(o.page_size > 0 && o.page_size <= kMaxDumpTokens, USAGE,
            "format sglang-page needs page_size (the server's page_size, tokens per page)");
  const Geometry g = required_geometry(o);
  const int64_t P = o.page_size, hd = g.heads * g.dim;
  const int64_t elems = checked_mul(checked_mul(2 * g.layers, P, "a page"), hd, "a page");
  const int64_t bytes = checked_mul(elems, elem_size(g.elem), "a page");
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto src = std::make_unique<RawSource>(inputs[i], 0, g.elem);
    const uint64_t size = src->size();
    KVT_CHECK(size >= static_cast<uint64_t>(bytes), TRUNCATED,
              "'" << inputs[i] << "' holds " << size << " bytes; a page of 2 x " << g.layers << " layers x " << P
                  << " tokens x " << g.heads << " heads x " << g.dim << " " << elem_name(g.elem) << " is " << bytes);
    KVT_CHECK(size == static_cast<uint64_t>(bytes), BAD_LAYOUT,
              "'" << inputs[i] << "' holds " << size << " bytes, more than one page of " << bytes
                  << " (a page file holds exactly one page)");
    src->set_elements(elems);
    src->release();
    Piece pc;
    pc.source = p.sources.size(), pc.rows = P, pc.first_layer = 0, pc.layers = g.layers, pc.s_h = g.dim;
    if (lay == "page_first")
      pc.s_kv = P * g.layers * hd, pc.s_t = g.layers * hd, pc.s_l = hd;
    else
      pc.s_kv = g.layers * P * hd, pc.s_l = P * hd, pc.s_t = hd;
    p.sources.push_back(std::move(src));
    p.pieces.push_back(pc);
    c.rows.push_back(P);
    c.labels.push_back("'" + inputs[i] + "'");
    c.of_piece.push_back(i);
  }
  p.layers = g.layers, p.kv_heads = g.heads, p.head_dim = g.dim, p.source_dtype = elem_name(g.elem);
}

}  // namespace kvtool::chunks
