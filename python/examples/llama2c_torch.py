#!/usr/bin/env python3
"""A small PyTorch forward pass of the llama2.c architecture that dumps its K/V cache with kvtool.

This is the worked example of docs/python.md: a real PyTorch model that

* returns an HF-style cache (``Cache``: ``key_cache`` / ``value_cache`` lists of
  ``[batch, kv_heads, T, head_dim]`` tensors, post-RoPE keys as llama2.c caches them),
* exposes its post-RoPE queries through a module (``Attention.q_rope``) so that a forward hook can
  record them, the way one records queries from any PyTorch model, and
* writes the cache with ``kvtool.from_cache`` carrying the identity ``kvtool dump --llama2c``
  records, so that the two dumps are interchangeable (tests/python/test_torch_producer.py checks that
  K, V and Q agree within 1e-5 relative and that ``kvtool eval`` gives the same metrics).

The checkpoint is read exactly as lib/offline/src/llama2c.cpp reads it: seven int32 (dim,
hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means an
unshared classifier), then float32 weights, matrices row-major [out, in]. The token sequence is the
one ``kvtool dump --llama2c`` uses: BOS (1), the prompt, then greedy decoding.

Usage::

    PYTHONPATH=build/python python3 python/examples/llama2c_torch.py \\
        --llama2c ../shared/models/stories260K.bin --tokenizer ../shared/models/tok512.bin \\
        --prompt "Once upon a time" --tokens 64 -o torch.h5
"""
import argparse
import hashlib
import json
import math
import struct
import sys

import numpy as np
import torch
from torch import nn


class Config:
    """The llama2.c checkpoint header."""

    def __init__(self, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len):
        self.dim, self.hidden_dim, self.n_layers = dim, hidden_dim, n_layers
        self.n_heads, self.n_kv_heads, self.seq_len = n_heads, n_kv_heads, seq_len
        self.shared_classifier = vocab_size > 0  # a negative vocab_size means an unshared classifier
        self.vocab_size = abs(vocab_size)
        self.head_dim = dim // n_heads
        self.kv_dim = n_kv_heads * self.head_dim


def load_checkpoint(path):
    """Read a llama2.c legacy checkpoint; returns (Config, dict of float32 tensors, sha256 hex)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28:
        raise ValueError(f"{path!r} is too short for a llama2.c header")
    c = Config(*struct.unpack("<7i", data[:28]))
    if not (c.dim > 0 and c.n_heads > 0 and c.n_kv_heads > 0 and c.dim % c.n_heads == 0
            and c.n_heads % c.n_kv_heads == 0 and c.head_dim % 2 == 0):
        raise ValueError(f"{path!r} has an invalid head layout")
    D, Hd, L, KV, V = c.dim, c.hidden_dim, c.n_layers, c.kv_dim, c.vocab_size
    # Order and shapes as in Llama2cModel's constructor; the two RoPE tables ([seq_len, head_dim/2]
    # each) are skipped because RoPE is recomputed.
    layout = [("emb", (V, D)), ("rms_att", (L, D)), ("wq", (L, D, D)), ("wk", (L, KV, D)),
              ("wv", (L, KV, D)), ("wo", (L, D, D)), ("rms_ffn", (L, D)), ("w1", (L, Hd, D)),
              ("w2", (L, D, Hd)), ("w3", (L, Hd, D)), ("rms_final", (D,)),
              ("rope_tables", (c.seq_len, c.head_dim))]
    if not c.shared_classifier:
        layout.append(("wcls", (V, D)))
    total = sum(math.prod(s) for _, s in layout)
    if len(data) != 28 + 4 * total:
        raise ValueError(f"{path!r} has {len(data)} bytes but its header implies {28 + 4 * total}")
    flat = np.frombuffer(data, dtype="<f4", offset=28)
    if not np.isfinite(flat).all():
        raise ValueError(f"{path!r} contains NaN/Inf weights")
    w, off = {}, 0
    for name, shape in layout:
        n = math.prod(shape)
        w[name] = torch.from_numpy(flat[off:off + n].reshape(shape).copy())
        off += n
    if c.shared_classifier:
        w["wcls"] = w["emb"]
    return c, w, hashlib.sha256(data).hexdigest()


class Cache:
    """An HF-style cache: ``key_cache[l]`` / ``value_cache[l]`` are [batch, kv_heads, T, head_dim]."""

    def __init__(self):
        self.key_cache, self.value_cache = [], []

    def update(self, k, v, layer):
        """Append this step's k, v ([batch, kv_heads, t, d]) to layer ``layer``; returns the full K, V."""
        if len(self.key_cache) <= layer:
            self.key_cache.append(k)
            self.value_cache.append(v)
        else:
            self.key_cache[layer] = torch.cat([self.key_cache[layer], k], dim=2)
            self.value_cache[layer] = torch.cat([self.value_cache[layer], v], dim=2)
        return self.key_cache[layer], self.value_cache[layer]

    def get_seq_length(self):
        return self.key_cache[0].shape[2] if self.key_cache else 0


