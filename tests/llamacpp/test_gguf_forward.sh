#!/usr/bin/env bash
# kvtool's GGUF forward pass (kvtool dump --gguf, lib/model) against real llama.cpp (node-llama-cpp
# 3.21.1, llama.cpp tag v0.4.0) and llama.cpp's own gguf-py (taken from the source bundle that
# node-llama-cpp ships):
#   1. the shared llama2.c models converted to GGUF dump the same K/V/Q as their llama2.c forward;
#   2. random-weight models in the shapes of SmolLM2 (llama), Llama 3 (GQA 4:1, rope_freqs) and
#      Qwen2.5 (qwen2: Q/K/V biases, NEOX RoPE, GQA 7:1), each with weights f32, f16, bf16, q8_0,
#      q4_0, q4_K and q6_K (make_gguf_models.py): the dump of a quantized model equals, bit for
#      bit, the dump of its twin whose weights gguf-py dequantized (kvtool's dequantization is
#      ggml's);
#   3. llama.cpp evaluates each dump's tokens with an f32 cache and saves its state: its K/V equal
#      kvtool's within the tolerances below, and llama.cpp's greedy continuation equals kvtool's;
#   4. what the forward pass cannot run exactly is refused with a reason and leaves no output.
# Without node-llama-cpp the test is skipped (77) unless KVTOOL_REQUIRE_LLAMACPP=1 (CI).
source "${KVTOOL_SOURCE:?}/tests/cli/lib.sh"
HERE=$KVTOOL_SOURCE/tests/llamacpp
PY=/usr/bin/python3
M=$SHARED/models
unavailable() {
  if [ "${KVTOOL_REQUIRE_LLAMACPP:-0}" = 1 ]; then echo "FAIL: $* (KVTOOL_REQUIRE_LLAMACPP=1)" >&2; exit 1; fi
  echo "skipped: $*"
  exit 77
}
NLC=${KVTOOL_NODE_LLAMA_CPP:-${KVTOOL_NODE_CACHE:-$HOME/.cache/kvtool/node-llama-cpp-3.21.1}}
export KVTOOL_NODE_LLAMA_CPP=$NLC
BUNDLE=$NLC/node_modules/node-llama-cpp/llama/gitRelease.bundle
command -v node >/dev/null || unavailable "no node (Node.js >= 20)"
[ -f "$BUNDLE" ] || unavailable "no llama.cpp source bundle at $BUNDLE (.ci/install-deps installs node-llama-cpp)"
[ -e "$M/stories260K.bin" ] || unavailable "no $M/stories260K.bin"
git clone -q --bare "$BUNDLE" llama.git && git --git-dir=llama.git archive HEAD gguf-py | tar -x ||
  { fail "gguf-py from the llama.cpp bundle"; finish; }
