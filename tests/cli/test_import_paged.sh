#!/usr/bin/env bash
# kvtool import of paged caches (man/kvtool-import.1, LAYOUTS "Paged caches"): vLLM FlashAttention
# 2,N,S,H,d per layer, FlashInfer N,2,S,H,d and its HND form N,2,H,S,d with an L axis, an Hd axis,
# SGLang's X,H,d pool through a req_to_token row, vLLM's slot_mapping on a block layout. Every cache
# is noise outside the request's blocks, block tables are shuffled, the last block is partial and
# padding (-1, zeros, garbage) follows the entries the tokens need. Each dump equals a gather done
# independently in NumPy (fancy indexing). fp8: the e4m3/e5m2 decode tables against the OCP spec
# values, and fp8 x scale round trips (codes written by a NumPy encoder). Refusals: reason, exit
# code, no output.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c "import numpy, h5py" 2>/dev/null || skip "/usr/bin/python3 lacks numpy or h5py"

$PY - <<'PY'
import json, struct
import numpy as np

rng = np.random.default_rng(7)
L, H, d, S, N, T = 3, 2, 8, 4, 10, 13  # 13 tokens: three full blocks of 4 and one of 1
need = -(-T // S)

def safetensors(path, tensors):
    """tensors: name -> (dtype tag, shape, raw bytes)."""
    header, blob = {}, b""
    for name, (tag, shape, raw) in tensors.items():
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + blob)

def f32(x):
    return ("F32", x.shape, np.ascontiguousarray(x, "<f4").tobytes())