class RMSNorm(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)

    def forward(self, x):
        # As llama2.c's rmsnorm: the sum of squares in double, the rest in float32.
        ms = (x.double() ** 2).mean(-1, keepdim=True).float()
        return self.weight * (x * (1.0 / torch.sqrt(ms + 1e-5)))


class InterleavedRope(nn.Module):
    """Rotary embedding over adjacent pairs (2i, 2i+1), theta 10000 — ``llama_rope_config``'s
    ``"pairing": "interleaved"``. Its output is the post-RoPE q (or k): hook it to record queries."""

    def __init__(self, head_dim, theta=10000.0):
        super().__init__()
        # llama2.c computes the frequency and the angle in float32; doing the same keeps the angles
        # equal (with float64 angles, cheaders' 512-token Q moves from 7.4e-6 to 9.9e-6 relative
        # difference to `kvtool dump`, next to the 1e-5 the test allows).
        # numpy's float32 power is libm's powf, the function llama2.c's std::pow(float, float) calls.
        i = np.arange(0, head_dim, 2, dtype=np.float32)
        freq = np.float32(1.0) / np.power(np.float32(theta), i / np.float32(head_dim))
        self.register_buffer("freq", torch.from_numpy(freq.astype(np.float32)))

    def forward(self, x, positions):
        """x [batch, heads, t, head_dim]; positions [t] int64 absolute positions."""
        angle = positions.to(torch.float32)[:, None] * self.freq[None, :]  # [t, d/2], float32
        c, s = torch.cos(angle.double()).float(), torch.sin(angle.double()).float()
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg, w, layer):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        lin = lambda m: nn.Parameter(m[layer], requires_grad=False)  # noqa: E731
        self.wq, self.wk, self.wv, self.wo = lin(w["wq"]), lin(w["wk"]), lin(w["wv"]), lin(w["wo"])
        self.q_rope = InterleavedRope(cfg.head_dim)
        self.k_rope = InterleavedRope(cfg.head_dim)

    def forward(self, x, positions, cache):
        B, t, _ = x.shape
        c, d = self.cfg, self.cfg.head_dim
        heads = lambda y, n: y.view(B, t, n, d).transpose(1, 2)  # noqa: E731  -> [B, n, t, d]
        q = self.q_rope(heads(x @ self.wq.T, c.n_heads), positions)
        k = self.k_rope(heads(x @ self.wk.T, c.n_kv_heads), positions)
        K, V = cache.update(k, heads(x @ self.wv.T, c.n_kv_heads), self.layer)
        group = c.n_heads // c.n_kv_heads  # query head h reads kv head h // group
        K, V = K.repeat_interleave(group, dim=1), V.repeat_interleave(group, dim=1)
        att = (q @ K.transpose(-1, -2)) / math.sqrt(d)  # [B, Hq, t, T]
        T = K.shape[2]
        causal = positions[:, None] >= torch.arange(T)[None, :]
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        return (att @ V).transpose(1, 2).reshape(B, t, c.dim) @ self.wo.T


class Block(nn.Module):
    def __init__(self, cfg, w, layer):
        super().__init__()
        self.attn_norm = RMSNorm(w["rms_att"][layer])
        self.attn = Attention(cfg, w, layer)
        self.ffn_norm = RMSNorm(w["rms_ffn"][layer])
        self.w1, self.w2, self.w3 = (nn.Parameter(w[n][layer], requires_grad=False) for n in ("w1", "w2", "w3"))

    def forward(self, x, positions, cache):
        x = x + self.attn(self.attn_norm(x), positions, cache)
        h = self.ffn_norm(x)
        return x + (nn.functional.silu(h @ self.w1.T) * (h @ self.w3.T)) @ self.w2.T  # SwiGLU


