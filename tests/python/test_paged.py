"""kvtool.gather_paged: paged caches (vLLM FlashAttention / FlashInfer / HND, SGLang's pool) into
token order, equal to a token-by-token gather written here with plain loops; shuffled block
tables, noise outside the request's blocks, a partial last block, padding past the tokens; fp8
codes x scales; every refusal with its reason and exit code; the result round-trips write_dump."""
import os
import sys
import tempfile

import h5py
import numpy as np

import kvtool

try:
    import torch
except ImportError:  # the torch check needs Debian's python3-torch; the NumPy ones run anyway
    torch = None


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def expect(cls, reason, code, fn, needle=""):
    try:
        fn()
    except cls as e:
        check(e.reason == reason and e.exit_code == code, f"got {e.reason}/{e.exit_code}, want {reason}/{code}: {e}")
        check(needle in str(e), f"message {str(e)!r} lacks {needle!r}")
        return
    sys.exit(f"FAIL: no {cls.__name__} {reason} (expected one mentioning {needle!r})")


rng = np.random.default_rng(3)
L, H, d, S, N, T = 2, 3, 4, 4, 9, 10  # 10 tokens: blocks of 4, 4 and 2
need = -(-T // S)
blocks = rng.permutation(N)[:need]
table = np.concatenate([blocks, [-1, 77]]).astype(np.int32)  # padding past the tokens


def slot_of(t):
    return int(blocks[t // S]) * S + t % S


def by_loops(get_row):  # [H, T, d] from get_row(t) -> [H, d], one token at a time
    out = np.zeros((H, T, d), np.float32)
    for t in range(T):
        out[:, t, :] = get_row(t)
    return out


# vLLM FlashAttention: per layer [2, N, S, H, d].
fa = [rng.standard_normal((2, N, S, H, d)).astype(np.float32) for _ in range(L)]
k, v = kvtool.gather_paged(kv=fa, layout="2,N,S,H,d", block_table=table, num_tokens=T)
for l in range(L):
    for side, got in ((0, k[l]), (1, v[l])):
        want = by_loops(lambda t: fa[l][side, slot_of(t) // S, slot_of(t) % S])
        check(got.dtype == np.float32 and np.array_equal(got, want), f"FlashAttention layer {l} side {side}")
# The same through vLLM's slot_mapping (PAD_SLOT_ID -1 past the tokens) and a 2-D block table.
sm = np.array([slot_of(t) for t in range(T)] + [-1, -1])
k2, v2 = kvtool.gather_paged(kv=fa, layout="2,N,S,H,d", slot_mapping=sm, num_tokens=T)
check(all(np.array_equal(a, b) for a, b in zip(k + v, k2 + v2)), "slot_mapping differs from block_table")
bt2 = rng.integers(-9, 99, (3, 6))
bt2[2, :need] = blocks
k3, _ = kvtool.gather_paged(kv=fa, layout="2,N,S,H,d", block_table=bt2, batch_index=2, num_tokens=T)
check(all(np.array_equal(a, b) for a, b in zip(k, k3)), "2-D block table row differs")

# FlashInfer with an L axis [L, N, 2, S, H, d] and the HND layout [L, N, 2, H, S, d].
fi = rng.standard_normal((L, N, 2, S, H, d)).astype(np.float16)
k, v = kvtool.gather_paged(kv=fi, layout="L,N,2,S,H,d", block_table=table, num_tokens=T)
check(np.array_equal(v[1], by_loops(lambda t: fi[1, slot_of(t) // S, 1, slot_of(t) % S])), "FlashInfer V")
hnd = rng.standard_normal((L, N, 2, H, S, d)).astype(np.float32)
k, v = kvtool.gather_paged(kv=hnd, layout="L,N,2,H,S,d", block_table=table, num_tokens=T)
check(np.array_equal(k[0], by_loops(lambda t: hnd[0, slot_of(t) // S, 0, :, slot_of(t) % S])), "HND K")

# SGLang MHATokenToKVPool: per layer [size, H, d]; req_to_token row 1, zeros past the tokens.
size = 30
pk = [rng.standard_normal((size, H, d)).astype(np.float32) for _ in range(L)]
pv = [rng.standard_normal((size, H, d)).astype(np.float32) for _ in range(L)]
r2t = np.zeros((2, 16), np.int32)
r2t[1, :T] = rng.permutation(size - 1)[:T] + 1
k, v = kvtool.gather_paged(k=pk, v=pv, layout="X,H,d", slot_mapping=r2t, batch_index=1, num_tokens=T)
check(np.array_equal(v[1], by_loops(lambda t: pv[1][r2t[1, t]])), "SGLang V")

# The result is what write_dump takes.
with tempfile.TemporaryDirectory() as tmp:
    path = kvtool.write_dump(os.path.join(tmp, "p.h5"), k, v, dtype="f32")
    with h5py.File(path, "r") as f:
        check(np.array_equal(f["kv/k"][:], np.stack(k)), "write_dump of gathered K")

if torch is not None:  # torch CPU tensors, bf16 included (widened exactly)
    t_fa = [torch.from_numpy(x).to(torch.bfloat16) for x in fa]
    k, _ = kvtool.gather_paged(kv=t_fa, layout="2,N,S,H,d", block_table=table, num_tokens=T)
    want = by_loops(lambda t: t_fa[0][0, slot_of(t) // S, slot_of(t) % S].float().numpy())
    check(np.array_equal(k[0], want), "torch bf16 cache")

# fp8: the OCP decode tables, and codes x per-layer scales.
e4 = kvtool.decode_fp8(np.arange(256, dtype=np.uint8), "e4m3")
e5 = kvtool.decode_fp8(np.arange(256, dtype=np.uint8), "e5m2")
check(e4[0x7E] == 448 and e4[0x01] == 2.0 ** -9 and e4[0x38] == 1 and np.isnan(e4[[0x7F, 0xFF]]).all()
      and np.isfinite(e4).sum() == 254, "e4m3 table")
check(e5[0x7B] == 57344 and e5[0x01] == 2.0 ** -16 and e5[0x7C] == np.inf and e5[0xFC] == -np.inf
      and np.isfinite(e5).sum() == 248, "e5m2 table")
codes = [rng.choice(np.nonzero(np.isfinite(e4))[0], (2, N, S, H, d)).astype(np.uint8) for _ in range(L)]
scales = np.array([0.03, 2.5], np.float32)
k, v = kvtool.gather_paged(kv=codes, layout="2,N,S,H,d", block_table=table, num_tokens=T, fp8="e4m3",
                           k_scale=scales, v_scale=0.5)
want = by_loops(lambda t: e4[codes[1][0, slot_of(t) // S, slot_of(t) % S]] * scales[1])
check(np.array_equal(k[1], want), "fp8 K x per-layer scale")
check(np.array_equal(v[0], by_loops(lambda t: e4[codes[0][1, slot_of(t) // S, slot_of(t) % S]] * np.float32(0.5))),
      "fp8 V x scale")

# Refusals.
FA = dict(kv=fa, layout="2,N,S,H,d", num_tokens=T)
Bad = kvtool.InvalidInputError
for bad in ([blocks[0], N, 1], [blocks[0], -1, 2], [blocks[0], blocks[1], blocks[0]]):
    expect(Bad, "BAD_BLOCK_TABLE", 1, lambda: kvtool.gather_paged(block_table=np.array(bad), **FA))
expect(Bad, "BAD_BLOCK_TABLE", 1, lambda: kvtool.gather_paged(block_table=blocks[:2], **FA), "needs 3")
dup = sm.copy()
dup[7] = dup[2]
expect(Bad, "BAD_BLOCK_TABLE", 1, lambda: kvtool.gather_paged(slot_mapping=dup, **FA), "same slot")
expect(Bad, "BAD_BLOCK_TABLE", 1, lambda: kvtool.gather_paged(slot_mapping=sm[:T - 1], **FA))
expect(Bad, "UNSUPPORTED_DTYPE", 1, lambda: kvtool.gather_paged(block_table=blocks.astype(float), **FA))
expect(kvtool.UsageError, "USAGE", 2, lambda: kvtool.gather_paged(**FA), "block_table or slot_mapping")
expect(kvtool.UsageError, "USAGE", 2,
       lambda: kvtool.gather_paged(kv=fa, layout="2,N,S,H,d", block_table=table, num_tokens=0), "num_tokens")
expect(kvtool.UsageError, "USAGE", 2, lambda: kvtool.gather_paged(block_table=table, slot_mapping=sm, **FA))
expect(kvtool.UsageError, "USAGE", 2,
       lambda: kvtool.gather_paged(k=pk, v=pv, layout="X,H,d", block_table=table, num_tokens=T), "N and S")
expect(kvtool.UsageError, "USAGE", 2, lambda: kvtool.gather_paged(block_table=bt2, batch_index=5, **FA))
expect(Bad, "UNSUPPORTED_CACHE", 1,
       lambda: kvtool.gather_paged(k=pk, v=pk, layout="X,H,d", slot_mapping=sm, num_tokens=T), "MLA")
latent = [rng.standard_normal((N, S, 24)).astype(np.float32)]
expect(Bad, "UNSUPPORTED_CACHE", 1,
       lambda: kvtool.gather_paged(k=latent, v=latent, layout="N,S,d", block_table=table, num_tokens=T), "MLA")
expect(Bad, "UNSUPPORTED_CACHE", 1,
       lambda: kvtool.gather_paged(kv=codes, layout="2,N,S,H,d", block_table=table, num_tokens=T, fp8="e4m3"))
expect(kvtool.UsageError, "USAGE", 2, lambda: kvtool.gather_paged(block_table=table, k_scale=1.0, **FA))
nan = [c.copy() for c in codes]
nan[0][0, blocks[0], 0, 0, 0] = 0x7F
expect(Bad, "NON_FINITE", 1, lambda: kvtool.gather_paged(kv=nan, layout="2,N,S,H,d", block_table=table,
                                                           num_tokens=T, fp8="e4m3", k_scale=1, v_scale=1))
print("ok")
