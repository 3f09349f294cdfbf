"""K/V (and Q) of `kvtool dump` match an independent numpy forward pass of the llama2.c checkpoints."""
import os
import struct

import h5py
import numpy as np

from common import KVTOOL, MODELS, check, run, workdir


def load(path):
    with open(path, "rb") as f:
        dim, hidden, L, H, Hkv, vocab, seq = struct.unpack("<7i", f.read(28))
        w = np.frombuffer(f.read(), dtype=np.float32)
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // H
    kv = hs * Hkv
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        a = w[off:off + n].reshape(shape)
        off += n
        return a

    p = dict(emb=take(vocab, dim), rms_att=take(L, dim), wq=take(L, dim, dim), wk=take(L, kv, dim),
             wv=take(L, kv, dim), wo=take(L, dim, dim), rms_ffn=take(L, dim), w1=take(L, hidden, dim),
             w2=take(L, dim, hidden), w3=take(L, hidden, dim), rms_final=take(dim))
    take(seq * hs)
    p["cls"] = p["emb"] if shared else take(vocab, dim)
    return dict(dim=dim, L=L, H=H, Hkv=Hkv, hs=hs, **p)


def rmsnorm(x, w):
    return w * x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5)


def rope(x, positions, hs):
    # x: [T, heads, hs]; rotate adjacent pairs (i, i+1) with 10000^-(i/hs).
    i = np.arange(0, hs, 2)
    ang = positions[:, None].astype(np.float64) * (10000.0 ** (-i / hs))[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def forward_all(m, tokens):
    """Full-sequence causal forward in float64; returns post-RoPE q, k, v per layer."""
    T = len(tokens)
    pos = np.arange(T)
    x = m["emb"][tokens].astype(np.float64)
    qs, ks, vs = [], [], []
    for l in range(m["L"]):
        xb = rmsnorm(x, m["rms_att"][l])
        q = (xb @ m["wq"][l].T).reshape(T, m["H"], m["hs"])
        k = (xb @ m["wk"][l].T).reshape(T, m["Hkv"], m["hs"])
        v = (xb @ m["wv"][l].T).reshape(T, m["Hkv"], m["hs"])
        q, k = rope(q, pos, m["hs"]), rope(k, pos, m["hs"])
        qs.append(q), ks.append(k), vs.append(v)
        rep = m["H"] // m["Hkv"]
        kk, vv = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        att = np.einsum("thd,shd->hts", q, kk) / np.sqrt(m["hs"])
        att = att + np.triu(np.full((T, T), -np.inf), 1)[None]
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, vv).reshape(T, -1)
        x = x + o @ m["wo"][l].T
        xb = rmsnorm(x, m["rms_ffn"][l])
        h1, h3 = xb @ m["w1"][l].T, xb @ m["w3"][l].T
        x = x + ((h1 / (1 + np.exp(-h1))) * h3) @ m["w2"][l].T
    return qs, ks, vs


def rel_err(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-12)


with workdir() as w:
    for name, tok, T in (("stories260K", "tok512.bin", 96), ("babyllama361", None, 96)):
        out = os.path.join(w, name + ".h5")
        args = [KVTOOL, "dump", "--llama2c", os.path.join(MODELS, name + ".bin"), "--tokens", T, "--queries", "-o", out, "-q"]
        if tok:
            args += ["--tokenizer", os.path.join(MODELS, tok)]
        run(*args)
        m = load(os.path.join(MODELS, name + ".bin"))
        with h5py.File(out, "r") as f:
            tokens = f["kv/tokens"][:]
            K, V, Q = f["kv/k"][:], f["kv/v"][:], f["kv/q"][:]
            check(list(f.attrs["q_to_kv_head"]) == [h // (m["H"] // m["Hkv"]) for h in range(m["H"])], "GQA map")
        check(tokens[0] == 1, "BOS first")
        qs, ks, vs = forward_all(m, tokens)
        worst = 0.0
        for l in range(m["L"]):
            for h in range(m["Hkv"]):
                worst = max(worst, rel_err(K[l, h], ks[l][:, h]), rel_err(V[l, h], vs[l][:, h]))
            for h in range(m["H"]):
                worst = max(worst, rel_err(Q[l, h], qs[l][:, h]))
        print(f"{name}: max relative error of K/V/Q vs numpy recomputation = {worst:.2e}")
        check(worst < 1e-4, f"{name}: K/V differ from the recomputation by {worst}")
print("ok")
