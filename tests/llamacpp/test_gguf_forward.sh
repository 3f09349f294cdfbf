#!/usr/bin/env bash
# kvtool's GGUF forward pass (kvtool dump --gguf, lib/model) against real llama.cpp (node-llama-cpp
# 3.21.1, llama.cpp tag v0.4.0) and llama.cpp's own gguf-py (taken from the source bundle that
# node-llama-cpp ships):
#   1. the shared llama2.c models converted to GGUF dump the same K/V/Q as their llama2.c forward;
#   2. random-weight models in the shapes of SmolLM2 (llama), Llama 3 (GQA 4:1, rope_freqs) and
#      Qwen2.5 (qwen2: Q/K/V biases, NEOX RoPE, GQA 7:1), with weights f32, f16, bf16, q4_K, q6_K
#      (make_gguf_models.py) and q8_0, q4_0, q4_1, q5_1, Q4_K_M (llama.cpp's own quantizer), and a
#      SmolLM2-like model with gpt-2's BPE vocabulary: the dump of a quantized model equals, bit for
#      bit, the dump of its twin whose weights gguf-py dequantized (kvtool's dequantization is
#      ggml's);
#   3. llama.cpp evaluates each dump's tokens with an f32 cache and saves its state: its K/V equal
#      kvtool's within the tolerances below, its next-token distributions kvtool's, and its greedy
#      continuation kvtool's;
#   4. what the forward pass cannot run exactly is refused with a reason and leaves no output.
# Without node-llama-cpp the test is skipped (77) unless KVTOOL_REQUIRE_LLAMACPP=1 (CI).
source "${KVTOOL_SOURCE:?}/tests/llamacpp/lib.sh"
require_node
require_bundle
[ -e "$M/stories260K.bin" ] || unavailable "no $M/stories260K.bin"
git --git-dir=llama.git archive HEAD gguf-py | tar -x || { fail "gguf-py from the llama.cpp bundle"; finish; }
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
# Two sources of weights per shape: make_gguf_models.py writes f32, f16, bf16 and random q4_K / q6_K
# blocks (every bit pattern a block can hold); llama.cpp's own quantizer (llama_model_quantize, the
# call llama-quantize makes, from node-llama-cpp's prebuilt libllama) turns the f32 file into q8_0,
# q4_0, q4_1, q5_1 and Q4_K_M (q4_K and q6_K, with q5_0 and q8_0 where rows are not a multiple of
# 256, as in SmolLM2 and Qwen2.5). A SmolLM2-like model also comes with a real BPE vocabulary
# (gpt-2's, from llama.cpp's tokenizer tests), as f32 and Q4_K_M.
LIBDIR=$NLC/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
LIBLLAMA=$(ls "$LIBDIR"/libllama.v*.so 2>/dev/null | head -1)
[ -n "$LIBLLAMA" ] || unavailable "no prebuilt libllama in $LIBDIR (node-llama-cpp's linux-x64 binaries)"
git --git-dir=llama.git archive HEAD include ggml/include models/ggml-vocab-gpt-2.gguf | tar -x &&
  cc -O1 -Iinclude -Iggml/include "$KVTOOL_SOURCE/tests/support/llama_quantize.c" "$LIBLLAMA" -Wl,-rpath,"$LIBDIR" \
    -o llama_quantize || { fail "build llama_quantize against $LIBLLAMA"; finish; }
