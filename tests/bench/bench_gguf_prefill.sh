#!/usr/bin/env bash
# kvtool dump --gguf against llama.cpp's own prefill (docs/models.md, "Speed"), in one run on the same cores:
# a random-weight model of SmolLM2-135M's shape (30 layers, 9 query and 3 KV heads, head_dim 64,
# hidden 576/1536, vocabulary 49152; f32 weights), the same T token ids (default 8192;
# KVTOOL_BENCH_TOKENS), kvtool with --queries (K, V and Q of every position written) against
# node-llama-cpp's evaluation (f32 cache, no flash attention, batch 512, the same thread count).
# The floor, measured in the same run: the prefill's FLOPs (every projection of every layer, and causal
# attention's QK^T and PV) at the best SGEMM rate of the OpenBLAS kvtool links on the same threads
# (tests/support/sgemm_rate.c, compiled here; a projection-shaped and an attention-shaped product).
# Prints the three times and the ratios; fails above the targets: kvtool <= 180 s, kvtool/llama.cpp <= 2.
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
cc -O2 -o sgemm_rate "$KVTOOL_SOURCE/tests/support/sgemm_rate.c" -lopenblas || { fail "build sgemm_rate"; finish; }
./sgemm_rate 512 1536 576 "$THREADS" 5 >lin.json && ./sgemm_rate 512 4096 64 "$THREADS" 5 >att.json ||
  fail "sgemm_rate"
floor=$($PY - "$T" <<'PYEOF'
import json, sys
T, L, D, F, H, KV, HD = int(sys.argv[1]), 30, 576, 1536, 9, 3, 64
lin = 2.0 * T * L * (D * (2 * H * HD + 2 * KV * HD) + 3 * D * F)
att = 2.0 * L * H * HD * T * (T + 1)  # QK^T and PV over the causal triangle: 2 * HD * T(T+1)/2 each
g_lin, g_att = (json.load(open(f))["gflops"] * 1e9 for f in ("lin.json", "att.json"))
print("%.1f %.2f %.2f %.0f %.0f" % (lin / g_lin + att / g_att, lin * 1e-12, att * 1e-12, g_lin * 1e-9, g_att * 1e-9))
PYEOF
) || fail "floor"
read -r fl tf_lin tf_att gf_lin gf_att <<<"$floor"
ratio=$($PY -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$kv" "$lc")
to_floor=$($PY -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$kv" "$fl")
lc_floor=$($PY -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$lc" "$fl")
echo "bench gguf prefill: $T tokens, $THREADS threads: kvtool dump --gguf --queries ${kv} s (model load and dump write included), llama.cpp prefill ${lc} s (evaluation only), ratio ${ratio}"
echo "bench gguf prefill floor: ${tf_lin} TFLOP of projections at ${gf_lin} GFLOP/s + ${tf_att} TFLOP of attention at ${gf_att} GFLOP/s (sgemm, same threads) = ${fl} s; kvtool ${to_floor}x the floor, llama.cpp ${lc_floor}x"
$PY -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 180 else 1)" "$kv" || fail "kvtool took ${kv} s (target 180)"
$PY -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 2 else 1)" "$ratio" || fail "kvtool/llama.cpp = ${ratio} (target 2)"
finish