# max_rel A.h5 B.h5 [ROWS]: the largest over layers and K, V (and Q when both have it) of
# max|a - b| / max|a| within a layer, over the first ROWS rows (default all).
max_rel() {
  $PY - "$@" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
rows = int(sys.argv[3]) if len(sys.argv) > 3 else None
worst = 0.0
for n in ("k", "v", "q"):
    if n not in a["kv"] or n not in b["kv"]:
        continue
    x, y = a["kv"][n][:, :, :rows].astype(np.float64), b["kv"][n][:, :, :rows].astype(np.float64)
    for l in range(x.shape[0]):
        worst = max(worst, float(np.abs(x[l] - y[l]).max() / max(np.abs(x[l]).max(), 1e-30)))
print("%.3g" % worst)
EOF
}
below() { $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$1" "$2"; }
tokens_json() { $PY -c "import h5py, json, sys; print(json.dumps([int(t) for t in h5py.File(sys.argv[1])['kv/tokens'][:]]))" "$1" >"$2"; }

# --- 1. the shared llama2.c models as GGUF: the same forward pass ---------------------------------
$PY "$HERE/llama2c_to_gguf.py" "$M/stories260K.bin" --tokenizer "$M/tok512.bin" -o s.gguf || fail "convert stories260K"
$PY "$HERE/llama2c_to_gguf.py" "$M/cheaders.bin" --tokenizer "$M/tok128c.bin" -o c.gguf || fail "convert cheaders"
$PY "$HERE/llama2c_to_gguf.py" "$M/babyllama361.bin" -o b.gguf || fail "convert babyllama361"
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Once upon a time" --tokens 256 \
  --queries -o s.h5 -q || fail "dump stories260K"
"$KVTOOL" dump --llama2c "$M/cheaders.bin" --tokens 200 --queries -o c.h5 -q || fail "dump cheaders"
"$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 96 --queries -o b.h5 -q || fail "dump babyllama361"
for m in s c b; do
  # The prompt's first 8 tokens, then greedy: kvtool's GGUF pass continues as its llama2.c pass did.
  $PY -c "import h5py, json, sys; print(json.dumps([int(t) for t in h5py.File(sys.argv[1])['kv/tokens'][:8]]))" $m.h5 >$m.prompt.json
  T=$($PY -c "import h5py, sys; print(h5py.File(sys.argv[1])['kv/tokens'].shape[0])" $m.h5)
  "$KVTOOL" dump --gguf $m.gguf --token-ids $m.prompt.json --tokens "$T" --queries -o $m.gguf.h5 -q || fail "dump --gguf $m"
  err=$(max_rel $m.h5 $m.gguf.h5)
  echo "shared model $m: GGUF against llama2.c forward, max rel $err"
  below "$err" 1e-5 || fail "$m: the GGUF forward differs from the llama2.c forward by $err"
  $PY -c "import h5py, sys; a, b = (h5py.File(p)['kv/tokens'][:] for p in sys.argv[1:]); sys.exit(0 if (a == b).all() else 1)" \
    $m.h5 $m.gguf.h5 || fail "$m: greedy tokens of the GGUF pass differ from the llama2.c pass"
done
"$KVTOOL" dump --gguf s.gguf --tokens-from s.h5 -o from.h5 -q || fail "dump --tokens-from a dump"
# The GGUF's own tokenizer (SentencePiece, from the llama2.c vocabulary) gives the llama2.c
# tokenizer's ids, BOS first, and the same greedy continuation.
"$KVTOOL" dump --gguf s.gguf --prompt "Once upon a time" --tokens 256 -o prompt.h5 -q || fail "dump --gguf --prompt"
printf 'Once upon a time' >prompt.txt
"$KVTOOL" dump --gguf s.gguf --prompt-file prompt.txt --tokens 256 -o promptf.h5 -q || fail "dump --gguf --prompt-file"
$PY -c "import h5py, sys; a, b, c = (h5py.File(p)['kv/tokens'][:] for p in sys.argv[1:]); sys.exit(0 if (a == b).all() and (a == c).all() else 1)" \
  s.h5 prompt.h5 promptf.h5 || fail "--prompt through the GGUF tokenizer differs from the llama2.c tokenizer's dump"
[ "$(max_rel s.h5 from.h5)" = 0 ] || below "$(max_rel s.h5 from.h5)" 1e-5 || fail "--tokens-from differs"

# eval-decode --gguf: every row selected is dense decoding, exactly.
"$KVTOOL" build pq s.gguf.h5 --prefix 192 -o s.pq.kvi -q || fail "build pq on the GGUF dump"
"$KVTOOL" eval-decode s.pq.kvi --gguf s.gguf --source s.gguf.h5 --steps 16 --budget 100% --budget 0.1 --json -q >ed.json ||
  fail "eval-decode --gguf"
$PY -c "
import json, sys
r = [x for x in json.load(open('ed.json'))['results'] if x['budget'] == 1.0]
sys.exit(0 if len(r) == 1 and r[0]['mean_kl'] == 0 and r[0]['top1_agreement'] == 1 else 'eval-decode 100%%: %s' % r)" ||
  fail "eval-decode --gguf at 100 % is not dense decoding"
expect_reason 1 MODEL_MISMATCH "$KVTOOL" eval-decode s.pq.kvi --gguf c.gguf --source s.gguf.h5 --steps 4

# --- 2. random-weight architectures: dequantization is gguf-py's, bit for bit -----------------------
echo '[1, 5, 100, 200, 300, 17, 42, 99, 311, 400, 12, 7, 8, 9, 10, 11, 260, 261, 3, 4]' >prompt.json
$PY -c "import json, random; r = random.Random(3); print(json.dumps([1] + [r.randrange(3, 512) for _ in range(255)]))" >t256.json
SHAPES="smollm2 llama3 qwen2"
TYPES="f32 f16 bf16 q8_0 q4_0 q4_k q6_k"
for sh in $SHAPES; do
  for wt in $TYPES; do
    m=$sh-$wt twin=()
    [ $wt = f32 ] || twin=(--twin $m.twin.gguf)
    $PY "$HERE/make_gguf_models.py" --gguf-py gguf-py --shape $sh --wtype $wt -o $m.gguf "${twin[@]}" ||
      { fail "make $m"; continue; }
    act=exact
    case $wt in f32 | f16) ;; *) act=llama.cpp ;; esac
    "$KVTOOL" dump --gguf $m.gguf --token-ids prompt.json --tokens 28 --queries -o $m.h5 -q || { fail "dump $m"; continue; }
    "$KVTOOL" dump --gguf $m.gguf --token-ids prompt.json --tokens 28 --activations $act -o $m.act.h5 -q ||
      fail "dump $m --activations $act"
    if [ $wt != f32 ]; then
      "$KVTOOL" dump --gguf $m.twin.gguf --token-ids prompt.json --tokens 28 --queries -o $m.twin.h5 -q || fail "dump $m twin"
      [ "$(max_rel $m.h5 $m.twin.h5)" = 0 ] || fail "$m: not gguf-py's dequantization ($(max_rel $m.h5 $m.twin.h5))"
    fi
  done
