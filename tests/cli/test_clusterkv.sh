#!/usr/bin/env bash
# kvtool-clusterkv through the CLI: build, shards + merge, append windows, query, eval, bad input.
. "$(dirname "$0")/lib.sh"
C=$BIN/kvtool-clusterkv

expect_exit 0 "$C" --version
contains "$WORK/out" "kvtool-clusterkv 0.1.0"
"$KVTOOL" synth --layers 3 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 900 --seed 4 --query-count 40 -o d.h5 -q
expect_exit 0 "$C" build d.h5 -o a.kvi --prefix 500 --tokens-per-cluster 8 --dense-layers 0 --json -q
contains "$WORK/out" '"kind": "clusterkv"'
expect_exit 0 "$KVTOOL" build clusterkv d.h5 -o b.kvi --prefix 500 --tokens-per-cluster 8 --dense-layers 0 --threads 1 -q
cmp a.kvi b.kvi || fail "thread count changed the artifact"
expect_exit 0 "$KVTOOL" verify a.kvi --source d.h5
parallel --will-cite -j 2 "$C" build d.h5 -o s{}.kvi --prefix 500 --tokens-per-cluster 8 --dense-layers 0 --shard {}/3 -q ::: 0 1 2 || fail "shards"
expect_exit 0 "$KVTOOL" merge s2.kvi s0.kvi s1.kvi -o m.kvi -q
cmp m.kvi a.kvi || fail "merged shards differ from the unsharded artifact"

expect_exit 0 "$C" append a.kvi d.h5 -o a2.kvi --prefix 880 --window 120 --window-clusters 6 --json
contains "$WORK/out" '"windows": 3'
contains "$WORK/out" '"uncovered_rows": 20'
expect_exit 0 "$KVTOOL" verify a2.kvi --source d.h5
expect_exit 0 "$KVTOOL" inspect a2.kvi --json
contains "$WORK/out" '"index_generation": 2'
expect_reason 2 USAGE "$C" append a.kvi d.h5 -o a3.kvi --prefix 550 --window 120
absent a3.kvi

expect_exit 0 "$KVTOOL" query a2.kvi --source d.h5 --layer 1 --q-head 2 --position 890 --budget 40 --json
n=$(json_get "$WORK/out" '["candidates"].__len__()')
[ "$n" = 40 ] || fail "expected 40 candidates, got $n"
expect_exit 0 "$KVTOOL" eval a.kvi --source d.h5 --budget 0.1 --budget 0.2 --json
contains "$WORK/out" '"kind": "clusterkv"'

expect_reason 2 USAGE "$C" build d.h5 -o x.kvi --centroid median
expect_reason 2 USAGE "$C" build d.h5 -o x.kvi --tokens-per-cluster 0
expect_reason 2 USAGE "$C" build d.h5 -o x.kvi --dense-layers 1-x
expect_exit 2 "$C" build d.h5 -o x.kvi --clusters 5 --tokens-per-cluster 8
expect_reason 3 IO_ERROR "$C" build nope.h5 -o x.kvi
absent x.kvi
no_temps .
finish
