#!/usr/bin/env bash
# kvtool import (man/kvtool-import.1): .npy, .npz (stored and deflated), safetensors (F32, F16, BF16,
# written by hand: u64 header length + JSON + bytes), every layout (L,H,T,d; T,H,d per layer; vLLM's
# per-layer kv_cache 2,T,Hd; a batch axis; L not outermost), queries, tokens; each result passes
# verify and inspect and equals the source arrays read back with h5py. Hostile files: each gets its
# reason code and exit code and leaves no output. Also `query --vector FILE.npy`.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c "import numpy, h5py" 2>/dev/null || skip "/usr/bin/python3 lacks numpy or h5py"

# The source arrays (src.npz holds the ground truth the dumps are compared with) and every input.
$PY - <<'PY'
import hashlib, json, os, struct
import numpy as np

rng = np.random.default_rng(1)
L, H, Hq, T, Tq, d = 3, 2, 4, 24, 5, 8
k = rng.standard_normal((L, H, T, d)).astype(np.float32)
v = rng.standard_normal((L, H, T, d)).astype(np.float32)
q = rng.standard_normal((L, Hq, Tq, d)).astype(np.float32)
qpos = np.array([3, 7, 11, 19, 23], np.int64)
tokens = rng.integers(0, 500, T).astype(np.int32)
np.savez("src.npz", k=k, v=v, q=q)

