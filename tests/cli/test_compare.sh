#!/usr/bin/env bash
# kvtool compare: the README's stories260K example (all four kinds) run as written, its SVG equal
# byte for byte to the committed docs/compare-stories260K.svg; the table, JSON, CSV; every number
# equal to `kvtool eval`'s for the same artifact and setting; the knobs; bad input (another dump's
# artifact, no artifact, a missing file) with its exit code and no output file.
. "$(dirname "$0")/lib.sh"
export PATH="$BIN:$PATH"
SRC=${KVTOOL_SOURCE:?}
ln -s "$SHARED" shared
mkdir root

# The README block that draws the committed plot, run as written from a folder beside ../shared.
/usr/bin/python3 - "$SRC/README.md" > root/example.sh <<'PY'
import re, sys
blocks = [b for b in re.findall(r"```sh\n(.*?)```", open(sys.argv[1]).read(), re.S) if "kvtool compare" in b]
assert len(blocks) == 1, "one README sh block runs kvtool compare"
print("set -euo pipefail\n" + blocks[0])
PY
(cd root && bash example.sh > example.out 2> example.err) || fail "the README's compare example failed: $(head -c 400 root/example.err)"
cmp root/compare-stories260K.svg "$SRC/docs/compare-stories260K.svg" ||
  fail "the README example's SVG differs from docs/compare-stories260K.svg (regenerate it with that block)"
cd root
ARTS="st.pq.kvi st.ckv.kvi st.sq.kvi st.lsh.kvi"
for a in $ARTS; do [ -f "$a" ] || fail "the README example did not build $a"; done
calibrated=$(json_get <("$KVTOOL" inspect st.sq.kvi --json) '["manifest"]["params"]["quantiles"].__len__()')
tables=$(json_get <("$KVTOOL" inspect st.lsh.kvi --json) '["manifest"]["params"]["tables"]')

# Table: one row per setting of every artifact's default curve.
expect_exit 0 "$KVTOOL" compare --source st.h5 $ARTS -q
for a in $ARTS; do contains "$WORK/out" "$a"; done
rows() { grep -c "^  $1 " "$WORK/out"; }
[ "$(rows st.pq.kvi)" = 6 ] || fail "pq: 5 budget rows (+ the header line) expected, got $(rows st.pq.kvi)"
[ "$(rows st.ckv.kvi)" = 6 ] || fail "clusterkv: 5 budget rows expected"
[ "$(rows st.sq.kvi)" = $((1 + 2 * calibrated)) ] || fail "squeeze: every calibrated quantile, hier and flat"
want_lsh=$(/usr/bin/python3 -c "print(1 + sum(c <= $tables for c in (1, 2, 3, 4, 8, 16)))")
[ "$(rows st.lsh.kvi)" = "$want_lsh" ] || fail "lsh: the collision thresholds <= $tables tables"
for h in artifact kind setting sel.frac retained oracle ratio recall@k out.err rel.err "index bytes"; do contains "$WORK/out" "$h"; done

# JSON, CSV and SVG in one run; every number equal to eval's for the same artifact and setting.
expect_exit 0 "$KVTOOL" compare --source st.h5 $ARTS --json --csv c.csv --plot c.svg --threads 1
cp "$WORK/out" c.json
cmp c.svg compare-stories260K.svg || fail "--threads 1 draws a different SVG than the default thread count"
/usr/bin/python3 - c.json c.csv "$calibrated" <<'PY' || fail "compare --json/--csv"
import csv, json, sys
j = json.load(open(sys.argv[1]))
assert j["schema_version"] == 1 and j["source"] == "st.h5", j.keys()
kinds = [a["identity"]["kind"] for a in j["artifacts"]]
assert kinds == ["pq", "clusterkv", "squeeze", "lsh"], kinds
for a in j["artifacts"]:
    for k in ("path", "kind", "file_bytes", "manifest_sha256", "params", "coverage_end", "content_digest"):
        assert k in a["identity"], k
    assert a["eval"]["artifact"] == a["identity"]["path"]
    for s in a["eval"]["budgets"]:
        for k in ("selector", "selected_fraction_mean", "retained_mass_mean", "oracle_retained_mass_mean",
                  "quality_ratio", "output_error_mean", "relative_output_error_mean", "index_bytes"):
            assert k in s, k
