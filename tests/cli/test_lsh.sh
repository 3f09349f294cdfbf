#!/usr/bin/env bash
# kvtool-lsh through the CLI: build, inspect (table bytes, bucket occupancy), shards + merge, query
# receipts with inclusion probabilities, eval of several collision thresholds, bad input.
. "$(dirname "$0")/lib.sh"
L=$BIN/kvtool-lsh
expect_exit 0 "$L" --version
contains "$WORK/out" "kvtool-lsh 0.1.0"
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 600 --seed 6 --query-count 30 -o d.h5 -q
expect_exit 0 "$L" build d.h5 -o a.kvi --prefix 570 -K 8 -L 40 --json -q
contains "$WORK/out" '"kind": "lsh"'
expect_exit 0 "$KVTOOL" build lsh d.h5 -o b.kvi --prefix 570 -K 8 -L 40 --threads 1 -q
cmp a.kvi b.kvi || fail "thread count changed the artifact"
expect_exit 0 "$KVTOOL" verify a.kvi --source d.h5
expect_exit 0 "$KVTOOL" inspect a.kvi --json
contains "$WORK/out" '"bucket_empty_fraction_mean"'
contains "$WORK/out" '"table_bytes_stored"'
expect_exit 0 "$KVTOOL" inspect a.kvi
contains "$WORK/out" "lsh summary  bucket_empty_fraction_mean"
parallel --will-cite -j 2 "$L" build d.h5 -o s{}.kvi --prefix 570 -K 8 -L 40 --shard {}/2 -q ::: 0 1 || fail "shards"
expect_exit 0 "$KVTOOL" merge s1.kvi s0.kvi -o m.kvi -q
cmp m.kvi a.kvi || fail "merged shards differ"
expect_exit 0 "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 1 --position 590 --min-collisions 2 --json
contains "$WORK/out" '"inclusion_probabilities"'
contains "$WORK/out" '"min_collisions": 2'
expect_exit 0 "$KVTOOL" eval a.kvi --source d.h5 --min-collisions 1 --min-collisions 2 --min-collisions 3 --json --plot p.svg
contains "$WORK/out" '"estimator_output_error_mean"'
contains "$WORK/out" '"sampled_fraction_mean"'
[ "$(json_get "$WORK/out" '["budgets"].__len__()')" = 3 ] || fail "three settings expected"
grep -q "<svg" p.svg || fail "no plot"
# The tables do not depend on the machine's BLAS kernels (formats/kinds-v1.md §5.3): OpenBLAS's
# AVX2 and AVX-512 kernels (where the CPU runs both) build the same bytes. With the products taken
# from an sgemm they differed on this dump (a key within rounding of a hyperplane changes bucket).
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then
  "$KVTOOL" synth --layers 1 --kv-heads 2 --q-heads 2 --head-dim 128 --tokens 32768 --seed 1 --query-count 0 -o big.h5 -q
  OPENBLAS_CORETYPE=HASWELL "$KVTOOL" build lsh big.h5 -o hsw.kvi -q || fail "build with the AVX2 kernels"
  OPENBLAS_CORETYPE=SKYLAKEX "$KVTOOL" build lsh big.h5 -o skx.kvi -q || fail "build with the AVX-512 kernels"
  cmp hsw.kvi skx.kvi || fail "the BLAS kernels changed the lsh tables"
  rm -f big.h5 hsw.kvi skx.kvi
fi
expect_reason 2 USAGE "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 1 --position 590 --min-collisions 41
expect_reason 2 USAGE "$L" build d.h5 -o x.kvi -K 17
expect_reason 2 USAGE "$L" build d.h5 -o x.kvi -L 0
absent x.kvi
no_temps .
finish
