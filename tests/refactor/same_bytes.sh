#!/usr/bin/env bash
# A refactor changes no output: two kvtool builds (BEFORE, AFTER: paths of their `kvtool`) write the
# same bytes for the same inputs. Synthesizes one dump, dumps a llama2.c model when one is given
# (KVTOOL_MODEL), builds every kind on each (at 1 and 2 threads), imports the dump's K/V back
# through .npy files and --layout and through LMCache raw chunks, imports and inspects the llama.cpp
# state files of fuzz/corpus/llama_state (written by real llama.cpp), and compares each output file
# byte for byte.
#   bash tests/refactor/same_bytes.sh OLD/build/bin/kvtool build/bin/kvtool [WORKDIR]
# Not a ctest: it needs a second, older build (docs/architecture.md, "Refactors").
set -euo pipefail
before=$1 after=$2 work=${3:-$(mktemp -d)}
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
cd "$work"
kinds=$("$after" build --help | sed -n 's/^ *KIND TEXT REQUIRED *//p' | tr -d ' ' | tr '|' ' ')
[ -n "$kinds" ] || { echo "same_bytes: no kind list in '$after build --help'" >&2; exit 2; }
compared=0 differ=0
same() {  # same FILE_BEFORE FILE_AFTER
  compared=$((compared + 1))
  if cmp -s "$1" "$2"; then echo "same   $2"; else echo "DIFFER $2"; differ=$((differ + 1)); fi
}
for tool in before after; do
  exe=${!tool}
  "$exe" synth --layers 3 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 700 --seed 7 --dtype f16 -o $tool-synth.h5 -q
  if [ -n "${KVTOOL_MODEL:-}" ]; then
    "$exe" dump --llama2c "$KVTOOL_MODEL" --tokens 200 -o $tool-model.h5 -q
  fi
done
same before-synth.h5 after-synth.h5
dumps=synth
[ -z "${KVTOOL_MODEL:-}" ] || { same before-model.h5 after-model.h5; dumps="synth model"; }
for d in $dumps; do
  for k in $kinds; do
    for t in 1 2; do
      for tool in before after; do  # a refusal must be the same refusal
        "${!tool}" build "$k" before-$d.h5 --threads $t -o $tool-$d-$k-t$t.kvi -q 2> $tool-$d-$k-t$t.err ||
          rm -f $tool-$d-$k-t$t.kvi
      done
      if [ -f before-$d-$k-t$t.kvi ]; then same before-$d-$k-t$t.kvi after-$d-$k-t$t.kvi
      else same before-$d-$k-t$t.err after-$d-$k-t$t.err; fi
    done
  done
done
# Import: the synth dump's K/V as [L, H, T, d] .npy files, read back through --layout.
/usr/bin/python3 - before-synth.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    np.save("k.npy", np.asarray(f["/kv/k"]).astype(np.float32))
    np.save("v.npy", np.asarray(f["/kv/v"]).astype(np.float32))
PY
echo '{"model_artifact_sha256": "'"$(printf a%.0s {1..64})"'", "rope_config": {"theta": 10000.0}}' > meta.json
for tool in before after; do
  "${!tool}" import k.npy v.npy --layout L,H,T,d --meta meta.json --dtype bf16 -o $tool-import.h5 -q
done
same before-import.h5 after-import.h5
# LMCache v1 raw chunks (KV_2LTD, [2, L, 256, H*d] f16 per file) of the same K/V.
/usr/bin/python3 - before-synth.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    kv = np.stack([np.asarray(f["/kv/k"]), np.asarray(f["/kv/v"])])  # [2, L, H, T, d]
kv = kv.transpose(0, 1, 3, 2, 4).reshape(kv.shape[0], kv.shape[1], kv.shape[3], -1).astype(np.float16)
for i in range(0, kv.shape[2], 256):
    kv[:, :, i:i + 256].tofile("chunk%d.pt" % (i // 256))
PY
for tool in before after; do
  "${!tool}" import chunk*.pt --format lmcache-raw --memory-format KV_2LTD --layers 3 --kv-heads 2 --head-dim 32 \
    --src-dtype f16 --meta meta.json -o $tool-lmcache.h5 -q
done
same before-lmcache.h5 after-lmcache.h5
# llama.cpp state files the real llama.cpp wrote (the fuzz seeds), with their model's GGUF header.
seeds=$src/fuzz/corpus/llama_state
for s in stories-f16 stories-f32-vtrans; do
  for tool in before after; do
    "${!tool}" import "$seeds/$s.ggsq" --gguf "$seeds/stories-metadata.gguf" -o $tool-$s.h5 -q
    "${!tool}" inspect "$seeds/$s.ggsq" --gguf "$seeds/stories-metadata.gguf" --json > $tool-$s.inspect.json
  done
  same before-$s.h5 after-$s.h5
  same before-$s.inspect.json after-$s.inspect.json
done
echo "same_bytes: $compared files compared, $differ differ"
[ "$differ" = 0 ]