budgets = [s["selector"]["budget"] for s in j["artifacts"][0]["eval"]["budgets"]]
assert budgets == ["0.02", "0.05", "0.1", "0.2", "0.3"], budgets
assert len(j["artifacts"][2]["eval"]["budgets"]) == 2 * int(sys.argv[3])
n = sum(len(a["eval"]["budgets"]) for a in j["artifacts"])
fr = [o["selected_fraction_mean"] for o in j["oracle"]]
assert len(fr) == n and fr == sorted(fr), "one oracle point per setting, by selected fraction"
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == n, (len(rows), n)
r = rows[0]
s = j["artifacts"][0]["eval"]["budgets"][0]
assert r["artifact"] == "st.pq.kvi" and r["kind"] == "pq" and r["setting"] == "0.02", r
assert abs(float(r["retained_mass"]) - s["retained_mass_mean"]) < 1e-5
assert abs(float(r["oracle_retained_mass"]) - s["oracle_retained_mass_mean"]) < 1e-5
PY
grep -q "<svg" c.svg && grep -q "dense top-k oracle" c.svg && grep -q "relative output error" c.svg || fail "c.svg"
same_as_eval() {  # same_as_eval INDEX ART EVAL-ARGS...: compare's artifact INDEX equals eval's report
  local i=$1 art=$2; shift 2
  "$KVTOOL" eval "$art" --source st.h5 "$@" --json > e.json || { fail "eval $art $*"; return; }
  /usr/bin/python3 - c.json e.json "$i" <<'PY' || fail "compare's numbers for $art differ from eval $*"
import json, sys
c, e = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert c["artifacts"][int(sys.argv[3])]["eval"] == e
PY
}
same_as_eval 0 st.pq.kvi --budget 0.02 --budget 0.05 --budget 0.1 --budget 0.2 --budget 0.3
same_as_eval 1 st.ckv.kvi --budget 0.02 --budget 0.05 --budget 0.1 --budget 0.2 --budget 0.3
same_as_eval 2 st.sq.kvi
same_as_eval 3 st.lsh.kvi $(/usr/bin/python3 -c "print(' '.join('--min-collisions %d' % c for c in (1, 2, 3, 4, 8, 16) if c <= $tables))")

# Knobs replace a kind's curve for the artifacts that take them; others keep theirs.
expect_exit 0 "$KVTOOL" compare --source st.h5 st.pq.kvi st.lsh.kvi --budget 0.1 --min-collisions 2 --json
[ "$(json_get "$WORK/out" '["artifacts"][0]["eval"]["budgets"].__len__()')" = 1 ] || fail "--budget 0.1: one pq setting"
[ "$(json_get "$WORK/out" '["artifacts"][1]["eval"]["budgets"][0]["selector"]["min_collisions"]')" = 2 ] ||
  fail "--min-collisions 2 for lsh"
expect_exit 0 "$KVTOOL" compare --source st.h5 st.sq.kvi st.ckv.kvi -o quantile=0.8 -o flat=false --json
[ "$(json_get "$WORK/out" '["artifacts"][0]["eval"]["budgets"].__len__()')" = 1 ] || fail "-o quantile=0.8 -o flat=false"
[ "$(json_get "$WORK/out" '["artifacts"][1]["eval"]["budgets"].__len__()')" = 5 ] || fail "clusterkv keeps its curve"
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi --min-collisions 2 --csv x.csv
contains "$WORK/err" "min_collisions"
absent x.csv
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi --budget -1 --plot x.svg
absent x.svg

# Bad input: an artifact of another dump (named), no artifact, a missing file; no output file.
"$KVTOOL" dump --llama2c ../shared/models/stories260K.bin --tokenizer ../shared/models/tok512.bin --tokens 512 \
  --prompt "A dog ran" --queries -o other.h5 -q
"$KVTOOL" build pq other.h5 --prefix 384 -o other.pq.kvi -q
expect_reason 1 PREFIX_MISMATCH "$KVTOOL" compare --source st.h5 st.pq.kvi other.pq.kvi --csv x.csv --plot x.svg
contains "$WORK/err" "other.pq.kvi"
absent x.csv; absent x.svg
"$KVTOOL" synth --layers 5 --kv-heads 4 --q-heads 8 --head-dim 8 --tokens 512 --seed 1 --query-count 16 -o syn.h5 -q
expect_reason 1 MODEL_MISMATCH "$KVTOOL" compare --source syn.h5 st.pq.kvi --json --plot x.svg
contains "$WORK/err" "st.pq.kvi"
contains "$WORK/out" '"ok": false'
absent x.svg
expect_exit 2 "$KVTOOL" compare --source st.h5 --csv x.csv
contains "$WORK/err" "ART"
absent x.csv
expect_reason 3 IO_ERROR "$KVTOOL" compare --source st.h5 st.pq.kvi missing.kvi --plot x.svg
contains "$WORK/err" "missing.kvi"
absent x.svg
expect_reason 3 IO_ERROR "$KVTOOL" compare --source missing.h5 st.pq.kvi --plot x.svg
absent x.svg
# An output naming an input (or both outputs one file) is refused before any work; inputs intact.
cp st.pq.kvi keep.kvi
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi --plot st.pq.kvi
cmp st.pq.kvi keep.kvi || fail "compare --plot overwrote its input artifact"
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi --csv ./st.h5
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi --csv x.out --plot x.out
absent x.out
expect_reason 2 USAGE "$KVTOOL" eval st.pq.kvi --source st.h5 --csv st.pq.kvi
cmp st.pq.kvi keep.kvi || fail "eval --csv overwrote its input artifact"
# The same artifact twice; a bad option value for the last artifact fails before the first is evaluated.
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi ./st.pq.kvi
contains "$WORK/err" "given twice"
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi st.sq.kvi -o coarse_rule=bogus --plot x.svg
contains "$WORK/err" "st.sq.kvi"
expect_reason 2 USAGE "$KVTOOL" compare --source st.h5 st.pq.kvi st.sq.kvi --quantile 0.33
contains "$WORK/err" "not calibrated"
absent x.svg
no_temps .

expect_exit 0 "$KVTOOL" compare --help
for w in --source --budget --quantile --min-collisions --csv --plot --json --threads "0.02 0.05 0.1 0.2 0.3"; do
  contains "$WORK/out" "$w"
done
finish
