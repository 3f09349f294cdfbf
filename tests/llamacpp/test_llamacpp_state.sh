#!/usr/bin/env bash
# kvtool's llama.cpp state reader against REAL llama.cpp (node-llama-cpp 3.21.1, llama.cpp tag
# v0.4.0, formats/llama-state.md): the shared llama2.c models are converted to GGUF
# (llama2c_to_gguf.py), kvtool dumps their K/V with its own forward pass, llama.cpp evaluates the
# dump's own tokens and saves its sequence state in several cache configurations
# (write_states.mjs), and `kvtool import/inspect/verify` of those files must give back the dump's
# K/V within tolerances measured on these files. Also: a whole-context session file composed from
# two sequences (make_session.py), the Hadamard rotation of quantized caches, a context-shifted
# cache (cells out of order, a gap in the positions), damaged files, and llama.cpp's greedy
# continuation equal to the dump's.
# Without node-llama-cpp (.ci/install-deps installs it) the test is skipped (77), unless
# KVTOOL_REQUIRE_LLAMACPP=1 (CI) makes that a failure.
source "${KVTOOL_SOURCE:?}/tests/llamacpp/lib.sh"
CHECK="$PY $HERE/check_states.py"
require_node

# --- models: GGUF conversion (deterministic) and kvtool's own dumps --------------------------------
$PY "$HERE/llama2c_to_gguf.py" "$M/stories260K.bin" --tokenizer "$M/tok512.bin" -o s.gguf || fail "convert stories260K"
$PY "$HERE/llama2c_to_gguf.py" "$M/stories260K.bin" --tokenizer "$M/tok512.bin" -o s2.gguf
cmp -s s.gguf s2.gguf || fail "the GGUF converter is not deterministic"
$PY "$HERE/llama2c_to_gguf.py" "$M/cheaders.bin" --tokenizer "$M/tok128c.bin" -o c.gguf || fail "convert cheaders"
$PY "$HERE/llama2c_to_gguf.py" "$M/babyllama361.bin" -o b.gguf || fail "convert babyllama361"

S_PROMPT="Once upon a time"
C_PROMPT=$(head -c 200 "$M/cheaders.prompt.txt")
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "$S_PROMPT" --tokens 300 -o s.h5 -q || fail "dump stories260K"
"$KVTOOL" dump --llama2c "$M/cheaders.bin" --tokenizer "$M/tok128c.bin" --prompt "$C_PROMPT" --tokens 256 -o c.h5 -q || fail "dump cheaders"
"$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 96 -o b.h5 -q || fail "dump babyllama361"
for m in s c b; do $CHECK tokens $m.h5 $m.tokens.json || fail "tokens of $m.h5"; done
[ "$FAILS" = 0 ] || finish

# --- llama.cpp: greedy continuation from the prompt equals the dump's ------------------------------
# greedy NAME PROMPT_TOKENS TOTAL: llama.cpp continues the dump's first PROMPT_TOKENS tokens (BOS
# and the teacher-forced prompt) greedily up to TOTAL; kvtool's forward pass chose the same tokens.
greedy() {
  [ "$2" -ge 1 ] && [ "$2" -lt "$3" ] || { fail "greedy $1: prompt of $2 tokens"; return; }
  node "$HERE/write_states.mjs" --model $1.gguf --tokens $1.tokens.json --greedy $(($3 - $2)) --prefix $2 >$1.greedy.json ||
    { fail "llama.cpp greedy run on $1.gguf"; return; }
  $CHECK greedy $1.h5 $2 $1.greedy.json || fail "llama.cpp's greedy continuation of $1 differs from the dump's"
}
greedy s "$($CHECK prompt-len "$M/tok512.bin" "$S_PROMPT")" 300
greedy c "$($CHECK prompt-len "$M/tok128c.bin" "$C_PROMPT")" 256
greedy b 1 96

# --- llama.cpp: the dump's tokens, saved in every configuration ------------------------------------
mkdir -p st ct
node "$HERE/write_states.mjs" --model s.gguf --tokens s.tokens.json --out-dir st --configs f32,f32_fa,f16,bf16,shift,two_seq ||
  fail "llama.cpp state runs on stories260K"
node "$HERE/write_states.mjs" --model c.gguf --tokens c.tokens.json --out-dir ct --configs f32,f32_fa,f16,bf16,q8_0,q8_0_norot ||
  fail "llama.cpp state runs on cheaders"
$PY "$HERE/make_session.py" st/two_seq.seq0.ggsq st/two_seq.seq1.ggsq -o st/two.ggsn || fail "make_session"
[ "$FAILS" = 0 ] || finish