class Llama2c(nn.Module):
    """The llama2.c transformer. ``forward(input_ids, past_key_values=None)`` returns
    ``(logits [batch, t, vocab], cache)`` as an HF causal LM does with ``use_cache=True``."""

    def __init__(self, path):
        super().__init__()
        self.config, w, self.sha256 = load_checkpoint(path)
        self.emb = nn.Parameter(w["emb"], requires_grad=False)
        self.layers = nn.ModuleList(Block(self.config, w, l) for l in range(self.config.n_layers))
        self.norm = RMSNorm(w["rms_final"])
        self.wcls = nn.Parameter(w["wcls"], requires_grad=False)

    @torch.no_grad()
    def forward(self, input_ids, past_key_values=None):
        cache = past_key_values if past_key_values is not None else Cache()
        start = cache.get_seq_length()
        positions = torch.arange(start, start + input_ids.shape[1])
        if positions[-1] >= self.config.seq_len:
            raise ValueError(f"position {int(positions[-1])} beyond the model context {self.config.seq_len}")
        x = self.emb[torch.as_tensor(input_ids, dtype=torch.long)]
        for block in self.layers:
            x = block(x, positions, cache)
        return self.norm(x) @ self.wcls.T, cache

    def identity(self):
        """The identity attributes ``kvtool dump --llama2c`` records (lib/offline/src/producers.cpp)."""
        d = self.config.head_dim
        rope = {"head_dim": d, "pairing": "interleaved", "scaling": "none", "theta": 10000.0}
        return {"model_artifact_sha256": self.sha256,
                # canonical JSON as llama_rope_config writes it: sorted keys, no spaces
                "rope_config": json.dumps(rope, sort_keys=True, separators=(",", ":")),
                "position_contract": "post-rope-absolute-v1",
                "generator": "python/examples/llama2c_torch.py (PyTorch forward pass, greedy)"}


def encode(tokenizer_path, vocab_size, text):
    """The llama2.c tokenizer as Llama2cTokenizer::encode: BOS, a leading space, bytes, BPE merges."""
    vocab, scores = [], []
    with open(tokenizer_path, "rb") as f:
        f.read(4)  # max_token_length
        for _ in range(vocab_size):
            score, n = struct.unpack("<fi", f.read(8))
            vocab.append(f.read(n))
            scores.append(score)
    ids = {s: i for i, s in reversed(list(enumerate(vocab)))}  # the first id of a duplicate piece
    t = [1] + ([ids[b" "]] if text and b" " in ids else [])
    for ch in text:
        cp = ch.encode("utf-8")
        t.extend([ids[cp]] if cp in ids else [b + 3 for b in cp])
    while True:
        best = max(((scores[ids[vocab[a] + vocab[b]]], i) for i, (a, b) in enumerate(zip(t[1:], t[2:]), 1)
                    if vocab[a] + vocab[b] in ids), key=lambda s: (s[0], -s[1]), default=None)
        if best is None:
            return t
        i = best[1]
        t[i:i + 2] = [ids[vocab[t[i]] + vocab[t[i + 1]]]]


def run(model, forced, tokens):
    """Teacher-force ``forced`` (BOS first), then decode greedily up to ``tokens`` positions.

    Returns (ids, cache, queries): ``queries[l]`` is [1, n_heads, tokens, head_dim], recorded by a
    forward hook on every layer's ``attn.q_rope`` — the recipe for any PyTorch model."""
    recorded = [[] for _ in model.layers]
    hooks = [blk.attn.q_rope.register_forward_hook(lambda mod, args, out, l=l: recorded[l].append(out))
             for l, blk in enumerate(model.layers)]
    try:
        ids = [int(i) for i in forced[:tokens]]
        # The last forced token is fed with the decoding steps: its logits pick the first new token.
        logits, cache = model(torch.tensor([ids[:-1]])) if len(ids) > 1 else (None, None)
        step = ids[-1]
        while True:
            logits, cache = model(torch.tensor([[step]]), past_key_values=cache)
            if len(ids) == tokens:
                break
            step = int(torch.argmax(logits[0, -1]))
            ids.append(step)
    finally:
        for h in hooks:
            h.remove()
    return ids, cache, [torch.cat(r, dim=2) for r in recorded]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama2c", required=True, help="llama2.c legacy checkpoint")
    ap.add_argument("--tokenizer", help="llama2.c tokenizer (needed for --prompt)")
    ap.add_argument("--prompt", default="", help="prompt text, teacher-forced after BOS")
    ap.add_argument("--token-ids", help="comma-separated token ids to teacher-force instead (BOS included)")
    ap.add_argument("--tokens", type=int, required=True, help="positions in total")
    ap.add_argument("--dtype", default="f32", choices=("f32", "f16", "bf16"))
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    import kvtool

    model = Llama2c(a.llama2c)
    if not 1 <= a.tokens <= model.config.seq_len:
        ap.error(f"--tokens must be in [1, {model.config.seq_len}]")
    if a.token_ids:
        forced = [int(x) for x in a.token_ids.split(",")]
    elif a.prompt:
        if not a.tokenizer:
            ap.error("--prompt needs --tokenizer")
        forced = encode(a.tokenizer, model.config.vocab_size, a.prompt)
    else:
        forced = [1]
    ids, cache, queries = run(model, forced, a.tokens)
    out = kvtool.from_cache(cache, a.output, queries=queries, q_positions=list(range(a.tokens)), tokens=ids,
                            dtype=a.dtype, identity=model.identity(), overwrite=a.overwrite)
    print(f"wrote {out} ({len(ids)} tokens, {a.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
