#!/usr/bin/env bash
# llama.cpp state variants written by real llama.cpp (formats/llama-state.md, "Variants"): a small C
# program (llama_states.c) built against the bundle's headers and node-llama-cpp's prebuilt
# libllama (tag v0.4.0) decodes two sequences on stories260K (two KV streams) and writes a sequence
# file, a whole-context session file (llama_state_save_file, which node-llama-cpp does not bind),
# the in-memory blobs of llama_state_seq_get_data for each sequence and one with
# LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY. kvtool must read each to the same K/V, and refuse versions
# it cannot know the layout of. Then the same for sliding-window (gemma2), hybrid (lfm2) and M-RoPE
# (qwen2vl) models, layer 0 checked against the weights, partial blobs and image cells refused.
source "${KVTOOL_SOURCE:?}/tests/llamacpp/lib.sh"
require_node
require_bundle
BINS=$NLC/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
[ -f "$BINS/libllama.v0.4.0.so" ] || unavailable "no prebuilt libllama.v0.4.0.so in $BINS"
mkdir src && git --git-dir llama.git archive HEAD include ggml/include gguf-py | tar -x -C src || { fail "headers"; finish; }
cc -O1 -o llama_states "$HERE/llama_states.c" -Isrc/include -Isrc/ggml/include -L"$BINS" -l:libllama.v0.4.0.so \
  -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$BINS" -lm || { fail "build llama_states.c"; finish; }
$PY "$HERE/llama2c_to_gguf.py" "$M/stories260K.bin" --tokenizer "$M/tok512.bin" -o s.gguf || fail "convert stories260K"
mkdir st && ./llama_states "$BINS" save s.gguf 48 st >run.log 2>&1 || { tail -5 run.log; fail "llama.cpp run"; finish; }

G=(--gguf s.gguf)
# same A B: two dumps hold the same K/V (and the same tokens, or none in either).
same() {
  $PY - "$1" "$2" <<'PY' || fail "$1 and $2 differ"
import sys
import h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
for n in ("kv/k", "kv/v"):
    assert np.array_equal(a[n][:], b[n][:]), n
PY
}
imp() { expect_exit 0 "$KVTOOL" import "$@" "${G[@]}" -q; }
# within A B: B's rows are A's rows at B's positions (a whole-context save keeps the cells a
# sequence save leaves out, as a sliding-window cache's beyond the window).
within() {
  $PY - "$1" "$2" <<'PY' || fail "$2 is not $1 at its positions"
import sys
import h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
pa, pb = list(a["kv/positions"][:]), list(b["kv/positions"][:])
rows = [pa.index(p) for p in pb]
for n in ("kv/k", "kv/v"):
    assert np.array_equal(a[n][:][:, :, rows], b[n][:]), n
PY
}
imp st/seq.ggsq -o seq0.h5
imp st/seq.blob -o blob0.h5
imp st/seq1.blob -o blob1.h5
imp st/session.ggsn --seq-id 0 -o sess0.h5
imp st/session.ggsn --seq-id 1 -o sess1.h5
same seq0.h5 blob0.h5
same seq0.h5 sess0.h5
same sess1.h5 blob1.h5
$PY -c "import h5py; assert 'kv/tokens' not in h5py.File('blob0.h5') and 'kv/tokens' in h5py.File('seq0.h5')" ||
  fail "a blob holds no tokens; a sequence file does"
# The session: two streams, one per sequence (kv_unified off); the blobs: magic, sequence, no tokens.
expect_exit 0 "$KVTOOL" inspect st/session.ggsn "${G[@]}" --json
[ "$(json_get "$WORK/out" '["streams"]')" = 2 ] || fail "the session file's streams"
[ "$(json_get "$WORK/out" '["seq_ids"]')" = "[0, 1]" ] || fail "the session file's sequences"
expect_exit 0 "$KVTOOL" inspect st/seq1.blob "${G[@]}" --json
[ "$(json_get "$WORK/out" '["magic"]')/$(json_get "$WORK/out" '["blob_seq_id"]')/$(json_get "$WORK/out" '["tokens"]')" = blob/1/0 ] ||
  fail "the blob's magic, sequence or tokens"
