#!/usr/bin/env bash
# Regenerates the committed inputs of the GPU pool check (tests/gpu/test_gpu_pool.cpp), so that the
# device machine, which has only the CUDA toolkit, CMake and a compiler, needs no dump, HDF5 or model:
#   one artifact of each kind built by the kvtool CLI from a real stories260K dump (layers 1-2, small
#   tables so each file stays a few tens of KiB), and queries.bin, 32 real post-RoPE queries per
#   (layer, query head) taken from the same dump's /kv/q.
# Usage (from the repository root, after a build): tests/gpu/data/make_data.sh build/bin/kvtool
# The artifacts are pinned test inputs: regenerate them only on purpose (the check's expected values
# are recomputed from them at run time, so any valid artifact works).
set -euo pipefail
kvtool="$(realpath "${1:?usage: make_data.sh PATH/TO/kvtool}")"
here="$(cd "$(dirname "$0")" && pwd)"
models="${KVTOOL_SHARED:-$here/../../../../shared}/models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$kvtool" dump --llama2c "$models/stories260K.bin" --tokenizer "$models/tok512.bin" --tokens 512 --queries \
  -o "$tmp/s.h5" >/dev/null
common=(--layers 1-2 --zstd-level 19 --quiet)
"$kvtool" build pq "$tmp/s.h5" -o "$tmp/pq.kvi" --local 16 "${common[@]}"
"$kvtool" build clusterkv "$tmp/s.h5" -o "$tmp/clusterkv.kvi" --tokens-per-cluster 16 "${common[@]}"
"$kvtool" build lsh "$tmp/s.h5" -o "$tmp/lsh.kvi" -K 6 -L 8 "${common[@]}"
"$kvtool" build squeeze "$tmp/s.h5" -o "$tmp/squeeze.kvi" --percent-clusters 10 "${common[@]}"
for k in pq clusterkv lsh squeeze; do "$kvtool" verify "$tmp/$k.kvi" --source "$tmp/s.h5" >/dev/null; done
# queries.bin: "KVQ1", then int32 first_layer, layers, q_heads, count, d, then f32 [layers, q_heads,
# count, d] (little-endian): /kv/q of layers 1-2 at every 16th position.
/usr/bin/python3 - "$tmp/s.h5" "$tmp/queries.bin" <<'PY'
import sys, struct, h5py, numpy as np
q = h5py.File(sys.argv[1], "r")["kv/q"][1:3, :, ::16, :].astype("<f4")
with open(sys.argv[2], "wb") as f:
    f.write(b"KVQ1" + struct.pack("<5i", 1, q.shape[0], q.shape[1], q.shape[2], q.shape[3]))
    f.write(np.ascontiguousarray(q).tobytes())
PY
cp "$tmp"/{pq,clusterkv,lsh,squeeze}.kvi "$tmp/queries.bin" "$here/"
ls -l "$here"
