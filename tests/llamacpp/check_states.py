#!/usr/bin/python3
"""Checks for tests/llamacpp/test_llamacpp_state.sh (Debian's python3: numpy, h5py).

  tokens DUMP.h5 OUT.json         the dump's /kv/tokens as a JSON list (llama.cpp's input)
  prompt-len TOKENIZER.bin TEXT   tokens kvtool dump teacher-forces for --prompt TEXT (BOS included)
  compare ...                     an imported llama.cpp state against the llama2.c dump
  greedy DUMP.h5 P LLAMA.json     llama.cpp's greedy tokens after P tokens equal the dump's

compare exits 0 when every layer is within tolerance, 3 when some K/V value is not (the caller
can require that, e.g. for a wrong rotation setting), 2 when positions or tokens are wrong.
"""
import argparse
import json
import struct
import sys

import h5py
import numpy as np


def cmd_tokens(a):
    with h5py.File(a.dump, "r") as f:
        toks = [int(t) for t in f["kv/tokens"][:]]
    with open(a.out, "w") as f:
        json.dump(toks, f)


def read_vocab(path):
    with open(path, "rb") as f:
        data = f.read()
    off, vocab, scores = 4, [], []
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        vocab.append(data[off + 8:off + 8 + n])
        scores.append(score)
        off += 8 + n
    return vocab, scores


def cmd_prompt_len(a):
    """The llama2.c encoder as kvtool dump runs it (lib/offline/src/llama2c.cpp): BOS, a dummy
    space when the text is not empty, one token per UTF-8 character (bytes + 3 when unknown), then
    merges of the best-scoring adjacent pair until none applies."""
    vocab, scores = read_vocab(a.tokenizer)
    index = {}
    for i, v in enumerate(vocab):
        index.setdefault(v, i)
    text = a.text.encode()
    toks = [1]
    if text and b" " in index:
        toks.append(index[b" "])
    for ch in a.text:
        cp = ch.encode()
        toks += [index[cp]] if cp in index else [b + 3 for b in cp]
    while True:
        best = None
        for i in range(1, len(toks) - 1):
            j = index.get(vocab[toks[i]] + vocab[toks[i + 1]])
            if j is not None and (best is None or scores[j] > best[0]):
                best = (scores[j], i, j)
        if best is None:
            break
        toks[best[1]:best[1] + 2] = [best[2]]
    print(len(toks))


def read_f64(ds):
    """A dump's K/V dataset as float64; bf16 is stored as uint16 bits with attribute dtype =
    "bfloat16" (formats/kvdump-v1.md)."""
    x = ds[:]
    if ds.attrs.get("dtype") == "bfloat16":
        x = (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float64)


def rope_shift(k, delta, theta):
    """Rotate post-RoPE keys [L, H, T, d] by delta[T] positions (adjacent pairs, as llama2.c and
    llama.cpp's "norm" RoPE): what llama.cpp's K-shift does to a key whose position moves."""
    d = k.shape[-1]
    ang = delta[None, None, :, None] * (theta ** (-np.arange(0, d, 2) / d))[None, None, None, :]
    c, s = np.cos(ang), np.sin(ang)
    out = np.empty_like(k)
    out[..., 0::2] = k[..., 0::2] * c - k[..., 1::2] * s
    out[..., 1::2] = k[..., 0::2] * s + k[..., 1::2] * c
    return out


def expected_cells(desc, seq):
    if seq is not None and "sequences" in desc:
        s = desc["sequences"][seq]
        return np.array(s["positions"]), np.array(s["source_index"]), np.ones(len(s["positions"]), bool)
    return np.array(desc["positions"]), np.array(desc["source_index"]), np.array(desc["exact"], bool)