done
[ "$FAILS" = 0 ] || finish

# --- 3. llama.cpp's K/V (f32 cache) and greedy continuation ----------------------------------------
# Tolerances (max|diff| / max|x| per layer, the worst layer, K and V): f32 and f16 weights: the
# issue's 1e-4 (measured about 1e-6). bf16 and quantized weights: llama.cpp's CPU kernels round the
# activations (bf16; q8_0 and q8_K blocks), which --activations llama.cpp mirrors for each product's
# input (layer 0 then agrees to about 5e-7); 3x the largest measured gap of the later layers
# (bf16 2.4e-3, quantized 1.2e-2), which docs/models.md reports next to what the weights'
# quantization itself moves K/V by.
declare -A TOL=([f32]=1e-4 [f16]=1e-4 [bf16]=7.2e-3 [q8_0]=3.6e-2 [q4_0]=3.6e-2 [q4_k]=3.6e-2 [q6_k]=3.6e-2)
for sh in $SHAPES; do
  for wt in $TYPES; do
    m=$sh-$wt
    tokens_json $m.act.h5 $m.tokens.json
    node "$HERE/write_states.mjs" --model $m.gguf --tokens $m.tokens.json --out-dir st.$m --configs f32 >/dev/null ||
      { fail "llama.cpp state run on $m"; continue; }
    "$KVTOOL" verify st.$m/f32.ggsq --gguf $m.gguf --source $m.act.h5 --tolerance 1 --json >v.json ||
      { fail "verify $m against its dump"; continue; }
    err=$($PY -c "import json; j = json.load(open('v.json')); print('%.3g' % max(j['max_rel_err_k'], j['max_rel_err_v']))")
    echo "llama.cpp $m: K/V max rel $err (tolerance ${TOL[$wt]})"
    below "$err" "${TOL[$wt]}" || fail "$m: llama.cpp's K/V differ from kvtool's by $err"
    # The state's queries, recomputed by the model once it recomputes the state's K.
    "$KVTOOL" import st.$m/f32.ggsq --gguf $m.gguf --queries -o imp.$m.h5 --json >imp.json -q ||
      { fail "import $m --queries"; continue; }
    $PY - imp.$m.h5 $m.h5 $wt <<'EOF2' || fail "$m: imported queries"
