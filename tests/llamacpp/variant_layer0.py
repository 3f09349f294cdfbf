#!/usr/bin/python3
"""Layer 0's K and V computed from a variant model's weights (make_gguf_models.py: gemma2, lfm2,
qwen2vl), checked against a dump kvtool imported from llama.cpp's state of it
(tests/llamacpp/test_state_variants.sh).

Layer 0's K and V depend only on the token embedding and the position, so numpy computes them
exactly as each architecture's graph does (src/models/<arch>.cpp of the bundled llama.cpp):
  gemma2   x = embd * sqrt(dim); h = rmsnorm(x) * attn_norm; K = rope(h Wk), V = h Wv
  lfm2     h = rmsnorm(embd) * attn_norm; K = rope(rmsnorm_per_head(h Wk) * attn_k_norm), V = h Wv
  qwen2vl  h = rmsnorm(embd) * attn_norm; K = rope(h Wk + bk), V = h Wv + bv, the M-RoPE of a text
           token: every section turned by its one position, i.e. NEOX RoPE
RoPE is NEOX (pairs i, i + d/2) with the GGUF's rope.freq_base. The dump's rows are checked at its
/kv/positions with its /kv/tokens (or --tokens when the dump has none), within 1 % of max|x| (the
cache is f16). The dump's layer 0 must be the model's layer 0.

Usage: variant_layer0.py --gguf-py DIR MODEL.gguf DUMP.h5 [--tokens tokens.json] [--offset N]
"""
import argparse
import json
import sys

import h5py
import numpy as np


def rmsnorm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def rope_neox(x, pos, theta):
    d = x.shape[-1]
    freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None, None] * freq[None, None, :]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)], axis=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True)
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--tokens")
    ap.add_argument("--offset", type=int, default=0, help="turn K at position + OFFSET (a check that must fail)")
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    from gguf import GGUFReader  # noqa: E402
    r = GGUFReader(a.model)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    t = {x.name: np.array(x.data, dtype=np.float64) for x in r.tensors}
    num = lambda k: float(r.fields[f"{arch}.{k}"].parts[-1][0])  # noqa: E731
    theta, eps, dim = num("rope.freq_base"), num("attention.layer_norm_rms_epsilon"), int(num("embedding_length"))
    with h5py.File(a.dump, "r") as f:
        k_dump, v_dump = f["kv/k"][0].astype(np.float64), f["kv/v"][0].astype(np.float64)  # [H, T, d]
        pos = f["kv/positions"][:].astype(np.float64)
        toks = f["kv/tokens"][:] if "kv/tokens" in f else None
    if toks is None:
        all_toks = json.load(open(a.tokens))
        toks = np.array([all_toks[int(p)] for p in pos])
    H, T, d = k_dump.shape
    x = t["token_embd.weight"][toks]
    if arch == "gemma2":
        x = x * np.sqrt(dim)
    h = rmsnorm(x, eps) * t["blk.0.attn_norm.weight"]
    k = h @ t["blk.0.attn_k.weight"].T + t.get("blk.0.attn_k.bias", 0)
    v = h @ t["blk.0.attn_v.weight"].T + t.get("blk.0.attn_v.bias", 0)
    k = k.reshape(T, H, d)
    if arch == "lfm2":
        k = rmsnorm(k, eps) * t["blk.0.attn_k_norm.weight"]
    k = rope_neox(k, pos + a.offset, theta).transpose(1, 0, 2)
    v = v.reshape(T, H, d).transpose(1, 0, 2)
    for name, want, got in (("K", k, k_dump), ("V", v, v_dump)):
        err = np.max(np.abs(want - got)) / np.max(np.abs(want))
        print(f"{arch} layer 0 {name}: max error {err:.2e} of max|x| over {T} rows at positions "
              f"{int(pos[0])}..{int(pos[-1])}")
        if not err < 0.01:
            sys.exit(f"{arch}: layer 0 {name} differs from the weights' by {err:.3g} of max|x|")


if __name__ == "__main__":
    main()