# Tolerances: max|diff| / max|x| over all heads and rows of a layer, the largest layer, between the
# import and kvtool's float32 llama2.c dump. Each is 3x the value measured on these files with
# llama.cpp v0.4.0's CPU build (in parentheses, K then V): f32 without flash attention is float32
# rounding; flash attention computes in f16 on the CPU, so layers after the first drift; f16, bf16
# and q8_0 add their own rounding.
declare -A TOL=(
  [s.f32]="1.6e-6 3.6e-6"     # (5.1e-7 1.2e-6)
  [s.f32_fa]="2.3e-3 6.1e-3"  # (7.6e-4 2.0e-3)
  [s.f16]="2.9e-3 7.7e-3"     # (9.4e-4 2.6e-3)
  [s.bf16]="2.4e-2 5.1e-2"    # (7.8e-3 1.7e-2)
  [s.shift]="1.7e-6 3.0e-6"   # (5.4e-7 9.7e-7; layer 0 of all cells, every layer of the 150 kept)
  [c.f32]="2.7e-5 2.4e-5"     # (8.9e-6 7.7e-6)
  [c.f32_fa]="5.7e-4 1.5e-3"  # (1.9e-4 5.0e-4)
  [c.f16]="1.6e-3 1.6e-3"     # (5.0e-4 5.3e-4)
  [c.bf16]="1.1e-2 1.2e-2"    # (3.4e-3 4.0e-3)
  [c.q8_0]="2.5e-2 3.5e-2"    # (8.1e-3 1.2e-2; stored rotated, read back with the same Hadamard)
  [c.q8_0_norot]="2.3e-2 3.2e-2"  # (7.7e-3 1.1e-2; LLAMA_ATTN_ROT_DISABLE=1)
)
TOL[s.two_seq]=${TOL[s.f32]}

# import_check MODEL CONFIG STATE [SEQ] [import options...]: import, compare with the dump.
import_check() {
  local m=$1 cfg=$2 state=$3 seq=$4; shift 4
  local tol=(${TOL[$m.$cfg]}) out=imp.$m.$cfg${seq:+.$seq}.h5 dir=${m}t
  "$KVTOOL" import "$state" --gguf $m.gguf ${seq:+--seq-id $seq} "$@" -o $out -q || { fail "import $state $*"; return; }
  $CHECK compare --dump $m.h5 --imported $out --desc $dir/$cfg.json ${seq:+--seq $seq} --expect-tokens \
    --tol-k ${tol[0]} --tol-v ${tol[1]} --label "$m $cfg${seq:+ seq $seq}" || fail "$state: import differs from the dump"
}
for cfg in f32 f32_fa f16 bf16 shift; do import_check s $cfg st/$cfg.ggsq ""; done
for cfg in f32 f32_fa f16 bf16 q8_0; do import_check c $cfg ct/$cfg.ggsq ""; done
import_check c q8_0_norot ct/q8_0_norot.ggsq "" --llama-rotation off
import_check s two_seq st/two_seq.seq0.ggsq 0
import_check s two_seq st/two_seq.seq1.ggsq 1

# The rotation matters: read the other way, the quantized caches are far off (compare exits 3).
"$KVTOOL" import ct/q8_0.ggsq --gguf c.gguf --llama-rotation off -o wrongrot1.h5 -q || fail "import --llama-rotation off"
"$KVTOOL" import ct/q8_0_norot.ggsq --gguf c.gguf -o wrongrot2.h5 -q || fail "import q8_0_norot (auto)"
for f in wrongrot1 wrongrot2; do
  expect_exit 3 $CHECK compare --dump c.h5 --imported $f.h5 --desc ct/q8_0.json --tol-k 0.1 --tol-v 0.1 --label $f
done

# --- the composed session file (ggsn v10): each sequence equals its own ggsq file -----------------
for seq in 0 1; do
  "$KVTOOL" import st/two.ggsn --gguf s.gguf --seq-id $seq -o ggsn.$seq.h5 -q || { fail "import ggsn --seq-id $seq"; continue; }
  $PY -c "
import h5py, numpy as np, sys
a, b = h5py.File(sys.argv[1], 'r'), h5py.File(sys.argv[2], 'r')
for n in ('kv/k', 'kv/v', 'kv/positions'):
    assert np.array_equal(a[n][:], b[n][:]), n
" ggsn.$seq.h5 imp.s.two_seq.$seq.h5 || fail "ggsn sequence $seq differs from the ggsq import"
done
expect_reason 2 USAGE "$KVTOOL" import st/two.ggsn --gguf s.gguf -o two.h5
absent two.h5

