#!/usr/bin/env bash
# kvtool import against hostile tensor files and options (man/kvtool-import.1): zero-size axes
# beside huge ones, values a narrower dtype cannot hold, token ids beyond int32. Each gets its
# reason code and exit code, quickly, and leaves no output.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c "import numpy" 2>/dev/null || skip "/usr/bin/python3 lacks numpy"

$PY - <<'PY'
import json
import numpy as np

L, H, T, d = 2, 2, 6, 4
rng = np.random.default_rng(3)
k = rng.standard_normal((L, H, T, d)).astype(np.float32)
np.save("k.npy", k); np.save("v.npy", k + 1)
np.save("q.npy", rng.standard_normal((L, 4, 2, d)).astype(np.float32))
json.dump({"model_artifact_sha256": "ab" * 32, "rope_config": {"theta": 10000.0}}, open("meta.json", "w"))
# A zero-size axis makes the data 0 bytes whatever the other axes claim: every axis is checked.
big = 2 ** 40
for name, shape in (("k0h", (L, 0, T, d)),          # 0 KV heads (with --q: a division by 0)
                    ("khuge_h", (L, big, T, 0)),    # 2^40 heads of dim 0
                    ("khuge_l", (big, H, T, 0)),    # 2^40 layers
                    ("khuge_t", (L, H, big, 0)),    # 2^40 rows
                    ("kflat", (L, 2, T, 0))):       # L,2,T,Hd with Hd = 0 (split by --kv-heads 2^62)
    np.save(name + ".npy", np.zeros(shape, np.float32))
np.save("q0.npy", np.zeros((big, 4, 2, 0), np.float32))    # 2^40 query layers, head dim 0
np.save("qh.npy", np.zeros((L, big, 2, 0), np.float32))    # 2^40 query heads
# Finite float32 values that round to Inf in bfloat16 (and in float16).
kb = k.copy(); kb[1, 1, 3, 2] = 3.4e38; np.save("kbf.npy", kb)
kb = k.copy(); kb[0, 0, 0, 0] = -3.3961776e38; np.save("kbf_edge.npy", kb)
kb = k.copy(); kb[0, 0, 0, 0] = 3.3895314e38; np.save("kbf_max.npy", kb)  # the largest bfloat16: fits
# Token ids beyond int32 would be clamped: two prompts could share one prefix digest.
np.save("tok_big.npy", np.array([1, 2, 3, 2 ** 31, 5, 6], np.int64))
np.save("tok_neg.npy", np.array([1, 2, 3, -(2 ** 31) - 1, 5, 6], np.int64))
np.save("tok_ok.npy", np.array([1, 2, 3, 2 ** 31 - 1, 5, 6], np.int64))
# Two members of one name: NumPy returns the last, a first-match reader the first.
import io, warnings, zipfile
def member(a):
    b = io.BytesIO(); np.lib.format.write_array(b, a); return b.getvalue()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    with zipfile.ZipFile("dup.npz", "w") as z:
        z.writestr("k.npy", member(k)); z.writestr("v.npy", member(k)); z.writestr("k.npy", member(k * 0))
# An npy header with bytes after its dict (NumPy's literal_eval refuses it); padding is fine.
raw = bytearray(open("k.npy", "rb").read())
end = raw.index(b"}") + 1
junk = raw[:end] + b"x" + raw[end + 1:]
open("kjunk.npy", "wb").write(bytes(junk))
# A stored npz member with one data byte flipped: its CRC-32 no longer matches (NumPy refuses it).
np.savez("stored.npz", k=k, v=k + 1)
raw = bytearray(open("stored.npz", "rb").read())
raw[raw.index(b"v.npy") - 200] ^= 0x40  # inside k's data, which precedes v's local header
open("stored_bad.npz", "wb").write(bytes(raw))
# 300 per-layer files: more than the descriptor limit the import runs under below.
import os
os.makedirs("lay")
for l in range(300):
    np.save("lay/k%d.npy" % l, k[l % L]); np.save("lay/v%d.npy" % l, k[l % L] + 1)
# JSON integers beyond int64 (2^64-1 would wrap to -1).
for n, name in ((2 ** 64 - 1, "meta_u64.json"), (2 ** 63, "meta_2p63.json")):
    json.dump({"model_artifact_sha256": "ab" * 32, "rope_config": {"theta": 10000.0},
               "request_generation": n}, open(name, "w"))
json.dump({"model_artifact_sha256": "ab" * 32, "rope_config": {"theta": 10000.0},
           "request_generation": 2 ** 63 - 1}, open("meta_max.json", "w"))
PY

hostile() {  # hostile EXIT REASON import-args...
  local code=$1 reason=$2
  shift 2
  rm -f bad.h5
  expect_reason "$code" "$reason" timeout 20 "$KVTOOL" import "$@" --meta meta.json -o bad.h5
  absent bad.h5
  no_temps .
}
expect_exit 0 "$KVTOOL" import k.npy v.npy q.npy --q q --meta meta.json -o good.h5

