#!/usr/bin/env bash
# kvtool dump --gguf against llama.cpp's own prefill (issue 50, item 2), in one run on the same cores:
# a random-weight model of SmolLM2-135M's shape (30 layers, 9 query and 3 KV heads, head_dim 64,
# hidden 576/1536, vocabulary 49152; f32 weights), the same T token ids (default 8192;
# KVTOOL_BENCH_TOKENS), kvtool with --queries (K, V and Q of every position written) against
# node-llama-cpp's evaluation (f32 cache, no flash attention, batch 512, the same thread count).
# Prints both times and their ratio; fails above the targets: kvtool <= 180 s, ratio <= 2.
# Needs node-llama-cpp (.ci/install-deps --test); ~3 GiB of disk in a temporary folder.
set -u
source "${KVTOOL_SOURCE:?}/tests/cli/lib.sh"
HERE=$KVTOOL_SOURCE/tests/llamacpp
PY=/usr/bin/python3
T=${KVTOOL_BENCH_TOKENS:-8192}
THREADS=${KVTOOL_BENCH_THREADS:-$(nproc)}
NLC=${KVTOOL_NODE_LLAMA_CPP:-$HOME/.cache/kvtool/node-llama-cpp-3.21.1}
export KVTOOL_NODE_LLAMA_CPP=$NLC
[ -f "$NLC/node_modules/node-llama-cpp/llama/gitRelease.bundle" ] || { echo "skip: no node-llama-cpp in $NLC"; exit 77; }
git clone -q --bare "$NLC/node_modules/node-llama-cpp/llama/gitRelease.bundle" llama.git &&
  git --git-dir=llama.git archive HEAD gguf-py | tar -x || { fail "gguf-py"; finish; }
$PY "$HERE/make_gguf_models.py" --gguf-py gguf-py --shape smollm2 --wtype f32 --layers 30 --vocab 49152 -o m.gguf ||
  { fail "make the model"; finish; }
$PY -c "import json, random; r = random.Random(7); print(json.dumps([1] + [r.randrange(3, 49152) for _ in range($T - 1)]))" >t.json
start=$(date +%s.%N)
"$KVTOOL" dump --gguf m.gguf --token-ids t.json --queries --threads "$THREADS" -o d.h5 -q || fail "kvtool dump --gguf"
kv=$($PY -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$start" "$(date +%s.%N)")
node "$HERE/prefill_time.mjs" --model m.gguf --tokens t.json --threads "$THREADS" >l.json || fail "llama.cpp prefill"
lc=$($PY -c "import json; print('%.1f' % json.load(open('l.json'))['seconds'])")
ratio=$($PY -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$kv" "$lc")
echo "bench gguf prefill: $T tokens, $THREADS threads: kvtool dump --gguf --queries ${kv} s (model load and dump write included), llama.cpp prefill ${lc} s (evaluation only), ratio ${ratio}"
$PY -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 180 else 1)" "$kv" || fail "kvtool took ${kv} s (target 180)"
$PY -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 2 else 1)" "$ratio" || fail "kvtool/llama.cpp = ${ratio} (target 2)"
finish
