#!/usr/bin/env bash
# A prompt's blocks in cache stores (formats/cache-stores.md, "A prompt's blocks"): real llama.cpp
# (node-llama-cpp 3.21.1) evaluates a prompt on stories260K and saves its f16 cache; its K/V are laid
# out as a vLLM store (blocks of 16, PYTHONHASHSEED 0) and an SGLang store (pages of 8 over two
# tensor-parallel ranks) under the names those stacks compute for the prompt's tokens
# (tests/cli/make_store_fixtures.py, with CPython's own pickle and hashlib). `kvtool verify STORE
# --model M.gguf --token-ids` must find every block and find them equal to its forward pass; a
# block of another position, layer, rank or prompt must fail naming the block and the first
# position; `kvtool import STORE` must give back llama.cpp's rows exactly.
source "${KVTOOL_SOURCE:?}/tests/llamacpp/lib.sh"
require_node
FIX="$KVTOOL_SOURCE/tests/cli/make_store_fixtures.py"
$PY "$HERE/llama2c_to_gguf.py" "$M/stories260K.bin" --tokenizer "$M/tok512.bin" -o s.gguf || fail "convert stories260K"
"$KVTOOL" dump --gguf s.gguf --prompt "Once upon a time" --tokens 64 -o s.h5 -q || fail "dump"
"$KVTOOL" dump --gguf s.gguf --prompt "Lily and Ben went to the park" --tokens 64 -o other.h5 -q || fail "dump"
for d in s other; do
  $PY -c "import h5py, json; json.dump([int(t) for t in h5py.File('$d.h5')['kv/tokens']], open('$d.tokens.json', 'w'))"
  mkdir -p "st_$d" && node "$HERE/write_states.mjs" --model s.gguf --tokens "$d.tokens.json" --out-dir "st_$d" --configs f16 ||
    fail "llama.cpp state of $d"
  "$KVTOOL" import "st_$d/f16.ggsq" --gguf s.gguf -o "llama_$d.h5" -q || fail "import the state of $d"
done
[ "$FAILS" = 0 ] || finish
mkdir other && (cd other && $PY "$FIX" --from-dump ../llama_other.h5 stories 0) || fail "stores of the other prompt"
$PY "$FIX" --from-dump llama_s.h5 stories 0 || fail "stores of the prompt"
V=(--model s.gguf --token-ids prompt_tokens.json --hash-seed 0)
S=(--model s.gguf --token-ids prompt_tokens.json --block-tokens 8 --store-dtype f16)

# content STORE FOUND [OPTIONS]: verify passes and finds FOUND blocks.
content() {
  local store=$1 found=$2
  shift 2
  expect_exit 0 "$KVTOOL" verify "$store" "$@" --json
  [ "$(json_get "$WORK/out" '["content"]["blocks_found"]')" = "$found" ] ||
    fail "verify $store: $(json_get "$WORK/out" '["content"]["blocks_found"]') blocks found, expected $found"
}
content vllm_p 4 "${V[@]}"
content sglang_p 8 "${S[@]}"
# A prompt longer than the store holds: its leading blocks are checked; a wrong seed or page size finds none.
$PY -c "import json; t = json.load(open('prompt_tokens.json')); json.dump(t + [5] * 20, open('longer.json', 'w'))"
content vllm_p 4 --model s.gguf --token-ids longer.json --hash-seed 0
[ "$(json_get "$WORK/out" '["content"]["blocks_wanted"]')" = 5 ] || fail "the longer prompt makes 5 blocks"
expect_reason 1 STORE_MISS "$KVTOOL" verify vllm_p --model s.gguf --token-ids prompt_tokens.json --hash-seed 1
expect_reason 1 STORE_MISS "$KVTOOL" verify sglang_p --model s.gguf --token-ids prompt_tokens.json --block-tokens 16
expect_reason 2 USAGE "$KVTOOL" verify vllm_p --model s.gguf --token-ids prompt_tokens.json