import h5py, json, sys, numpy as np
imp, plain = (h5py.File(p, "r") for p in sys.argv[1:3])
assert json.load(open("imp.json"))["model_check"]["max_rel_err_k"] < 0.05
q, want = imp["kv/q"][:], plain["kv/q"][:]
assert q.shape == want.shape, (q.shape, want.shape)
assert list(imp["kv/q_positions"][:]) == list(range(q.shape[2]))
# Against kvtool's own dump of the same tokens: equal for float weights; for rounded weights the
# import rounds activations as llama.cpp does, the plain dump does not.
err = float(np.abs(q - want).max() / np.abs(want).max())
assert err < 1e-5 or sys.argv[3] not in ("f32", "f16"), err
EOF2
  done
  # Next-token distributions at every position of a 256-token run, teacher forced: total variation
  # distance to llama.cpp's and top-1 agreement (float weights: TV <= 1e-3 and every top-1 equal).
  for wt in $TYPES; do
    m=$sh-$wt act=exact
    case $wt in f32 | f16) ;; *) act=llama.cpp ;; esac
    node "$HERE/next_token_probs.mjs" --model $m.gguf --tokens t256.json >lp.json || { fail "llama.cpp probabilities $m"; continue; }
    "$BIN/kvtool_next_token_probs" $m.gguf t256.json $act >kp.json || { fail "kvtool probabilities $m"; continue; }
    $PY - $m $wt <<'EOF2' || fail "$m: next-token distributions"
import json, sys, numpy as np
a = np.array(json.load(open("lp.json"))["probs"])
b = np.array(json.load(open("kp.json"))["probs"])
assert a.shape == b.shape == (256, a.shape[1]), (a.shape, b.shape)
tv, top1 = 0.5 * np.abs(a - b).sum(1).max(), (a.argmax(1) == b.argmax(1)).mean()
print("llama.cpp %s: next-token max TV %.2g, top-1 agreement %.4f, mean top probability %.3f" % (sys.argv[1], tv, top1, a.max(1).mean()))
if sys.argv[2] in ("f32", "f16"):
    assert tv <= 1e-3 and top1 == 1, (tv, top1)
else:
    assert tv <= 0.2 and top1 >= 0.95, (tv, top1)
EOF2
  done
  # Greedy decoding from the prompt: llama.cpp continues as kvtool did.
  m=$sh-f32
  node "$HERE/write_states.mjs" --model $m.gguf --tokens $m.tokens.json --greedy 8 --prefix 20 >g.json ||
    { fail "llama.cpp greedy run on $m"; continue; }
  $PY -c "
import json, sys
want = json.load(open(sys.argv[1]))[20:28]
got = json.load(open(sys.argv[2]))['tokens']
sys.exit(0 if got == want else 'greedy: llama.cpp %s, kvtool %s' % (got, want))" $m.tokens.json g.json || fail "$m: greedy continuation"
done

# A state is checked against the model that claims it: another model's (same shape, other weights)
# is MODEL_MISMATCH, and nothing is written.
$PY "$HERE/make_gguf_models.py" --gguf-py gguf-py --shape llama3 --wtype f32 --seed 2 -o other.gguf || fail "make other"
expect_reason 1 MODEL_MISMATCH "$KVTOOL" import st.llama3-f32/f32.ggsq --gguf other.gguf --queries -o other.h5
[ ! -e other.h5 ] || fail "a refused --queries import left other.h5"
expect_reason 1 MODEL_MISMATCH "$KVTOOL" verify st.llama3-f32/f32.ggsq --gguf other.gguf --model-check
expect_exit 0 "$KVTOOL" verify st.llama3-f32/f32.ggsq --gguf llama3-f32.gguf --model-check --json
contains "$WORK/out" '"model_check"'
expect_reason 2 USAGE "$KVTOOL" verify s.h5 --model-check

# --- 4. refusals: reason, exit code, no output --------------------------------------------------------
$PY - <<'EOF' || fail "make hostile GGUFs"
import struct
src = open("s.gguf", "rb").read()
open("trunc.gguf", "wb").write(src[: len(src) - 1000])
open("arch.gguf", "wb").write(src.replace(b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00gemma", 1))
EOF
expect_reason 1 TRUNCATED "$KVTOOL" dump --gguf trunc.gguf --token-ids prompt.json -o out.h5
expect_reason 1 UNSUPPORTED_MODEL "$KVTOOL" dump --gguf arch.gguf --token-ids prompt.json -o out.h5
echo '[1, 999999]' >bad.json
expect_reason 2 USAGE "$KVTOOL" dump --gguf s.gguf --token-ids bad.json -o out.h5
expect_reason 2 USAGE "$KVTOOL" dump --gguf s.gguf --llama2c "$M/stories260K.bin" --tokens 4 -o out.h5
expect_reason 2 USAGE "$KVTOOL" dump --gguf s.gguf -o out.h5
[ ! -e out.h5 ] || fail "a refused dump left out.h5"
finish