echo '[1, 5, 100, 200, 300, 17, 42, 99, 311, 400, 12, 7, 8, 9, 10, 11, 260, 261, 3, 4]' >prompt.json
$PY -c "import json, random; r = random.Random(3); print(json.dumps([1] + [r.randrange(3, 512) for _ in range(255)]))" >t256.json
SHAPES="smollm2 llama3 qwen2"
WRITTEN="f32 f16 bf16"
QUANTIZED="q8_0 q4_0 q4_1 q5_1 q4_k_m"
RANDOM_BLOCKS="q4_k q6_k"
MODELS=()  # name:weight type, for section 3
act_of() { case $1 in f32 | f16) echo exact ;; *) echo llama.cpp ;; esac; }
# dump_pair M WT [PROMPT OPTIONS...]: dump M (with queries) and M's f32 twin, which must be equal.
dump_pair() {
  local m=$1 wt=$2
  shift 2
  "$KVTOOL" dump --gguf $m.gguf "$@" --queries -o $m.h5 -q || { fail "dump $m"; return 1; }
  "$KVTOOL" dump --gguf $m.gguf "$@" --activations "$(act_of $wt)" -o $m.act.h5 -q || fail "dump $m --activations"
  # f16 weights: also with the inputs rounded to f16, as llama.cpp's CPU mul_mat does on some builds.
  [ $wt != f16 ] || "$KVTOOL" dump --gguf $m.gguf "$@" --activations llama.cpp -o $m.act16.h5 -q ||
    fail "dump $m --activations llama.cpp"
  if [ $wt != f32 ]; then
    "$KVTOOL" dump --gguf $m.twin.gguf "$@" --queries -o $m.twin.h5 -q || fail "dump $m twin"
    [ "$(max_rel $m.h5 $m.twin.h5)" = 0 ] || fail "$m: not gguf-py's dequantization ($(max_rel $m.h5 $m.twin.h5))"
  fi
  MODELS+=("$m:$wt")
}
for sh in $SHAPES; do
  for wt in $WRITTEN; do
    m=$sh-$wt twin=()
    [ $wt = f32 ] || twin=(--twin $m.twin.gguf)
    $PY "$HERE/make_gguf_models.py" --gguf-py gguf-py --shape $sh --wtype $wt -o $m.gguf "${twin[@]}" ||
      { fail "make $m"; continue; }
    dump_pair $m $wt --token-ids prompt.json --tokens 28
  done
  for wt in $QUANTIZED $RANDOM_BLOCKS; do
    case " $RANDOM_BLOCKS " in
      *" $wt "*)
        m=$sh-$wt
        $PY "$HERE/make_gguf_models.py" --gguf-py gguf-py --shape $sh --wtype $wt -o $m.gguf --twin $m.twin.gguf ||
          { fail "make $m"; continue; }
        dump_pair $m $wt --token-ids prompt.json --tokens 28
        continue
        ;;
    esac
    m=$sh-$wt
    ./llama_quantize $sh-f32.gguf $m.gguf $wt >/dev/null 2>&1 || { fail "llama.cpp's quantizer on $sh-f32 to $wt"; continue; }
    $PY "$HERE/dequant_twin.py" --gguf-py gguf-py $m.gguf $m.twin.gguf --types | sed "s/^/$m (llama.cpp's quantizer): /" ||
      { fail "twin of $m"; continue; }
    dump_pair $m $wt --token-ids prompt.json --tokens 28
  done
done
# The BPE model: kvtool's tokenizer gives llama.cpp's tokens for the prompt.
$PY "$HERE/make_gguf_models.py" --gguf-py gguf-py --shape smollm2 --wtype f32 --vocab-gguf models/ggml-vocab-gpt-2.gguf \
  -o bpe-f32.gguf || fail "make the BPE model"
./llama_quantize bpe-f32.gguf bpe-q4_k_m.gguf q4_k_m >/dev/null 2>&1 || fail "llama.cpp's quantizer on the BPE model"
$PY "$HERE/dequant_twin.py" --gguf-py gguf-py bpe-q4_k_m.gguf bpe-q4_k_m.twin.gguf || fail "twin of bpe-q4_k_m"
printf "Hello world, this is kvtool's BPE test: 12345 tokens, naïve café → 日本語." >bpe.txt
node "$HERE/next_token_probs.mjs" --model bpe-f32.gguf --text bpe.txt >bpe.tokens.json || fail "llama.cpp's tokens of the BPE prompt"
for wt in f32 q4_k_m; do dump_pair bpe-$wt $wt --prompt-file bpe.txt --tokens 40; done
$PY - bpe-f32.h5 <<'EOF' || fail "the BPE prompt: kvtool's tokens differ from llama.cpp's"
import h5py, json, sys
want = json.load(open("bpe.tokens.json"))["tokens"]
got = [int(t) for t in h5py.File(sys.argv[1], "r")["kv/tokens"][:len(want)]]
assert got == want, (got, want)
print("BPE prompt: %d tokens, the same as llama.cpp's" % len(want))
EOF
[ "$FAILS" = 0 ] || finish