# differs STORE POSITION LAYER FILE_PART [OPTIONS]: exit 1, PAYLOAD_MISMATCH on the block FILE_PART
# names, first difference at POSITION (and LAYER when given).
differs() {
  local store=$1 pos=$2 layer=$3 part=$4
  shift 4
  expect_exit 1 "$KVTOOL" verify "$store" "$@" --json
  $PY - "$WORK/out" "$pos" "$layer" "$part" <<'PY' || fail "verify $store: not the expected PAYLOAD_MISMATCH"
import json, sys
r = json.load(open(sys.argv[1])); pos, layer, part = int(sys.argv[2]), sys.argv[3], sys.argv[4]
first = r["content"]["first_difference"]
assert first["position"] == pos, first
assert layer == "-" or first["layer"] == int(layer), first
bad = [f for f in r["findings"] if f["reason"] == "PAYLOAD_MISMATCH"]
assert len(bad) == 1 and part in bad[0]["path"], bad
PY
}
blocks() { $PY -c "
import json, sys
sys.path.insert(0, '$KVTOOL_SOURCE/tests/cli')
import make_store_fixtures as m
t = json.load(open('prompt_tokens.json'))
print(' '.join(h.hex() for h in (m.vllm_hashes(t, 16, '0') if '$1' == 'vllm' else m.sglang_keys(t, 8))))"; }
read -r -a VB <<<"$(blocks vllm)"
read -r -a SB <<<"$(blocks sglang)"
vfile() { find "$1" -name "$2.bin"; }
# Blocks 1 and 2 exchanged (another position's values).
cp -r vllm_p v_swap && a=$(vfile v_swap "${VB[1]}") && b=$(vfile v_swap "${VB[2]}") && cp "$a" t && cp "$b" "$a" && cp t "$b"
differs v_swap 16 - "${VB[1]}" "${V[@]}"
# Layers 1 and 2 of block 0 exchanged (another layer's values): pages of 16 x 4 heads x 16 values x 2 bytes.
cp -r vllm_p v_layer && $PY -c "
f = '$(vfile v_layer "${VB[0]}")'; b = bytearray(open(f, 'rb').read()); n = 16 * 4 * 16 * 2
b[n:2 * n], b[2 * n:3 * n] = b[2 * n:3 * n], b[n:2 * n]; open(f, 'wb').write(b)"
differs v_layer 0 1 "${VB[0]}" "${V[@]}"
# The other prompt's blocks under this prompt's names (block of another prompt).
cp -r vllm_p v_other && for i in 0 1 2 3; do
  $PY -c "import glob, shutil; shutil.copy(sorted(glob.glob('other/vllm_p/*_r0/*/*/*.bin'))[0], '$(vfile v_other "${VB[$i]}")')" 2>/dev/null
done
o=$($PY -c "
import json, sys
sys.path.insert(0, '$KVTOOL_SOURCE/tests/cli')
import make_store_fixtures as m
t = json.load(open('other.tokens.json'))[:64]
print(' '.join(h.hex() for h in m.vllm_hashes(t, 16, '0')))")
read -r -a OB <<<"$o"
for i in 0 1 2 3; do cp "$(vfile other/vllm_p "${OB[$i]}")" "$(vfile v_other "${VB[$i]}")"; done
expect_exit 1 "$KVTOOL" verify v_other "${V[@]}" --json
contains "$WORK/out" PAYLOAD_MISMATCH
contains "$WORK/out" "${VB[0]}"
# SGLang: page 3's two ranks exchanged (another rank's heads).
cp -r sglang_p s_rank && a=$(ls s_rank/"${SB[3]}"_*_0_2.bin) && b=$(ls s_rank/"${SB[3]}"_*_1_2.bin) && cp "$a" t && cp "$b" "$a" && cp t "$b"
differs s_rank 24 - "${SB[3]}" "${S[@]}"
# A model of another geometry: its blocks cannot be this store's.
$PY "$HERE/llama2c_to_gguf.py" "$M/babyllama361.bin" -o b.gguf || fail "convert babyllama361"
expect_exit 1 "$KVTOOL" verify vllm_p --model b.gguf --token-ids prompt_tokens.json --hash-seed 0

# import: the prompt's blocks as a dump, equal to llama.cpp's rows.
expect_exit 0 "$KVTOOL" import vllm_p "${V[@]}" -o imp_v.h5 --json
expect_exit 0 "$KVTOOL" import sglang_p "${S[@]}" -o imp_s.h5
for d in imp_v.h5 imp_s.h5; do
  expect_exit 0 "$KVTOOL" verify "$d"
  $PY - "$d" <<'PY' || fail "$d differs from llama.cpp's K/V"
import sys
import h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File("llama_s.h5", "r")
T = a["kv/k"].shape[2]
assert T == 64, T
for n in ("kv/k", "kv/v"):
    assert np.array_equal(a[n][:], b[n][:, :, :T]), n
assert list(a["kv/tokens"][:]) == list(b["kv/tokens"][:T])
PY
done
expect_reason 2 USAGE "$KVTOOL" import vllm_p --model s.gguf -o x.h5
absent x.h5
# import compares the blocks with the GGUF model first: exchanged blocks are refused, nothing written.
expect_reason 1 PAYLOAD_MISMATCH "$KVTOOL" import v_swap "${V[@]}" -o x.h5
absent x.h5
expect_reason 1 PAYLOAD_MISMATCH "$KVTOOL" import s_rank "${S[@]}" -o x.h5
absent x.h5
# With a config.json no forward pass runs: the page layout must be recorded (vLLM's
# canonical_format) or given; SGLang records none.
echo '{"num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4, "hidden_size": 64}' >config.json
CS=(--model config.json --token-ids prompt_tokens.json --block-tokens 8 --store-dtype f16)
expect_reason 2 USAGE "$KVTOOL" import sglang_p "${CS[@]}" -o x.h5
absent x.h5
$PY -c "
import h5py, json
a = h5py.File('imp_s.h5').attrs
json.dump({k: (a[k].decode() if isinstance(a[k], bytes) else str(a[k])) for k in ('model_artifact_sha256', 'rope_config')}, open('meta.json', 'w'))"
expect_exit 0 "$KVTOOL" import sglang_p "${CS[@]}" --store-layout layer_first -o imp_cs.h5 --meta meta.json
$PY -c "import h5py, numpy as np; a, b = h5py.File('imp_cs.h5'), h5py.File('imp_s.h5'); assert np.array_equal(a['kv/k'][:], b['kv/k'][:])" ||
  fail "the SGLang import with a config.json and --store-layout differs"
finish
