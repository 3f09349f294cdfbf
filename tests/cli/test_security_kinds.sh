#!/usr/bin/env bash
# Regression tests for the kinds' structure validation through the CLI: re-packed artifacts (every digest right, the structure
# wrong) get the same reason from verify, query, eval and load — exit 1, never a signal — and load
# replays a partial artifact on its own parts.
. "$(dirname "$0")/lib.sh"
TESTGEN=$BIN/kvtool-testgen
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 160 --seed 3 --query-count 20 -o d.h5 -q
"$KVTOOL" build pq d.h5 -o pq.kvi --prefix 150 --subspaces 4 --bits 4 -q
"$KVTOOL" build lsh d.h5 -o lsh.kvi --prefix 150 --bits 4 --tables 8 -q

# refused REASON ARTIFACT: every reader of the artifact exits 1 with REASON.
refused() {
  local reason=$1 art=$2
  expect_reason 1 "$reason" "$KVTOOL" verify "$art"
  expect_reason 1 "$reason" "$KVTOOL" query "$art" --source d.h5 --layer 0 --q-head 0 --position 155
  expect_reason 1 "$reason" "$KVTOOL" eval "$art" --source d.h5 -q
  expect_reason 1 "$reason" "$KVTOOL" load "$art" --source d.h5 --device cpu
}

# finding 1: a pq part without its codes (query died of SIGSEGV); codes of 255 with 4 bits (read
# out of bounds, answered with exit 0); an lsh sink beyond int64 (eval aborted: heap corruption).
"$TESTGEN" repack pq.kvi -o no-codes.kvi --drop pq_codes@0,0
refused PART_INVALID no-codes.kvi
"$TESTGEN" repack pq.kvi -o big-codes.kvi --fill pq_codes@0,1=255
refused CODE_OUT_OF_RANGE big-codes.kvi
"$TESTGEN" repack lsh.kvi -o sink.kvi --set /params/sink=18446744073709551615
refused BAD_MANIFEST sink.kvi

# finding 12: wrongly typed members exit 1 (BAD_MANIFEST), not 4.
"$TESTGEN" repack pq.kvi -o layers.kvi --set '/params/layers=["0","1"]'
refused BAD_MANIFEST layers.kvi
"$TESTGEN" repack pq.kvi -o part.kvi --set '/kind_data/parts/0/layer="0"'
refused BAD_MANIFEST part.kvi

# finding 14: an index relabelled as the test kind.
"$TESTGEN" repack pq.kvi -o relabelled.kvi --set '/kind="container-test"'
expect_reason 1 PART_INVALID "$KVTOOL" verify relabelled.kvi
expect_reason 1 PART_INVALID "$KVTOOL" load relabelled.kvi --device cpu

# finding 15: a --layers 1-1 artifact of a 2-layer dump loads and replays its own layer.
"$KVTOOL" build pq d.h5 -o l1.kvi --prefix 150 --subspaces 4 --bits 4 --layers 1-1 -q
expect_exit 0 "$KVTOOL" load l1.kvi --source d.h5 --device cpu --json
[ "$(json_get "$WORK/out" '["queries"]["count"]')" -gt 0 ] || fail "the partial artifact replayed no queries"
[ "$(json_get "$WORK/out" '["queries"]["mismatches"]')" = 0 ] || fail "partial replay mismatches"
finish
