#!/usr/bin/env bash
# kvtool-squeeze through the CLI: build, verify with the prefix binding, shards + merge, query, eval.
. "$(dirname "$0")/lib.sh"
S=$BIN/kvtool-squeeze
expect_exit 0 "$S" --version
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 500 --seed 8 --query-count 200 -o d.h5 -q
expect_exit 0 "$S" build d.h5 -o a.kvi --prefix 420 --observation-window 60 --percent-clusters 10 --json -q
contains "$WORK/out" '"kind": "squeeze"'
expect_exit 0 "$KVTOOL" verify a.kvi --source d.h5
parallel --will-cite -j 2 "$S" build d.h5 -o s{}.kvi --prefix 420 --observation-window 60 --percent-clusters 10 --shard {}/2 -q ::: 0 1 || fail "shards"
expect_exit 0 "$KVTOOL" merge s0.kvi s1.kvi -o m.kvi -q
cmp m.kvi a.kvi || fail "merged shards differ"
expect_exit 0 "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 0 --position 450 --quantile 0.8 --json
contains "$WORK/out" '"centroids_scored"'
contains "$WORK/out" '"mode": "hierarchical"'
expect_exit 0 "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 0 --position 450 --quantile 0.8 --flat
contains "$WORK/out" "centroids scored: 36"
expect_reason 2 USAGE "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 0 --position 450 --quantile 0.65
expect_exit 0 "$KVTOOL" eval a.kvi --source d.h5 --json
contains "$WORK/out" '"centroids_scored_mean"'
# A rank budget (-o rank_budget=B) ranks the fine clusters instead of thresholding: exactly the budget's rows (whole
# clusters best first, the last one cut), whatever quantile is named; eval sweeps it as one setting.
expect_exit 0 "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 0 --position 450 -o rank_budget=8 --quantile 0.8 --json
cp "$WORK/out" qb.json
/usr/bin/python3 - qb.json <<'PY' || fail "squeeze budget query: $(head -c 1500 qb.json)"
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["candidates"]) == 8 and r["budget_rows"] == 8, r
assert r["selector"]["mode"] == "budget" and r["selector"]["budget_rows"] == 8, r["selector"]
assert r["centroids_scored"] == 36 and sorted(r["scores"], reverse=True) == r["scores"], r
PY
expect_exit 0 "$KVTOOL" eval a.kvi --source d.h5 -o rank_budget=0.1 -o rank_budget=100% --quantile 0.5 --quantile 0.8 --json
cp "$WORK/out" eb.json
/usr/bin/python3 - eb.json <<'PY' || fail "squeeze budget eval: $(head -c 1500 eb.json)"
import json, sys
b = json.load(open(sys.argv[1]))["budgets"]
assert [x["selector"]["budget"] for x in b] == ["0.1", "1"], [x["selector"] for x in b]
assert b[1]["quality_ratio"] == 1 and b[1]["retained_mass_mean"] > b[0]["retained_mass_mean"] > 0, b
PY
expect_reason 2 USAGE "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 0 --position 450 -o rank_budget=0
# The budget kinds' --budget leaves squeeze on its threshold (one set of options for every kind).
expect_exit 0 "$KVTOOL" query a.kvi --source d.h5 --layer 1 --q-head 0 --position 450 --budget 8 --json
contains "$WORK/out" '"mode": "hierarchical"'
# Calibrating from a file holding exactly the observation window's queries gives the same thresholds
# and the same calibration-set digest.
/usr/bin/python3 -c "import h5py,numpy as np; f=h5py.File('d.h5','r'); p=list(f['kv/q_positions'][:]); i=p.index(360); f['kv/q'][:, :, i:i+60, :].astype(np.float32).tofile('cal.f32')"
expect_exit 0 "$S" build d.h5 -o f.kvi --prefix 420 --observation-window 60 --percent-clusters 10 --calibration-queries cal.f32 -q
th() { "$KVTOOL" inspect "$1" --json | /usr/bin/python3 -c 'import json,sys; k=json.load(sys.stdin)["manifest"]["kind_data"]; print(json.dumps(k["thresholds"], sort_keys=True), k["calibration_set_sha256"])'; }
[ "$(th a.kvi)" = "$(th f.kvi)" ] || fail "file calibration differs from the observation window's"
expect_exit 0 "$KVTOOL" verify f.kvi --source d.h5
head -c 100 cal.f32 > short.f32
expect_reason 1 SHAPE_MISMATCH "$S" build d.h5 -o x.kvi --prefix 420 --observation-window 60 --calibration-queries short.f32
expect_reason 2 USAGE "$S" build d.h5 -o x.kvi --quantiles 0.5,2
expect_reason 2 USAGE "$S" build d.h5 -o x.kvi --percent-clusters 0
absent x.kvi
finish
