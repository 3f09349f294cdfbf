#!/usr/bin/env bash
# kvtool-pq through the CLI: build (direct and via `kvtool build`), sharded builds with GNU parallel
# merged back byte for byte, append, query, eval (JSON, CSV, SVG), and bad inputs.
. "$(dirname "$0")/lib.sh"
PQ=$BIN/kvtool-pq

expect_exit 0 "$PQ" --version
contains "$WORK/out" "kvtool-pq 0.1.0"
expect_exit 0 "$PQ" build --help
contains "$WORK/out" "--subspaces"
"$KVTOOL" synth --layers 3 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 400 --seed 4 --query-count 30 -o d.h5 -q

expect_exit 0 "$PQ" build d.h5 -o a.kvi --prefix 360 --bits 5 --json -q
contains "$WORK/out" '"schema_version": 1'
contains "$WORK/out" '"parts_total": 6'
expect_exit 0 "$KVTOOL" build pq d.h5 -o b.kvi --prefix 360 --bits 5 --threads 1 -q
cmp a.kvi b.kvi || fail "kvtool build pq differs from kvtool-pq build (threads 2 vs 1)"
expect_exit 0 "$KVTOOL" verify a.kvi --source d.h5
expect_exit 0 "$KVTOOL" inspect a.kvi
contains "$WORK/out" "kind               pq"
contains "$WORK/out" "pq_codes"

# Sharded build through GNU parallel, merged, equals the unsharded artifact.
parallel --will-cite -j 2 "$PQ" build d.h5 -o shard{}.kvi --prefix 360 --bits 5 --shard {}/4 -q ::: 0 1 2 3 || fail "parallel shards"
expect_exit 0 "$KVTOOL" merge shard3.kvi shard1.kvi shard0.kvi shard2.kvi -o merged.kvi -q
cmp merged.kvi a.kvi || fail "merged shards differ from the unsharded artifact"
expect_reason 1 MERGE_INCOMPLETE "$KVTOOL" merge shard0.kvi shard1.kvi -o m.kvi
absent m.kvi
# Slurm job array: --shard auto.
SLURM_ARRAY_TASK_ID=11 SLURM_ARRAY_TASK_MIN=10 SLURM_ARRAY_TASK_COUNT=4 "$PQ" build d.h5 -o auto1.kvi --prefix 360 --bits 5 --shard auto -q
cmp auto1.kvi shard1.kvi || fail "--shard auto differs from --shard 1/4"
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --shard auto
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --shard 4/4
absent x.kvi

# Append a generation.
expect_exit 0 "$PQ" append a.kvi d.h5 -o a2.kvi --prefix 380 --json
contains "$WORK/out" '"index_generation": 2'
expect_exit 0 "$KVTOOL" verify a2.kvi --source d.h5
"$KVTOOL" synth --layers 3 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 400 --seed 5 --query-count 30 -o other.h5 -q
expect_reason 1 MODEL_MISMATCH "$PQ" append a.kvi other.h5 -o a3.kvi
absent a3.kvi

# Score-aware codebooks (--loss anisotropic): the same at 1 and 2 threads and sharded + merged,
# recorded in the params, appended with the same loss; bad values are usage errors.
expect_exit 0 "$PQ" build --help
contains "$WORK/out" "--anisotropic-eta"
AN=(--prefix 360 --bits 5 --loss anisotropic --anisotropic-eta 6 -q)
expect_exit 0 "$PQ" build d.h5 -o an1.kvi "${AN[@]}" --threads 1
expect_exit 0 "$PQ" build d.h5 -o an2.kvi "${AN[@]}" --threads 2
cmp an1.kvi an2.kvi || fail "anisotropic build differs between 1 and 2 threads"
cmp -s an1.kvi a.kvi && fail "anisotropic build equals the l2 build"
parallel --will-cite -j 2 "$PQ" build d.h5 -o ans{}.kvi "${AN[@]}" --shard {}/3 ::: 0 1 2 || fail "anisotropic shards"
expect_exit 0 "$KVTOOL" merge ans2.kvi ans0.kvi ans1.kvi -o anm.kvi -q
cmp anm.kvi an1.kvi || fail "merged anisotropic shards differ from the unsharded artifact"
expect_exit 0 "$KVTOOL" verify an1.kvi --source d.h5
expect_exit 0 "$KVTOOL" inspect an1.kvi --json
contains "$WORK/out" '"loss": "anisotropic"'
contains "$WORK/out" '"anisotropic_eta": 6'
expect_exit 0 "$PQ" append an1.kvi d.h5 -o an3.kvi --prefix 380 -q
expect_exit 0 "$KVTOOL" verify an3.kvi --source d.h5
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --loss cosine
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --loss anisotropic --anisotropic-eta -1
# Derived eta (the default): needs queries before the coverage end (d.h5 has positions 370..399).
expect_reason 1 NO_QUERIES "$PQ" build d.h5 -o x.kvi --prefix 360 --loss anisotropic
absent x.kvi
expect_exit 0 "$PQ" build d.h5 -o an4.kvi --loss anisotropic -q
expect_exit 0 "$KVTOOL" inspect an4.kvi --json
contains "$WORK/out" '"anisotropic_eta": 0.0'
n=$(json_get "$WORK/out" '["manifest"]["kind_data"]["parts"][5]["anisotropic_eta"] > 0')
[ "$n" = True ] || fail "part 5 lacks a derived anisotropic_eta"
expect_exit 0 "$KVTOOL" verify an4.kvi --source d.h5