expect_exit 0 "$KVTOOL" verify st/seq.blob "${G[@]}" --source seq0.h5
expect_exit 0 "$KVTOOL" verify st/seq.ggsq "${G[@]}" --model-check
# A plain cache ignores PARTIAL_ONLY (llama_kv_cache::state_write): the blob is the whole one.
cmp -s st/partial.blob st/seq.blob || fail "llama.cpp's PARTIAL_ONLY blob of a plain cache differs from the whole one"
# Versions: sequence files v2 read as v3; v1, session v9 and v11 are refused by number.
version() { $PY -c "import struct, sys; b = bytearray(open('$1', 'rb').read()); b[4:8] = struct.pack('<I', $2); open('$3', 'wb').write(b)"; }
version st/seq.ggsq 2 v2.ggsq
imp v2.ggsq -o v2.h5
same seq0.h5 v2.h5
version st/seq.ggsq 1 v1.ggsq
expect_reason 1 UNSUPPORTED_VERSION "$KVTOOL" inspect v1.ggsq "${G[@]}"
version st/session.ggsn 9 v9.ggsn
expect_reason 1 UNSUPPORTED_VERSION "$KVTOOL" inspect v9.ggsn "${G[@]}"
grep -q "two layouts" "$WORK/err" || fail "session v9's refusal does not say why"
version st/session.ggsn 11 v11.ggsn
expect_reason 1 UNSUPPORTED_VERSION "$KVTOOL" inspect v11.ggsn "${G[@]}"
# Damaged blobs: cut short, a sequence id outside llama.cpp's range, bytes after the memory.
head -c 2000 st/seq.blob >cut.blob
# (the damaged blobs follow the variants)
cut_checks() {
expect_reason 1 TRUNCATED "$KVTOOL" inspect cut.blob "${G[@]}"
$PY -c "import struct; b = bytearray(open('st/seq.blob', 'rb').read()); b[4:8] = struct.pack('<i', 300); open('seq300.blob', 'wb').write(b)"
expect_reason 1 BAD_STATE_FILE "$KVTOOL" inspect seq300.blob "${G[@]}"
cat st/seq.blob st/seq1.blob >two.blob
expect_reason 1 BAD_STATE_FILE "$KVTOOL" import two.blob "${G[@]}" -o two.h5
absent two.h5
}
cut_checks

# --- The memories of other architectures (formats/llama-state.md, "Variants"), written by llama.cpp
# for random-weight models of their shapes (make_gguf_models.py): gemma2 (layers 0 and 2 in a
# sliding-window cache of 16 positions after layers 1 and 3's), lfm2 (attention layers 0 and 2, then
# the recurrent state of layers 1 and 3), qwen2vl (M-RoPE: x, y and the token in every cell).
# Layer 0's K and V are computed from the weights (variant_layer0.py) at the rows' true positions.
layer0() { $PY "$HERE/variant_layer0.py" --gguf-py src/gguf-py "$@" >>layer0.log || fail "layer 0 of $2 ($*)"; }
for a in gemma2 lfm2 qwen2vl; do
  $PY "$HERE/make_gguf_models.py" --gguf-py src/gguf-py --shape $a --wtype f32 --layers 4 -o $a.gguf || fail "$a model"
  mkdir $a && ./llama_states "$BINS" save $a.gguf 48 $a >$a.log 2>&1 || { tail -3 $a.log; fail "llama.cpp run ($a)"; continue; }
  G=(--gguf $a.gguf)
  imp $a/seq.ggsq -o $a-seq.h5
  imp $a/seq.blob -o $a-blob.h5
  imp $a/session.ggsn --seq-id 0 -o $a-sess.h5
  same $a-seq.h5 $a-blob.h5
  within $a-sess.h5 $a-seq.h5
  layer0 $a.gguf $a-seq.h5
  layer0 $a.gguf $a-sess.h5 --tokens $a/tokens.json
  layer0 $a.gguf $a-blob.h5 --tokens $a/tokens.json
  ! $PY "$HERE/variant_layer0.py" --gguf-py src/gguf-py $a.gguf $a-seq.h5 --offset 1 >/dev/null 2>&1 ||
    fail "$a: layer 0 matches at positions off by one (the check cannot fail)"
  expect_exit 0 "$KVTOOL" inspect $a/seq.ggsq "${G[@]}" --json
  cp "$WORK/out" $a-inspect.json