# The request: its blocks, shuffled, and its slots (vLLM: block_table[t // S] * S + t % S).
blocks = rng.permutation(N)[:need].astype(np.int32)
slots = blocks[np.arange(T) // S].astype(np.int64) * S + np.arange(T) % S
table = np.concatenate([blocks, [-1, -1, 99]]).astype(np.int32)  # padding past the tokens
np.save("bt.npy", table)
# A 2-D block table [requests, max_blocks]; the request is row 1, the others are garbage.
bt2 = rng.integers(-5, 50, (3, 8)).astype(np.int64)
bt2[1] = 0
bt2[1, :need] = blocks
np.save("bt2.npy", bt2)
np.save("slot_mapping.npy", np.concatenate([slots, [-1, -1]]))  # vLLM PAD_SLOT_ID past the tokens

def want(cache_nshd):  # [N, S, H, d] per layer -> [H, T, d] in token order
    return cache_nshd.reshape(N * S, H, d)[slots].transpose(1, 0, 2)

# vLLM FlashAttention (NHD): per layer [2, N, S, H, d], noise everywhere else.
fa = rng.standard_normal((L, 2, N, S, H, d)).astype(np.float32)
safetensors("fa.safetensors", {"kv.%d" % l: f32(fa[l]) for l in range(L)})
expect = {"fa": (np.stack([want(fa[l, 0]) for l in range(L)]), np.stack([want(fa[l, 1]) for l in range(L)]))}
# FlashInfer (NHD) with an L axis: [L, N, 2, S, H, d]; as float16.
fi = rng.standard_normal((L, N, 2, S, H, d)).astype(np.float16)
np.save("fi.npy", fi)
fi32 = fi.astype(np.float32)
expect["fi"] = (np.stack([want(fi32[l, :, 0]) for l in range(L)]), np.stack([want(fi32[l, :, 1]) for l in range(L)]))
# The HND cache layout (head before slot in memory): [L, N, 2, H, S, d].
hnd = rng.standard_normal((L, N, 2, H, S, d)).astype(np.float32)
np.save("hnd.npy", hnd)
expect["hnd"] = tuple(np.stack([want(hnd[l, :, kv].transpose(0, 2, 1, 3)) for l in range(L)]) for kv in (0, 1))
# Heads and head dim merged: per layer [2, N, S, H*d].
np.savez("hd.npz", **{"kv_%d" % l: fa[l].reshape(2, N, S, H * d) for l in range(L)})
# SGLang MHATokenToKVPool: per layer k_buffer/v_buffer [size, H, d]; req_to_token [requests,
# max_context] int32, the request in row 2, zeros past its tokens.
size = 40
pool_k = rng.standard_normal((L, size, H, d)).astype(np.float32)
pool_v = rng.standard_normal((L, size, H, d)).astype(np.float32)
req_slots = (rng.permutation(size - 1)[:T] + 1).astype(np.int32)  # slot 0 is SGLang's padding slot
r2t = rng.integers(0, size, (4, 32)).astype(np.int32)
r2t[2] = 0
r2t[2, :T] = req_slots
r2t[3, 4] = r2t[3, 9]  # row 3 gives two tokens one slot
np.save("req_to_token.npy", r2t)
arrays = {}
for l in range(L):
    arrays["k_%d" % l], arrays["v_%d" % l] = pool_k[l], pool_v[l]
np.savez("pool.npz", **arrays)
expect["sgl"] = tuple(np.stack([p[l][req_slots].transpose(1, 0, 2) for l in range(L)]) for p in (pool_k, pool_v))
np.savez("expect.npz", **{"%s_%s" % (name, kv): x[i] for name, x in expect.items() for i, kv in enumerate("kv")})

# fp8 decode tables from the OCP 8-bit floating point spec (OFP8, v1.0): E4M3 bias 7 with no
# infinities (S.1111.111 is NaN), E5M2 bias 15 with IEEE infinities and NaNs.
def fp8_table(e4m3):
    c = np.arange(256)
    mb, bias = (3, 7) if e4m3 else (2, 15)
    e, m = (c & 0x7F) >> mb, c & ((1 << mb) - 1)
    mag = np.where(e == 0, m * 2.0 ** (1 - bias - mb), ((1 << mb) + m) * 2.0 ** (e - bias - mb))
    val = np.where(c & 0x80, -mag, mag)
    if e4m3:
        val[(c & 0x7F) == 0x7F] = np.nan
    else:
        val[e == 31] = np.where(m[e == 31] == 0, np.inf, np.nan) * np.where(c[e == 31] & 0x80, -1, 1)
    return val
E4, E5 = fp8_table(True), fp8_table(False)
spec = [(E4, 0x7E, 448.0), (E4, 0x01, 2.0 ** -9), (E4, 0x08, 2.0 ** -6), (E4, 0x38, 1.0), (E4, 0xB8, -1.0),
        (E4, 0x07, 7 * 2.0 ** -9), (E5, 0x7B, 57344.0), (E5, 0x01, 2.0 ** -16), (E5, 0x04, 2.0 ** -14),
        (E5, 0x3C, 1.0), (E5, 0x7C, np.inf), (E5, 0xFC, -np.inf)]
for tab, code, value in spec:
    assert tab[code] == value, (code, tab[code], value)
assert np.isnan(E4[0x7F]) and np.isnan(E4[0xFF]) and np.isnan(E5[0x7D]) and np.isnan(E4).sum() == 2

def encode(x, tab):  # nearest finite code (ties: the even code), by search over the table
    finite = np.where(np.isfinite(tab))[0]
    vals = tab[finite]
    dist = np.abs(x.reshape(-1, 1) - vals.reshape(1, -1))
    return finite[np.argmin(dist, axis=1)].astype(np.uint8).reshape(x.shape)

# Every finite code once, as K [L=1, H=1, T, d=2]; V the same codes reversed.
for name, tab in (("e4m3", E4), ("e5m2", E5)):
    codes = np.where(np.isfinite(tab))[0].astype(np.uint8)
    codes = codes[: len(codes) // 2 * 2].reshape(1, 1, -1, 2)
    tag = "F8_E4M3" if name == "e4m3" else "F8_E5M2"
    safetensors("all_%s.safetensors" % name, {"k": (tag, codes.shape, codes.tobytes()),
                                              "v": (tag, codes.shape, codes[:, :, ::-1].copy().tobytes())})
    np.save("all_%s_codes.npy" % name, codes)
    np.save("all_%s_values.npy" % name, tab[codes].astype(np.float32))
# A paged fp8 e4m3 cache (vLLM FlashAttention, per layer [2, N, S, H, d]) with per-layer k_scale
# [L] in the file and one v_scale; values = decode(code) x scale, in float32.
k_scale = np.array([0.02, 0.5, 3.0], np.float32)
v_scale = np.float32(0.125)
truth = rng.standard_normal((L, 2, N, S, H, d)).astype(np.float32)
codes = np.stack([np.stack([encode(truth[l, 0] / k_scale[l], E4), encode(truth[l, 1] / v_scale, E4)])
                  for l in range(L)])
t = {"kv.%d" % l: ("F8_E4M3", codes[l].shape, codes[l].tobytes()) for l in range(L)}
t["k_scale"] = f32(k_scale)
safetensors("fp8.safetensors", t)
dec = E4[codes].astype(np.float32)
np.savez("fp8_expect.npz",
         k=np.stack([want(dec[l, 0]) * k_scale[l] for l in range(L)]).astype(np.float32),
         v=np.stack([want(dec[l, 1]) * v_scale for l in range(L)]).astype(np.float32))
# e5m2 as uint8 .npy (SGLang stores fp8 as uint8), per-layer scalar scale tensors.
codes5 = np.stack([encode(truth[l, :, :, :, :, :] / 0.25, E5) for l in range(L)])  # [L, 2, N, S, H, d]
for l in range(L):
    np.save("u8_%d.npy" % l, codes5[l])
    np.save("ks_%d.npy" % l, np.array(0.25, np.float32))
dec5 = E5[codes5].astype(np.float32)
np.savez("fp8u_expect.npz", k=np.stack([want(dec5[l, 0]) * np.float32(0.25) for l in range(L)]),
         v=np.stack([want(dec5[l, 1]) * np.float32(0.25) for l in range(L)]))
# NaN (e4m3 0x7f) and inf (e5m2 0x7c) codes in a row the request uses.
bad = codes[0].copy(); bad[0, blocks[0], 1, 0, 3] = 0x7F
safetensors("nan8.safetensors", {"kv": ("F8_E4M3", bad.shape, bad.tobytes())})
bad5 = codes5[0].copy(); bad5[1, blocks[1], 0, 1, 0] = 0x7C
np.save("inf8.npy", bad5)

# Hostile tables: out of range, negative, repeated, too short; slot mappings likewise.
def variant(path, base, i, value):
    x = base.copy(); x[i] = value; np.save(path, x)
variant("bt_range.npy", table, 2, N)
variant("bt_neg.npy", table, 1, -1)
variant("bt_dup.npy", table, 3, blocks[0])
np.save("bt_short.npy", blocks[: need - 1])
np.save("bt_float.npy", blocks.astype(np.float32))
variant("sm_dup.npy", slots, 12, slots[5])
variant("sm_range.npy", slots, 0, N * S)
variant("sm_neg.npy", slots, 6, -1)
np.save("sm_short.npy", slots[:T - 1])
# An MLA latent cache (DeepSeek): one [N, S, kv_lora_rank + rope_dim] tensor, no heads, no K/V.
np.save("latent.npy", rng.standard_normal((N, S, 16 + 8)).astype(np.float32))
np.save("qx.npy", rng.standard_normal((L, 4, 2, d)).astype(np.float32))
json.dump({"model_artifact_sha256": "cd" * 32, "rope_config": {"theta": 10000.0, "scaling": "none"}},
          open("meta.json", "w"))
PY
[ -f meta.json ] || { fail "the input generator failed"; finish; }

# same DUMP NAME [EXPECT.npz]: verify passes; /kv/k and /kv/v equal NAME_k / NAME_v (or k / v of
# EXPECT.npz) exactly, [L, H, T, d].
same() {
  expect_exit 0 "$KVTOOL" verify "$1"
  $PY - "$@" <<'PY' || fail "$1 does not hold the gathered rows"
import sys
import h5py, numpy as np
dump, name = sys.argv[1], sys.argv[2]
src = np.load(sys.argv[3]) if len(sys.argv) > 3 else np.load("expect.npz")
f = h5py.File(dump, "r")
for kv in "kv":
    want = src["%s_%s" % (name, kv)] if len(sys.argv) <= 3 else src[kv]
    got = f["kv/" + kv][:].astype(np.float32)
    if got.shape != want.shape or not np.array_equal(got, want.astype(got.dtype).astype(np.float32)):
        sys.exit("%s: /kv/%s differs (shape %s, want %s)" % (dump, kv, got.shape, want.shape))
PY
}

imp() { "$KVTOOL" import "$@" --meta meta.json; }
expect_exit 0 imp --layout 2,N,S,H,d --kv 'fa.safetensors:kv.{layer}' --block-table bt.npy --num-tokens 13 \
  -o fa.h5 --json
[ "$(json_get out '["tokens"]')" = 13 ] && [ "$(json_get out '["layers"]')" = 3 ] || fail "fa summary: $(cat out)"
same fa.h5 fa
expect_exit 0 imp fa.safetensors --layout 2,N,S,H,d --kv 'kv.{layer}' --block-table bt2.npy --batch-index 1 \
  --num-tokens 13 -o fa2.h5
same fa2.h5 fa
expect_exit 0 imp fa.safetensors --layout 2,N,S,H,d --kv 'kv.{layer}' --slot-mapping slot_mapping.npy \
  --num-tokens 13 -o fa_sm.h5
same fa_sm.h5 fa
expect_exit 0 imp fi.npy --layout L,N,2,S,H,d --kv fi --block-table bt.npy --num-tokens 13 -o fi.h5
same fi.h5 fi
$PY -c "import h5py,sys; sys.exit(h5py.File('fi.h5')['kv/k'].dtype != 'float16')" || fail "an f16 cache should give f16"
expect_exit 0 imp hnd.npy --layout L,N,2,H,S,d --kv hnd --block-table bt.npy --num-tokens 13 -o hnd.h5
same hnd.h5 hnd
expect_exit 0 imp hd.npz --layout 2,N,S,Hd --kv-heads 2 --kv 'kv_{layer}' --block-table bt.npy --num-tokens 13 -o hd.h5
same hd.h5 fa
expect_exit 0 imp pool.npz req_to_token.npy --layout X,H,d --k 'k_{layer}' --v 'v_{layer}' \
  --slot-mapping req_to_token --batch-index 2 --num-tokens 13 -o sgl.h5
same sgl.h5 sgl
# Fewer tokens than the table covers: the first 6 only (no silent use of the rest).
expect_exit 0 imp --layout 2,N,S,H,d --kv 'fa.safetensors:kv.{layer}' --block-table bt.npy --num-tokens 6 -o fa6.h5
$PY -c "
import h5py, numpy as np, sys
e = np.load('expect.npz')['fa_k'][:, :, :6]
sys.exit(not np.array_equal(h5py.File('fa6.h5')['kv/k'][:], e))" || fail "--num-tokens 6 does not hold the first 6 rows"

# fp8: every finite code decodes to its OCP value (448 for e4m3 0x7e, 2^-9 its smallest subnormal).
for f in e4m3 e5m2; do
  expect_exit 0 imp all_$f.safetensors --layout L,H,T,d --k-scale 1 --v-scale 1.0 -o all_$f.h5 --json
  [ "$(json_get out '["source_dtype"]')" = f8_$f ] && [ "$(json_get out '["dtype"]')" = float32 ] ||
    fail "fp8 $f summary: $(cat out)"
  $PY - $f <<'PY' || fail "the $f decode table differs from the spec"
import sys
import h5py, numpy as np
f = h5py.File("all_%s.h5" % sys.argv[1], "r")
codes, want = np.load("all_%s_codes.npy" % sys.argv[1]), np.load("all_%s_values.npy" % sys.argv[1])
k, v = f["kv/k"][:], f["kv/v"][:]
assert np.array_equal(k, want) and np.array_equal(v, want[:, :, ::-1]), "values differ"
spec = {"e4m3": {0x7E: 448.0, 0x01: 2.0 ** -9, 0x38: 1.0, 0xFE: -448.0},
        "e5m2": {0x7B: 57344.0, 0x01: 2.0 ** -16, 0x3C: 1.0, 0xFB: -57344.0}}[sys.argv[1]]
for code, value in spec.items():
    assert k[codes == code].tolist() == [value], (hex(code), k[codes == code])
PY
done
expect_exit 0 imp fp8.safetensors --layout 2,N,S,H,d --kv 'kv.{layer}' --block-table bt.npy --num-tokens 13 \
  --k-scale k_scale --v-scale 0.125 -o fp8.h5
same fp8.h5 - fp8_expect.npz
$PY -c "import h5py,sys; r = h5py.File('fp8.h5').attrs['representation']
sys.exit(r != 'fp8-e4m3-dequantized-kv-float32-post-rope-v1')" || fail "an fp8 dump should say it was fp8"
expect_exit 0 imp --layout 2,N,S,H,d --kv 'u8_{layer}.npy' --fp8 e5m2 --block-table bt.npy --num-tokens 13 \
  --k-scale 'ks_{layer}.npy' --v-scale 0.25 -o fp8u.h5
same fp8u.h5 - fp8u_expect.npz
expect_exit 0 imp fp8.safetensors --layout 2,N,S,H,d --kv 'kv.{layer}' --block-table bt.npy --num-tokens 13 \
  --k-scale k_scale --v-scale 0.125 --dtype bf16 -o fp8bf.h5
expect_exit 0 "$KVTOOL" verify fp8bf.h5

# Refusals: reason, exit code, nothing at the output.
hostile() {  # hostile EXIT REASON import-args...
  local code=$1 reason=$2
  shift 2
  rm -f bad.h5
  expect_reason "$code" "$reason" "$KVTOOL" import "$@" --meta meta.json -o bad.h5
  absent bad.h5
}
FA=(fa.safetensors --layout 2,N,S,H,d --kv 'kv.{layer}')
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --block-table bt_range.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --block-table bt_neg.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --block-table bt_dup.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --block-table bt_short.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --block-table bt.npy --num-tokens 41
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --slot-mapping sm_dup.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --slot-mapping sm_range.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --slot-mapping sm_neg.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE "${FA[@]}" --slot-mapping sm_short.npy --num-tokens 13
hostile 1 BAD_BLOCK_TABLE pool.npz --layout X,H,d --k 'k_{layer}' --v 'v_{layer}' --slot-mapping req_to_token.npy \
  --batch-index 3 --num-tokens 13
hostile 1 UNSUPPORTED_DTYPE "${FA[@]}" --block-table bt_float.npy --num-tokens 13
hostile 2 USAGE "${FA[@]}" --num-tokens 13
hostile 2 USAGE "${FA[@]}" --block-table bt.npy
hostile 2 USAGE "${FA[@]}" --block-table bt.npy --num-tokens 0
hostile 2 USAGE "${FA[@]}" --block-table bt.npy --slot-mapping slot_mapping.npy --num-tokens 13
hostile 2 USAGE "${FA[@]}" --block-table bt2.npy --batch-index 3 --num-tokens 13
hostile 2 USAGE pool.npz --layout X,H,d --k 'k_{layer}' --v 'v_{layer}' --block-table bt.npy --num-tokens 13
hostile 2 USAGE fa.safetensors --layout 2,N,H,d --kv 'kv.{layer}' --block-table bt.npy --num-tokens 13
hostile 2 USAGE "${FA[@]}" --block-table bt.npy --num-tokens 13 --q qx.npy
hostile 2 USAGE hnd.npy --layout L,H,T,d --k hnd --v hnd --block-table bt.npy --num-tokens 13
# fp8 without its scales, bad scales, scales or --fp8 where there is no fp8, NaN/inf codes.
FP8=(fp8.safetensors --layout 2,N,S,H,d --kv 'kv.{layer}' --block-table bt.npy --num-tokens 13)
hostile 1 UNSUPPORTED_CACHE "${FP8[@]}"
hostile 1 UNSUPPORTED_CACHE "${FP8[@]}" --k-scale k_scale
hostile 1 UNSUPPORTED_CACHE --layout 2,N,S,H,d --kv 'u8_{layer}.npy' --fp8 e5m2 --block-table bt.npy --num-tokens 13
hostile 1 BAD_ATTRIBUTE "${FP8[@]}" --k-scale k_scale --v-scale 0
hostile 1 BAD_ATTRIBUTE "${FP8[@]}" --k-scale -0.5 --v-scale 1
hostile 1 SHAPE_MISMATCH "${FP8[@]}" --k-scale bt.npy --v-scale 1
# A scale is a decimal number or a tensor: "0x10" (strtof's 16) and "inf" name no tensor.
hostile 2 USAGE "${FP8[@]}" --k-scale 0x10 --v-scale 1
hostile 2 USAGE "${FP8[@]}" --k-scale inf --v-scale 1
hostile 2 USAGE "${FA[@]}" --block-table bt.npy --num-tokens 13 --k-scale 1 --v-scale 1
hostile 2 USAGE "${FA[@]}" --block-table bt.npy --num-tokens 13 --fp8 e4m3
hostile 2 USAGE --layout 2,N,S,H,d --kv 'u8_{layer}.npy' --fp8 e3m4 --block-table bt.npy --num-tokens 13
hostile 1 UNSUPPORTED_DTYPE --layout 2,N,S,H,d --kv 'u8_{layer}.npy' --block-table bt.npy --num-tokens 13
hostile 1 NON_FINITE nan8.safetensors --layout 2,N,S,H,d --kv kv --block-table bt.npy --num-tokens 13 --k-scale 1 \
  --v-scale 1
hostile 1 NON_FINITE inf8.npy --layout 2,N,S,H,d --kv inf8 --fp8 e5m2 --block-table bt.npy --num-tokens 13 \
  --k-scale 1 --v-scale 1
# MLA latents: no heads, no separate K and V.
hostile 1 UNSUPPORTED_CACHE latent.npy --layout N,S,d --k latent --v latent --block-table bt.npy --num-tokens 13
hostile 1 UNSUPPORTED_CACHE pool.npz --layout X,H,d --k k_0 --v k_0 --slot-mapping req_to_token.npy --batch-index 2 \
  --num-tokens 13
grep -q "MLA" err || fail "the same-tensor refusal should say why (MLA): $(cat err)"
no_temps .
finish
