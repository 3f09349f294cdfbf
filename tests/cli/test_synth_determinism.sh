#!/usr/bin/env bash
# kvtool synth is deterministic beyond the digests (which cover K and V only, not Q, q_positions or
# tokens; formats/kvi-v1.md §Digests): the same seed gives byte-identical files and identical full
# HDF5 datasets whatever the worker count, equal to the committed golden
# (fixtures/expected/synth-seed7-datasets.json), and another seed gives other K, V, Q and tokens.
#
# The worker count is varied with --threads (1, 3 and 16 workers for 6 (layer, head) slices:
# partial batches too).
. "$(dirname "$0")/lib.sh"
GEO=(--layers 3 --kv-heads 2 --q-heads 6 --head-dim 16 --tokens 200 --query-count 16)

"$KVTOOL" synth "${GEO[@]}" --seed 7 -o native.h5 -q || fail "synth seed 7"
"$KVTOOL" synth "${GEO[@]}" --seed 8 -o seed8.h5 -q || fail "synth seed 8"

varied=()
for t in 1 3 16; do
  "$KVTOOL" synth "${GEO[@]}" --seed 7 --threads $t -o "w$t.h5" -q || fail "synth with $t threads"
  cmp -s native.h5 "w$t.h5" || fail "synth seed 7 with $t threads is not byte-identical to the default count"
  varied+=("w$t.h5")
done

/usr/bin/python3 - "$FIXTURES/expected/synth-seed7-datasets.json" native.h5 seed8.h5 "${varied[@]}" <<'PY' ||
import hashlib, json, sys
import h5py
import numpy as np

golden, native, seed8, varied = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]


def datasets(path):
    """Every dataset under /kv as (dtype, shape, SHA-256 of its little-endian bytes) and the attributes."""
    with h5py.File(path, "r") as f:
        out = {}
        for name, d in f["kv"].items():
            x = np.ascontiguousarray(d[()])
            le = x.astype(x.dtype.newbyteorder("<")).tobytes()
            out[name] = [str(x.dtype), list(x.shape), hashlib.sha256(le).hexdigest()]
        attrs = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()}
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    return out, attrs


bad = []
want = json.load(open(golden))
got, attrs = datasets(native)
if sorted(got) != sorted(want["datasets"]):
    bad.append("datasets %s, golden %s" % (sorted(got), sorted(want["datasets"])))
for name, w in want["datasets"].items():
    if got.get(name) != w:
        bad.append("seed 7 /kv/%s is %s, golden %s" % (name, got.get(name), w))
if attrs.get("generator") != want["generator"]:
    bad.append("generator %r" % attrs.get("generator"))
for path in varied:
    g, a = datasets(path)
    if g != got or a != attrs:
        bad.append(path + ": datasets or attributes differ from the native worker count")
other, _ = datasets(seed8)
for name in ("k", "v", "q", "tokens"):
    if other[name][2] == got[name][2]:
        bad.append("seed 8 gives the same /kv/%s as seed 7" % name)
for name in ("q_positions",):
    if other[name] != got[name]:
        bad.append("seed 8 gives other /kv/%s (positions do not depend on the seed)" % name)
print("\n".join(bad) or "datasets match the golden (%d dumps compared)" % (1 + len(varied)), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  fail "synth datasets"
finish
