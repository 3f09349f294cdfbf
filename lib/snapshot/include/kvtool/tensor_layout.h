// Tensors named by references and a --layout (man/kvtool-import.1, formats/paged-caches.md): the
// options of the "tensors" reader of kvtool/snapshot.h, which reads K/V (and queries) from the .npy,
// .npz and safetensors files people already have, paged caches gathered in token order through a
// block table or slot mapping, fp8 codes dequantized with their scales.
#pragma once
#include <cstdint>
#include <string>

namespace kvtool {

// Tensor references are `NAME` (looked up in the request's inputs; a name in two inputs is
// ambiguous) or `PATH:NAME` (the tensor NAME of file PATH; a .npy file's one tensor is `PATH:` or
// just `PATH`). `{layer}` in a reference is replaced by the layer number for layouts without an L
// axis (one tensor per layer).
struct TensorLayoutOptions {
  std::string layout = "L,H,T,d";                 // axes of the K/V tensors: L 2 H T d Hd B N S X (tensor_layout.cpp)
  std::string q_layout;                           // axes of the query tensors; default: `layout` without its 2 axis
  std::string k = "k", v = "v";                   // separate K and V tensors (layouts without a 2 axis)
  std::string kv = "kv_cache";                    // one tensor with K (index 0) and V (index 1) on its 2 axis
  std::string q, q_positions, tokens, positions;  // optional references
  int64_t layers = 0;       // 0: the L axis's size, or the per-layer tensors found from layer 0 on
  int64_t kv_heads = 0;     // splits an Hd axis (heads × head dim merged, as vLLM saves it)
  int64_t head_dim = 0;     // the same, by the head dim
  int64_t batch_index = 0;  // index on a B axis (and the row of a 2-D block table / slot mapping)
  // Paged caches (layouts with N,S or X): the request's block ids or its slot per token, and T.
  std::string block_table, slot_mapping;
  int64_t num_tokens = 0;
  // fp8 caches: value = fp8 x scale; a float ("0.02") or a tensor reference ([L], [1] or [] with
  // {layer}). `fp8` ("e4m3" | "e5m2") reads uint8 tensors as fp8 codes.
  std::string k_scale, v_scale, fp8;
  bool operator==(const TensorLayoutOptions&) const = default;
};

}  // namespace kvtool