def bf16(x):  # round to nearest even, as kvdump-v1.md's writer does
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype tag, shape, raw bytes)."""
    header, blob = {}, b""
    for name, (tag, shape, raw) in tensors.items():
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)

np.save("k.npy", k); np.save("v.npy", v); np.save("q.npy", q)
np.save("qpos.npy", qpos); np.save("tokens.npy", tokens)
np.save("k16.npy", k.astype(np.float16)); np.save("v16.npy", v.astype(np.float16))
np.savez("stored.npz", k=k, v=v)
np.savez_compressed("deflated.npz", keys=k.astype(np.float16), values=v.astype(np.float16), q=q, tokens=tokens)
# Batch axis: sequence 1 of 2 is the real one.
np.savez("batch.npz", k=np.stack([k * 0 + 9, k], 1), v=np.stack([v * 0 + 9, v], 1))
# T,L,H,d: L is not the outermost axis (strided reads).
np.save("k_tlhd.npy", np.ascontiguousarray(k.transpose(2, 0, 1, 3)))
np.save("v_tlhd.npy", np.ascontiguousarray(v.transpose(2, 0, 1, 3)))
# Per-layer T,H,d tensors in one safetensors file, one per dtype.
for tag, conv in (("F32", lambda x: x.astype("<f4").tobytes()), ("F16", lambda x: x.astype("<f2").tobytes()),
                  ("BF16", lambda x: bf16(x).astype("<u2").tobytes())):
    t = {}
    for l in range(L):
        for name, x in (("k", k), ("v", v)):
            y = np.ascontiguousarray(x[l].transpose(1, 0, 2))  # [T, H, d]
            t["%s.%d" % (name, l)] = (tag, y.shape, conv(y))
    safetensors("layers_%s.safetensors" % tag, t, metadata={"format": "pt"})
# vLLM's example KV connector: STORAGE/<md5 of the token ids>/<layer name>.safetensors, each with one
# tensor kv_cache [2, T, H*d] (K then V; the paged buffer reshaped to (2, pages*page_size, -1)).
folder = os.path.join("vllm_store", hashlib.md5(tokens.astype(np.int64).tobytes()).hexdigest())
os.makedirs(folder)
for l in range(L):
    kv = np.stack([k[l].transpose(1, 0, 2).reshape(T, H * d), v[l].transpose(1, 0, 2).reshape(T, H * d)])
    safetensors(os.path.join(folder, "model.layers.%d.self_attn.attn.safetensors" % l),
                {"kv_cache": ("BF16", kv.shape, bf16(kv).astype("<u2").tobytes())})
open("vllm_dir", "w").write(folder)
json.dump({"model_artifact_sha256": "ab" * 32, "rope_config": {"theta": 10000.0, "scaling": "none", "pairing": "half"},
           "tenant_namespace": "team-a", "request_generation": 3}, open("meta.json", "w"))

# Hostile inputs.
raw = open("k.npy", "rb").read()
open("trunc.npy", "wb").write(raw[:-7])
open("lie.npy", "wb").write(raw.replace(b"(3, 2, 24, 8)", b"(3, 2, 99, 8)"))
np.save("kbig.npy", k.astype(">f4"))
np.save("kint.npy", k.astype(np.int32))
np.save("kfort.npy", np.asfortranarray(k))
knan = k.copy(); knan[1, 0, 5, 2] = np.nan
np.save("knan.npy", knan)
np.save("vshort.npy", v[:, :, :20])
vs = v.reshape(-1).view(np.uint8)
safetensors("ok.safetensors", {"k": ("F32", k.shape, k.tobytes()), "v": ("F32", v.shape, v.tobytes())})
ok = open("ok.safetensors", "rb").read()
n = struct.unpack("<Q", ok[:8])[0]
open("st_hdrlen.safetensors", "wb").write(struct.pack("<Q", len(ok)) + ok[8:])
hdr = json.loads(ok[8:8 + n])
def rewrite(path, hdr):
    text = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + ok[8 + n:])
h = json.loads(json.dumps(hdr)); h["v"]["data_offsets"][1] += 4096; rewrite("st_outside.safetensors", h)
h = json.loads(json.dumps(hdr)); h["v"]["data_offsets"] = h["k"]["data_offsets"]; rewrite("st_overlap.safetensors", h)
h = json.loads(json.dumps(hdr)); h["k"]["dtype"] = "I32"; rewrite("st_dtype.safetensors", h)
h = json.loads(json.dumps(hdr)); h["k"]["shape"][2] = 23; rewrite("st_shape.safetensors", h)
open("st_json.safetensors", "wb").write(ok[:8] + b"[" + ok[9:])
z = bytearray(open("deflated.npz", "rb").read())
z[z.index(b"keys.npy") + 200] ^= 0xFF  # inside the deflated data of the K member
open("corrupt.npz", "wb").write(bytes(z))
open("cut.npz", "wb").write(open("stored.npz", "rb").read()[:5000])
np.save("q8.npy", q[0, 0, 0]); np.save("q9.npy", np.zeros(9, np.float32))
PY
[ -f src.npz ] || { fail "the input generator failed"; finish; }

# check_dump DUMP [K V Q TOKENS]: verify + inspect pass; K/V (and Q, tokens) equal the source
# arrays, bit for bit in the dump's dtype.
check_dump() {
  local dump=$1
  expect_exit 0 "$KVTOOL" verify "$dump"
  expect_exit 0 "$KVTOOL" inspect "$dump"
  $PY - "$@" <<'PY' || fail "$dump does not hold the source arrays"
import sys
import h5py, numpy as np
dump, want = sys.argv[1], sys.argv[2:]
src = np.load("src.npz")
f = h5py.File(dump, "r")
def as_f32(ds):
    x = ds[:]
    if ds.attrs.get("dtype") == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)
def like(ref, ds):  # the source rounded to the dump's dtype
    if ds.attrs.get("dtype") == "bfloat16":
        u = ref.astype(np.float32).view(np.uint32)
        return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)) << 16).view(np.float32)
    return ref.astype(ds.dtype).astype(np.float32)
for name in ("k", "v", "q"):
    if name in want and not np.array_equal(as_f32(f["kv/" + name]), like(src[name], f["kv/" + name])):
        sys.exit("%s: /kv/%s differs" % (dump, name))
if "tokens" in want and not np.array_equal(f["kv/tokens"][:], np.load("tokens.npy")):
    sys.exit("%s: /kv/tokens differs" % dump)
if f.attrs["tenant_namespace"] != "team-a" or f.attrs["request_generation"] != 3:
    sys.exit("%s: the --meta identity was not written" % dump)
PY
}

expect_exit 0 "$KVTOOL" import k.npy v.npy --meta meta.json -o npy.h5 --json
[ "$(json_get out '["layers"]')" = 3 ] && [ "$(json_get out '["dtype"]')" = float32 ] || fail "npy --json summary: $(cat out)"
check_dump npy.h5 k v
expect_exit 0 "$KVTOOL" import k16.npy v16.npy --k k16 --v v16 --meta meta.json -o npy16.h5
check_dump npy16.h5 k v
expect_exit 0 "$KVTOOL" import k.npy v.npy q.npy --q q --q-positions qpos.npy --tokens tokens.npy --meta meta.json -o q.h5
check_dump q.h5 k v q tokens
$PY -c "import h5py,sys; sys.exit(list(h5py.File('q.h5')['kv/q_positions'][:]) != [3,7,11,19,23])" || fail "q_positions"
expect_exit 0 "$KVTOOL" import stored.npz --meta meta.json --dtype bf16 -o stored.h5
check_dump stored.h5 k v
expect_exit 0 "$KVTOOL" import deflated.npz --k keys --v values --q q --tokens tokens --meta meta.json -o deflated.h5
check_dump deflated.h5 k v q tokens
expect_exit 0 "$KVTOOL" import batch.npz --layout L,B,H,T,d --batch-index 1 --meta meta.json -o batch.h5
check_dump batch.h5 k v
expect_exit 0 "$KVTOOL" import k_tlhd.npy v_tlhd.npy --layout T,L,H,d --k k_tlhd --v v_tlhd --meta meta.json -o tlhd.h5
check_dump tlhd.h5 k v
for tag in F32 F16 BF16; do
  expect_exit 0 "$KVTOOL" import layers_$tag.safetensors --layout T,H,d --k 'k.{layer}' --v 'v.{layer}' \
    --meta meta.json -o st_$tag.h5
  check_dump st_$tag.h5 k v
done
$PY -c "import h5py,sys; sys.exit(h5py.File('st_BF16.h5')['kv/k'].attrs.get('dtype') != 'bfloat16')" ||
  fail "a BF16 source should give a bfloat16 dump by default"
# vLLM's connector layout, one file per layer found from layer 0 on.
VDIR=$(cat vllm_dir)
expect_exit 0 "$KVTOOL" import --layout 2,T,Hd --kv-heads 2 \
  --kv "$VDIR/model.layers.{layer}.self_attn.attn.safetensors:kv_cache" --meta meta.json -o vllm.h5 --json
[ "$(json_get out '["layers"]')" = 3 ] || fail "vLLM import found $(json_get out '["layers"]') layers, not 3"
check_dump vllm.h5 k v
expect_exit 0 "$KVTOOL" import --layout 2,T,Hd --head-dim 8 --layers 2 \
  --kv "$VDIR/model.layers.{layer}.self_attn.attn.safetensors" --meta meta.json -o vllm2.h5 --json
[ "$(json_get out '["kv_heads"]')" = 2 ] && [ "$(json_get out '["layers"]')" = 2 ] || fail "--head-dim split: $(cat out)"
# The imported dump is a normal dump: an index builds on it.
expect_exit 0 "$KVTOOL" build pq q.h5 -o q.kvi -q -b 4 --iters 2 --threads 1 --sink 1 --local 1
expect_exit 0 "$KVTOOL" verify q.kvi --source q.h5

# query --vector FILE.npy: the same receipt as the same vector as text.
$PY -c "import numpy as np; np.savetxt('q8.txt', np.load('q8.npy')[None], fmt='%.9g')"
expect_exit 0 "$KVTOOL" query q.kvi --source q.h5 --layer 0 --q-head 0 --vector q8.npy --budget 0.5 --json
mv out npy.json
expect_exit 0 "$KVTOOL" query q.kvi --source q.h5 --layer 0 --q-head 0 --vector q8.txt --budget 0.5 --json
[ "$(json_get npy.json '["candidates"]')" = "$(json_get out '["candidates"]')" ] || fail "--vector .npy and text differ"
expect_reason 1 SHAPE_MISMATCH "$KVTOOL" query q.kvi --source q.h5 --layer 0 --q-head 0 --vector q9.npy
expect_reason 1 BAD_TENSOR_FILE "$KVTOOL" query q.kvi --source q.h5 --layer 0 --q-head 0 --vector kfort.npy

# Hostile inputs: reason, exit code, and nothing at the output path.
hostile() {  # hostile EXIT REASON import-args...
  local code=$1 reason=$2
  shift 2
  rm -f bad.h5
  expect_reason "$code" "$reason" "$KVTOOL" import "$@" --meta meta.json -o bad.h5
  absent bad.h5
}
hostile 1 TRUNCATED trunc.npy v.npy --k trunc
hostile 1 TRUNCATED lie.npy v.npy --k lie
hostile 1 UNSUPPORTED_DTYPE kbig.npy v.npy --k kbig
hostile 1 UNSUPPORTED_DTYPE kint.npy v.npy --k kint
hostile 1 BAD_TENSOR_FILE kfort.npy v.npy --k kfort
hostile 1 NON_FINITE knan.npy v.npy --k knan
hostile 1 SHAPE_MISMATCH k.npy vshort.npy --v vshort
hostile 1 TRUNCATED st_hdrlen.safetensors
hostile 1 TRUNCATED st_outside.safetensors
hostile 1 BAD_LAYOUT st_overlap.safetensors
hostile 1 UNSUPPORTED_DTYPE st_dtype.safetensors
hostile 1 BAD_LAYOUT st_shape.safetensors
hostile 1 BAD_TENSOR_FILE st_json.safetensors
hostile 1 BAD_TENSOR_FILE corrupt.npz --k keys --v values
hostile 1 TRUNCATED cut.npz
hostile 1 BAD_TENSOR_FILE meta.json
hostile 2 USAGE k.npy v.npy --layout L,H,X,d
hostile 2 USAGE k.npy v.npy --k nosuch
hostile 1 SHAPE_MISMATCH k.npy v.npy --layout T,H,d --layers 1
echo '{"rope_config": {}}' > nomodel.json
expect_reason 1 MISSING_ATTRIBUTE "$KVTOOL" import k.npy v.npy --meta nomodel.json -o bad.h5
absent bad.h5
echo '{"model_artifact_sha256": "xyz", "rope_config": {}}' > badsha.json
expect_reason 1 BAD_ATTRIBUTE "$KVTOOL" import k.npy v.npy --meta badsha.json -o bad.h5
absent bad.h5
expect_reason 3 OUTPUT_EXISTS "$KVTOOL" import k.npy v.npy --meta meta.json -o npy.h5
expect_exit 0 "$KVTOOL" import k.npy v.npy --meta meta.json -o npy.h5 --force
no_temps .
finish