# Query receipts.
expect_exit 0 "$KVTOOL" query a.kvi --source d.h5 --layer 2 --q-head 3 --position 390 --budget 0.1 --json
contains "$WORK/out" '"kv_head": 1'
contains "$WORK/out" '"semantics": "candidate_ids_only"'
n=$(json_get "$WORK/out" '["candidates"].__len__()')
[ "$n" = 36 ] || fail "expected 36 candidates (10% of 359 indexed rows: 1 sink row), got $n"
python3 -c 'print(" ".join(str(0.1 * i) for i in range(32)))' > q.txt
expect_exit 0 "$KVTOOL" query a.kvi --source d.h5 --layer 0 --q-head 0 --vector q.txt --budget 5
contains "$WORK/out" "5 candidates of 359 indexed rows"
echo "1 2 3" > short.txt
expect_reason 1 SHAPE_MISMATCH "$KVTOOL" query a.kvi --source d.h5 --layer 0 --q-head 0 --vector short.txt
expect_reason 2 USAGE "$KVTOOL" query a.kvi --source d.h5 --layer 0 --q-head 9 --position 390
expect_reason 2 USAGE "$KVTOOL" query a.kvi --source d.h5 --layer 0 --q-head 0 --position 390 --budget -3
"$KVTOOL" synth --layers 3 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 400 --seed 4 --query-count 30 --tenant t2 -o t2.h5 -q
expect_reason 1 TENANT_MISMATCH "$KVTOOL" query a.kvi --source t2.h5 --layer 0 --q-head 0 --position 390

# Eval: JSON schema, CSV rows, SVG plot.
expect_exit 0 "$KVTOOL" eval a.kvi --source d.h5 --budget 0.05 --budget 0.1 --budget 0.3 --json --csv e.csv --plot e.svg
for k in schema_version budgets retained_mass_mean retained_mass_p10 oracle_retained_mass_mean recall_support_mean \
         output_error_mean selected_fraction_mean index_bytes selected_row_bytes_mean per_layer selector; do
  contains "$WORK/out" "\"$k\""
done
[ "$(json_get "$WORK/out" '["budgets"].__len__()')" = 3 ] || fail "three budgets expected"
[ "$(wc -l < e.csv)" = $((1 + 3 * 3 * 4 * 30)) ] || fail "e.csv has $(wc -l < e.csv) lines"
grep -q "<svg" e.svg && grep -q "retained attention mass" e.svg || fail "e.svg is not the plot"
expect_exit 0 "$KVTOOL" eval a.kvi --source d.h5 -q
contains "$WORK/out" "retained"

# Bad input: no output file, documented exit codes.
expect_reason 3 IO_ERROR "$PQ" build missing.h5 -o x.kvi
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --subspaces 5
contains "$WORK/err" "does not divide the head dim 32"
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --bits 17
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --layers 3-5
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --layers 2-1
expect_reason 2 USAGE "$PQ" build d.h5 -o x.kvi --prefix 401
echo junk > junk.h5
expect_reason 1 NOT_A_DUMP "$PQ" build junk.h5 -o x.kvi
absent x.kvi
expect_reason 2 USAGE "$KVTOOL" build nosuchkind d.h5 -o x.kvi
absent x.kvi
no_temps .
finish