done
field() { $PY -c "import json, sys; d = json.load(open('$1')); print($2)"; }
# iSWA: the two caches; import reads the window's 16 positions (32..47) of every layer (the session,
# a whole-context save, keeps all 48 in both caches: checked above at their true positions).
[ "$(field gemma2-inspect.json "d['memory'], [(s['name'], s['layers'], s['rows'], s['pos_min']) for s in d['sections']], d['rows'], d['pos_min']")" = \
  "iswa [('base', [1, 3], 48, 0), ('swa', [0, 2], 16, 32)] 16 32" ] || fail "gemma2's sections: $(cat gemma2-inspect.json)"
$PY -c "import h5py; f = h5py.File('gemma2-seq.h5'); assert list(f['kv/positions'][:]) == list(range(32, 48)), f['kv/positions'][:]; assert f['kv/k'].shape[0] == 4" ||
  fail "gemma2's dump: every layer at positions 32..47"
expect_reason 1 UNSUPPORTED_CACHE "$KVTOOL" import gemma2/partial.blob --gguf gemma2.gguf -o part.h5
grep -q PARTIAL_ONLY "$WORK/err" || fail "gemma2's partial blob is not refused by name"
absent part.h5
expect_reason 1 BAD_STATE_FILE "$KVTOOL" inspect gemma2/seq.ggsq
grep -q "second cache" "$WORK/err" || fail "an iSWA state without its model does not say why"
# Hybrid: the attention layers only; the recurrent state walked, not read; its partial blob refused.
[ "$(field lfm2-inspect.json "d['memory'], d['sections'][0]['layers'], d['recurrent']['read'], [l['layer'] for l in d['layers']]")" = \
  "hybrid [0, 2] False [0, 2]" ] || fail "lfm2's sections: $(cat lfm2-inspect.json)"
$PY -c "import h5py; assert h5py.File('lfm2-seq.h5')['kv/k'].shape[0] == 2" || fail "lfm2's dump holds its 2 attention layers"
expect_reason 1 UNSUPPORTED_CACHE "$KVTOOL" import lfm2/partial.blob --gguf lfm2.gguf -o part.h5
grep -q "recurrent state" "$WORK/err" || fail "lfm2's partial blob is not refused by name"
# M-RoPE: text cells (x = y = position) are read, their tokens from the cells (a blob has no list);
# a cell with another x is an image token and refused. A plain cache ignores PARTIAL_ONLY.
[ "$(field qwen2vl-inspect.json "d['memory'], d['image_cells']")" = "kv 0" ] || fail "qwen2vl's cells"
$PY -c "import h5py, json; assert list(h5py.File('qwen2vl-blob.h5')['kv/tokens'][:]) == json.load(open('qwen2vl/tokens.json'))" ||
  fail "qwen2vl's blob: the tokens of its cells"
cmp -s qwen2vl/partial.blob qwen2vl/seq.blob || fail "qwen2vl's PARTIAL_ONLY blob differs from the whole one"
$PY -c "
import struct
b = bytearray(open('qwen2vl/seq.ggsq', 'rb').read())
off = 12 + 4 * struct.unpack_from('<I', b, 8)[0] + 8 + 8 * 0  # n_stream, cell count, then cell 0: pos, n_seq, x
off += 8
assert struct.unpack_from('<i', b, off)[0] == 0
struct.pack_into('<i', b, off, 5)
open('image.ggsq', 'wb').write(b)"
expect_reason 1 UNSUPPORTED_CACHE "$KVTOOL" import image.ggsq --gguf qwen2vl.gguf -o image.h5
grep -q "image token" "$WORK/err" || fail "an M-RoPE image cell is not refused by name"
absent image.h5
# A q8_0 sliding-window cache: llama.cpp rotates both caches (Hadamard); read un-rotated, layer 0
# matches the weights; read as stored, it does not.
mkdir q8 && ./llama_states "$BINS" save gemma2.gguf 48 q8 q8_0 >q8.log 2>&1 || fail "llama.cpp run (gemma2, q8_0)"
G=(--gguf gemma2.gguf)
imp q8/seq.ggsq -o q8.h5
layer0 gemma2.gguf q8.h5
imp q8/seq.ggsq --llama-rotation off -o q8-off.h5
! $PY "$HERE/variant_layer0.py" --gguf-py src/gguf-py gemma2.gguf q8-off.h5 >/dev/null 2>&1 ||
  fail "a rotated q8_0 cache read without un-rotating matches the weights"
expect_exit 0 "$KVTOOL" inspect q8/seq.ggsq "${G[@]}" --json
[ "$(json_get "$WORK/out" '["rotated"]')" = True ] || fail "inspect does not report the q8_0 cache rotated"
cat layer0.log
finish