# --- inspect and verify --------------------------------------------------------------------------
# inspect_field MODEL STATE EXPR WANT [options]: EXPR is Python over d, inspect's JSON.
inspect_field() {
  local m=$1 state=$2 expr=$3 want=$4; shift 4
  "$KVTOOL" inspect "$state" --gguf $m.gguf --json "$@" >insp.json || { fail "inspect $state"; return; }
  local got; got=$($PY -c "import json,sys; d=json.load(open('insp.json')); print($expr)")
  [ "$got" = "$want" ] || fail "inspect $state: $expr is $got, want $want"
}
for cfg in f32 f16 bf16 two_seq.seq0; do inspect_field s st/$cfg.ggsq "d['v_trans']" True; done
inspect_field s st/f32_fa.ggsq "d['v_trans']" False
inspect_field s st/f16.ggsq "d['layers'][0]['k_type']" f16
inspect_field s st/bf16.ggsq "d['layers'][4]['v_type']" bf16
inspect_field s st/shift.ggsq "[d[k] for k in ('cells', 'cells_in_order', 'gaps', 'pos_max')]" "[180, False, 10, 189]"
inspect_field s st/two.ggsn "[d[k] for k in ('magic', 'version', 'streams')]" "['ggsn', 10, 2]" --seq-id 1
inspect_field c ct/q8_0.ggsq "[d['layers'][0]['k_type'], d['rotated']]" "['q8_0', True]"
inspect_field c ct/q8_0_norot.ggsq "d['rotated']" False --llama-rotation off

# verify --source, with its default tolerance and with 3x what its own metric (relative to max|x|
# of each layer and kv head, so larger than the per-layer figures above) measured here (in
# parentheses, the larger of K and V).
declare -A VTOL=(
  [st/f32]=4.2e-6 [st/two_seq.seq1]=4.2e-6  # (1.4e-6)
  [st/f32_fa]=7.1e-3  # (2.3e-3)
  [st/f16]=1.2e-2     # (3.7e-3)
  [st/bf16]=8.1e-2    # (2.7e-2)
  [ct/f32]=2.7e-5     # (8.9e-6)
  [ct/f32_fa]=1.5e-3  # (5.0e-4)
  [ct/f16]=1.6e-3     # (5.3e-4)
  [ct/bf16]=1.2e-2    # (4.0e-3)
  [ct/q8_0]=3.5e-2    # (1.2e-2)
  [ct/q8_0_norot]=3.2e-2  # (1.1e-2)
)
for f in "${!VTOL[@]}"; do
  m=${f:0:1} rot=()
  [ $f = ct/q8_0_norot ] && rot=(--llama-rotation off)
  expect_exit 0 "$KVTOOL" verify $f.ggsq --gguf $m.gguf --source $m.h5 "${rot[@]}" --json
  expect_exit 0 "$KVTOOL" verify $f.ggsq --gguf $m.gguf --source $m.h5 "${rot[@]}" --tolerance ${VTOL[$f]} --json
done
# The shifted cache is not the dump (moved keys, a gap): verify against it must fail.
expect_exit 0 "$KVTOOL" verify st/shift.ggsq --gguf s.gguf --json
expect_reason 1 PAYLOAD_MISMATCH "$KVTOOL" verify st/shift.ggsq --gguf s.gguf --source s.h5

# Damaged copies: cut in the middle of the K data; one K value (layer 0, row 7) made huge.
size=$(stat -c %s st/f32.ggsq)
head -c $((size / 2)) st/f32.ggsq >cut.ggsq
expect_exit 1 "$KVTOOL" verify cut.ggsq --gguf s.gguf --source s.h5 --json
contains out '"ok": false'
expect_exit 1 "$KVTOOL" import cut.ggsq --gguf s.gguf -o cut.h5
absent cut.h5
cp st/f32.ggsq bad.ggsq
# ggsq v3: 12-byte header, 300 tokens, n_stream, cell_count, 300 cells of 12 bytes (pos, n_seq,
# seq id), v_trans, n_layer, layer 0's type and row bytes (128 = 4 heads x 8 x f32): row 7 after.
off=$((12 + 4 * 300 + 4 + 4 + 12 * 300 + 8 + 12 + 7 * 128))
printf '\x7f\x7f\x7f\x7f' | dd of=bad.ggsq bs=1 seek=$off conv=notrunc status=none
cmp -s bad.ggsq st/f32.ggsq && fail "the corruption did not change the file"
expect_reason 1 PAYLOAD_MISMATCH "$KVTOOL" verify bad.ggsq --gguf s.gguf --source s.h5
# A header that claims 2^31-1 tokens (nothing is allocated for it), and the wrong model's GGUF.
cp st/f32.ggsq lie.ggsq
printf '\xff\xff\xff\x7f' | dd of=lie.ggsq bs=1 seek=8 conv=notrunc status=none
expect_reason 1 TRUNCATED "$KVTOOL" verify lie.ggsq --gguf s.gguf
expect_reason 1 SHAPE_MISMATCH "$KVTOOL" import st/f32.ggsq --gguf c.gguf -o wrong.h5
absent wrong.h5
finish