# Zero-size axes: refused before any loop over heads or layers (a timeout would exit 124).
hostile 1 SHAPE_MISMATCH k0h.npy k0h.npy --k k0h --v k0h
hostile 1 SHAPE_MISMATCH k0h.npy k0h.npy q.npy --k k0h --v k0h --q q
hostile 1 SHAPE_MISMATCH khuge_h.npy --k khuge_h --v khuge_h
hostile 1 SHAPE_MISMATCH khuge_l.npy --k khuge_l --v khuge_l
hostile 1 SHAPE_MISMATCH khuge_t.npy --k khuge_t --v khuge_t
hostile 1 SHAPE_MISMATCH kflat.npy --kv kflat --layout L,2,T,Hd --kv-heads 4611686018427387904
hostile 1 SHAPE_MISMATCH k.npy v.npy q0.npy --q q0 --q-layout L,H,T,d
hostile 1 SHAPE_MISMATCH k.npy v.npy q0.npy --q q0 --q-layout H,T,d,L
hostile 1 SHAPE_MISMATCH k.npy v.npy qh.npy --q qh
contains err "entries; it needs 1 to"

# bfloat16 overflow: refused like float16's; the largest finite bfloat16 is kept.
hostile 1 NON_FINITE kbf.npy v.npy --k kbf --dtype bf16
contains err "does not fit bfloat16"
hostile 1 NON_FINITE kbf_edge.npy v.npy --k kbf_edge --dtype bf16
hostile 1 NON_FINITE kbf.npy v.npy --k kbf --dtype f16
expect_exit 0 "$KVTOOL" import kbf_max.npy v.npy --k kbf_max --dtype bf16 --meta meta.json -o bfmax.h5
expect_exit 0 "$KVTOOL" verify bfmax.h5
expect_exit 0 "$KVTOOL" import kbf.npy v.npy --k kbf --dtype f32 --meta meta.json -o bf32.h5

# Token ids outside int32.
hostile 1 BAD_ATTRIBUTE k.npy v.npy tok_big.npy --tokens tok_big
contains err "2147483648"
hostile 1 BAD_ATTRIBUTE k.npy v.npy tok_neg.npy --tokens tok_neg
expect_exit 0 "$KVTOOL" import k.npy v.npy tok_ok.npy --tokens tok_ok --meta meta.json -o tok.h5
expect_exit 0 "$KVTOOL" verify tok.h5

expect_exit 0 "$KVTOOL" import stored.npz --meta meta.json -o stored.h5
hostile 1 BAD_TENSOR_FILE stored_bad.npz
contains err "fails its CRC-32"

# Files are open only while read: 300 layer files import under `ulimit -n 64`.
expect_exit 0 bash -c 'ulimit -n 64; exec "$0" import --k "lay/k{layer}.npy" --v "lay/v{layer}.npy" --layout H,T,d \
  --meta meta.json -o layers.h5' "$KVTOOL"
expect_exit 0 "$KVTOOL" verify layers.h5

# Parsers: a repeated npz member name; junk after an npy header's dict.
hostile 1 BAD_TENSOR_FILE dup.npz
contains err "repeats the name 'k.npy'"
hostile 1 BAD_TENSOR_FILE kjunk.npy v.npy --k kjunk
contains err "bytes after its dict"

# --meta: integers beyond int64 refused; int64's max kept; /dev/zero refused after the JSON limit
# is passed (read at most limit+1 bytes: bounded memory, and quickly).
for m in meta_u64.json meta_2p63.json; do
  rm -f bad.h5
  expect_reason 1 BAD_ATTRIBUTE "$KVTOOL" import k.npy v.npy --meta $m -o bad.h5
  contains err "beyond the int64 range"
  absent bad.h5
done
expect_exit 0 "$KVTOOL" import k.npy v.npy --meta meta_max.json -o max.h5
rm -f bad.h5
# An ASan build reserves terabytes of shadow address space at start, so `ulimit -v` cannot bound it
# there; the timeout alone still proves the read stops.
vlimit='ulimit -v 1000000;'
ldd "$KVTOOL" 2>/dev/null | grep -q libasan && vlimit=''
expect_reason 1 BAD_ATTRIBUTE timeout 20 bash -c "$vlimit"' exec "$0" import k.npy v.npy --meta /dev/zero -o bad.h5' "$KVTOOL"
absent bad.h5
# A hangup (closed terminal) during an import leaves neither the output nor its temporary, as
# SIGINT and SIGTERM do.
$PY -c "import numpy as np; a = np.ones((12, 8, 4096, 64), np.float32); np.save('kb.npy', a); np.save('vb.npy', a)"
"$KVTOOL" import kb.npy vb.npy --k kb --v vb --meta meta.json -o hup.h5 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do
  [ -n "$(find . -name '.hup.h5.tmp.*')" ] && break
  sleep 0.05
done
kill -HUP $pid
wait $pid
rc=$?
[ "$rc" -ge 128 ] || fail "import after SIGHUP exited $rc"
absent hup.h5
no_temps .
finish