# --- 3. llama.cpp's K/V (f32 cache), next-token distributions and greedy continuation ---------------
# Tolerances (max|diff| / max|x| per layer, the worst layer, K and V): f32 and f16 weights: the
# issue's 1e-4 (measured about 1e-6). bf16 and quantized weights: llama.cpp's CPU kernels round the
# activations (bf16; q8_0, q8_1 and q8_K blocks), which --activations llama.cpp mirrors for each
# product's input (layer 0 then agrees to about 5e-7); from layer 1 on, an input that differs from
# llama.cpp's by a rounding error can land on the other side of a rounding boundary and move by a
# whole step (docs/models.md). 3x the largest gap measured (bf16 2.4e-3, quantized 1.2e-2).
# f16 weights: ggml-cpu rounds an f16 product's input to f16 (its vec_dot_type), which one
# llama.cpp CPU build measurably did (an AVX2-only EPYC: 7.7e-4 to 9.4e-4 against exact inputs)
# and another did not (about 1e-6, AVX-512): kvtool's exact and f16-rounded inputs are both tried.
# Exact closer: the float gates. Rounded closer: like bf16, a rounded input can cross a rounding
# boundary from layer 1 on, so 3x the largest gap measured (4.4e-4: 1.3e-3) (docs/models.md).
declare -A TOL=([f32]=1e-4 [f16]=1e-4 [bf16]=7.2e-3)
for entry in "${MODELS[@]}"; do
  m=${entry%%:*} wt=${entry#*:}
  tol=${TOL[$wt]:-3.6e-2}
  tokens_json $m.act.h5 $m.tokens.json
  node "$HERE/write_states.mjs" --model $m.gguf --tokens $m.tokens.json --out-dir st.$m --configs f32 >/dev/null ||
    { fail "llama.cpp state run on $m"; continue; }
  "$KVTOOL" verify st.$m/f32.ggsq --gguf $m.gguf --source $m.act.h5 --tolerance 1 --json >v.json ||
    { fail "verify $m against its dump"; continue; }
  err=$($PY -c "import json; j = json.load(open('v.json')); print('%.3g' % max(j['max_rel_err_k'], j['max_rel_err_v']))")
  mode=$(act_of $wt)
  if [ $wt = f16 ]; then  # the closer of exact and f16-rounded inputs (see TOL)
    "$KVTOOL" verify st.$m/f32.ggsq --gguf $m.gguf --source $m.act16.h5 --tolerance 1 --json >v16.json ||
      { fail "verify $m against its f16-input dump"; continue; }
    err16=$($PY -c "import json; j = json.load(open('v16.json')); print('%.3g' % max(j['max_rel_err_k'], j['max_rel_err_v']))")
    echo "llama.cpp $m: K/V max rel $err with exact inputs, $err16 with f16 inputs"
    if below "$err16" "$err"; then err=$err16 mode=llama.cpp tol=1.3e-3; fi
  fi
  # What the quantization itself moves K/V (llama.cpp's quantizer's files against the f32 model they
  # came from, over the prompt's 20 rows): llama.cpp's and kvtool's K/V must differ by at most half.
  qmove=
  case " $QUANTIZED " in *" $wt "*) qmove=$(max_rel ${m%-*}-f32.h5 $m.h5 20) ;; esac
  echo "llama.cpp $m: K/V max rel $err (tolerance $tol)${qmove:+; the quantization moves K/V by $qmove}"
  below "$err" "$tol" || fail "$m: llama.cpp's K/V differ from kvtool's by $err"
  [ -z "$qmove" ] || below "$err" "$($PY -c "print($qmove / 2)")" ||
    fail "$m: llama.cpp's K/V differ from kvtool's by $err, not under half of what the quantization moves ($qmove)"
  # The state's queries, recomputed by the model once it recomputes the state's K.
  "$KVTOOL" import st.$m/f32.ggsq --gguf $m.gguf --queries -o imp.$m.h5 --json >imp.json -q ||
    { fail "import $m --queries"; continue; }
  $PY - imp.$m.h5 $m.h5 $wt $mode <<'EOF2' || fail "$m: imported queries"