def cmd_compare(a):
    with open(a.desc) as f:
        desc = json.load(f)
    pos_want, src, exact = expected_cells(desc, a.seq)
    with h5py.File(a.dump, "r") as f:
        dk, dv = read_f64(f["kv/k"]), read_f64(f["kv/v"])
        dtok = f["kv/tokens"][:]
        theta = json.loads(f.attrs["rope_config"])["theta"]
    with h5py.File(a.imported, "r") as f:
        k, v = read_f64(f["kv/k"]), read_f64(f["kv/v"])
        pos = f["kv/positions"][:] if "kv/positions" in f else None
        tok = f["kv/tokens"][:] if "kv/tokens" in f else None
    bad = []
    if pos is None or list(pos) != list(pos_want):
        bad.append(f"positions {None if pos is None else list(pos[:12])}... want {list(pos_want[:12])}...")
    if tok is not None and list(tok) != list(dtok[src]):
        bad.append("tokens differ from the dump's tokens at those positions")
    if a.expect_tokens and tok is None:
        bad.append("no /kv/tokens")
    if k.shape != (dk.shape[0], dk.shape[1], len(src), dk.shape[3]) or v.shape != k.shape:
        bad.append(f"shape {k.shape}, want {(dk.shape[0], dk.shape[1], len(src), dk.shape[3])}")
    if bad:
        print(f"{a.label}: " + "; ".join(bad))
        sys.exit(2)
    # A cell that moved (context shift) holds the dump's key re-rotated by the move (exact in f32).
    rk = rope_shift(dk[:, :, src], (pos_want - src).astype(np.float64), theta)
    rv = dv[:, :, src]
    ek, ev = [], []
    for layer in range(k.shape[0]):
        # Layer 0 depends on the token alone; deeper layers of cells evaluated after the context
        # shift attended to the shortened context, which the dump does not have.
        m = exact if layer > 0 else np.ones(len(src), bool)
        ek.append(np.abs(k[layer][:, m] - rk[layer][:, m]).max() / np.abs(rk[layer][:, m]).max())
        ev.append(np.abs(v[layer][:, m] - rv[layer][:, m]).max() / np.abs(rv[layer][:, m]).max())
    fmt = " ".join
    print(f"{a.label}: max|diff|/max|x| per layer  K: {fmt(f'{e:.2e}' for e in ek)}  V: {fmt(f'{e:.2e}' for e in ev)}"
          f"  (tolerance K {a.tol_k:.1e} V {a.tol_v:.1e}; {int(exact.sum())}/{len(src)} cells all layers)")
    if max(ek) > a.tol_k or max(ev) > a.tol_v:
        sys.exit(3)


def cmd_greedy(a):
    with h5py.File(a.dump, "r") as f:
        dtok = [int(t) for t in f["kv/tokens"][:]]
    with open(a.llama) as f:
        got = json.load(f)["tokens"]
    want = dtok[a.prefix:a.prefix + len(got)]
    if not got or got != want:
        first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        print(f"greedy: llama.cpp and the dump differ at continuation token {first}: {got[:first + 3]} vs {want[:first + 3]}")
        sys.exit(1)
    print(f"greedy: llama.cpp's {len(got)} greedy tokens after {a.prefix} equal the dump's")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tokens")
    p.add_argument("dump")
    p.add_argument("out")
    p = sub.add_parser("prompt-len")
    p.add_argument("tokenizer")
    p.add_argument("text")
    p = sub.add_parser("compare")
    p.add_argument("--dump", required=True)
    p.add_argument("--imported", required=True)
    p.add_argument("--desc", required=True, help="the <config>.json write_states.mjs wrote")
    p.add_argument("--seq", type=int)
    p.add_argument("--tol-k", type=float, required=True)
    p.add_argument("--tol-v", type=float, required=True)
    p.add_argument("--label", default="state")
    p.add_argument("--expect-tokens", action="store_true")
    p = sub.add_parser("greedy")
    p.add_argument("dump")
    p.add_argument("prefix", type=int)
    p.add_argument("llama")
    a = ap.parse_args()
    {"tokens": cmd_tokens, "prompt-len": cmd_prompt_len, "compare": cmd_compare, "greedy": cmd_greedy}[a.cmd](a)


if __name__ == "__main__":
    main()
