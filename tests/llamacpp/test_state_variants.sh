#!/usr/bin/env bash
# llama.cpp state variants written by real llama.cpp (formats/llama-state.md, "Variants"): a small C
# program (llama_states.c) built against the bundle's headers and node-llama-cpp's prebuilt
# libllama (tag v0.4.0) decodes two sequences on stories260K (two KV streams) and writes a sequence
# file, a whole-context session file (llama_state_save_file, which node-llama-cpp does not bind),
# the in-memory blobs of llama_state_seq_get_data for each sequence and one with
# LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY. kvtool must read each to the same K/V, and refuse versions
# it cannot know the layout of.
source "${KVTOOL_SOURCE:?}/tests/llamacpp/lib.sh"
require_node
require_bundle
BINS=$NLC/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
[ -f "$BINS/libllama.v0.4.0.so" ] || unavailable "no prebuilt libllama.v0.4.0.so in $BINS"
mkdir src && git --git-dir llama.git archive HEAD include ggml/include | tar -x -C src || { fail "headers"; finish; }
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
expect_reason 1 TRUNCATED "$KVTOOL" inspect cut.blob "${G[@]}"
$PY -c "import struct; b = bytearray(open('st/seq.blob', 'rb').read()); b[4:8] = struct.pack('<i', 300); open('seq300.blob', 'wb').write(b)"
expect_reason 1 BAD_STATE_FILE "$KVTOOL" inspect seq300.blob "${G[@]}"
cat st/seq.blob st/seq1.blob >two.blob
expect_reason 1 BAD_STATE_FILE "$KVTOOL" import two.blob "${G[@]}" -o two.h5
absent two.h5
finish