import h5py, json, sys, numpy as np
imp, plain = (h5py.File(p, "r") for p in sys.argv[1:3])
assert json.load(open("imp.json"))["model_check"]["max_rel_err_k"] < 0.05
q, want = imp["kv/q"][:], plain["kv/q"][:]
assert q.shape == want.shape, (q.shape, want.shape)
assert list(imp["kv/q_positions"][:]) == list(range(q.shape[2]))
# Against kvtool's own dump of the same tokens: equal for f32 weights, and for f16 weights where
# llama.cpp multiplied them by exact inputs (mode exact: its K/V, which the import's queries attend
# over from layer 1 on, are then kvtool's). Otherwise llama.cpp's rounded inputs moved its K/V, and
# the import rounds activations as llama.cpp does while the plain dump does not.
err = float(np.abs(q - want).max() / np.abs(want).max())
assert err < 1e-5 or not (sys.argv[3] == "f32" or (sys.argv[3] == "f16" and sys.argv[4] == "exact")), err
EOF2
  # Next-token distributions at every position of a teacher-forced run (256 tokens; the BPE models'
  # 50,257-token vocabulary: the f32 model's 40): total variation distance to llama.cpp's and top-1
  # agreement. Float weights: TV <= 1e-3 and every top-1 equal (the issue's bar). Rounded weights:
  # kvtool must stay closer to llama.cpp than the weights' own rounding moves llama.cpp (its run of
  # the f32 model the quantized one came from): at most half that TV, and at least as many top-1s.
  # The random q4_K/q6_K blocks come from no f32 model: their bar is what llama.cpp's Q4_K_M moves
  # the same shape.
  toks=t256.json
  case $m in bpe-*) toks=bpe-f32.tokens.json ;; esac
  node "$HERE/next_token_probs.mjs" --model $m.gguf --tokens $toks >lp.$m.json || { fail "llama.cpp probabilities $m"; continue; }
  "$BIN/kvtool_next_token_probs" $m.gguf $toks "$mode" >kp.json || { fail "kvtool probabilities $m"; continue; }
  ref=lp.$m.json
  case " $RANDOM_BLOCKS " in *" $wt "*) ref=lp.${m%-*}-q4_k_m.json ;; esac
  $PY - $m $wt lp.${m%-*}-f32.json $ref <<'EOF2' || fail "$m: next-token distributions"
import json, sys, numpy as np
m, wt, f32, rounded = sys.argv[1:5]
a = np.array(json.load(open("lp.%s.json" % m))["probs"])
b = np.array(json.load(open("kp.json"))["probs"])
assert a.shape == b.shape and a.shape[0] in (40, 256), (a.shape, b.shape)
tv, top1 = 0.5 * np.abs(a - b).sum(1).max(), int((a.argmax(1) == b.argmax(1)).sum())
line = "llama.cpp %s: next-token max TV %.2g, top-1 agreement %d/%d" % (m, tv, top1, a.shape[0])
if wt in ("f32", "f16"):
    print(line)
    assert tv <= 1e-3 and top1 == a.shape[0], (tv, top1)
else:
    r, q = (np.array(json.load(open(p))["probs"]) for p in (f32, rounded))
    qtv, qtop1 = 0.5 * np.abs(q - r).sum(1).max(), int((q.argmax(1) == r.argmax(1)).sum())
    print(line + "; the weights' rounding moves llama.cpp by TV %.2g, top-1 %d/%d" % (qtv, qtop1, a.shape[0]))
    assert tv <= qtv / 2 and top1 >= qtop1, (tv, top1, qtv, qtop1)
EOF2
done
# Greedy decoding from the prompt: llama.cpp continues as kvtool did.
for m in smollm2-f32 llama3-f32 qwen2-f32; do
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
