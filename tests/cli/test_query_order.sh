#!/usr/bin/env bash
# kvtool query --order rows|best (QueryParams::row_order) for every kind: the same candidates with
# the same scores (and inclusion probabilities), listed by increasing row; the receipt says so.
# pq is checked on both of its selection paths (rows grouped by code pair at m = 2, and plain
# scores), the budgets on the sampled and the full selection, ties included (a dump whose keys
# repeat).
source "$(dirname "$0")/lib.sh"
"$KVTOOL" synth --layers 1 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 12000 --seed 9 --query-count 120 -o d.h5 -q ||
  fail "synth"
expect_exit 0 "$KVTOOL" build pq d.h5 -o pair.kvi -m 2 --bits 6 --prefix 11990 -q
expect_exit 0 "$KVTOOL" build pq d.h5 -o plain.kvi -m 8 --bits 5 --prefix 11990 -q
expect_exit 0 "$KVTOOL" build clusterkv d.h5 -o c.kvi --prefix 11990 --tokens-per-cluster 16 --dense-layers 0 -q
expect_exit 0 "$KVTOOL" build lsh d.h5 -o l.kvi --prefix 11990 -K 8 -L 40 -q
expect_exit 0 "$KVTOOL" build squeeze d.h5 -o s.kvi --prefix 11990 -q
# same_set BEST.json ROWS.json: the rows receipt is the best one's candidates sorted by row.
same_set() {
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail "$2 is not $1 in row order"
import json, sys
best, rows = (json.load(open(p)) for p in sys.argv[1:])
b, r = best["candidates"], rows["candidates"]
assert len(b) > 0 and sorted(b) == r, (len(b), len(r))
assert len(set(r)) == len(r)
sb = dict(zip(b, best["scores"]))
assert all(sb[i] == s for i, s in zip(r, rows["scores"])), "scores"
if best.get("inclusion"):
    ib = dict(zip(b, best["inclusion"]))
    assert all(ib[i] == p for i, p in zip(r, rows["inclusion"])), "inclusion"
assert rows["selector"].get("order") == "rows" and "order" not in best["selector"], rows["selector"]
PY
}
for art in pair plain c l s; do
  for budget in 0.01 0.1 0.3 11990; do
    [ $art = l ] || [ $art = s ] && [ $budget != 0.1 ] && continue  # their own thresholds, not budgets
    for head in 0 3; do
      expect_exit 0 "$KVTOOL" query $art.kvi --source d.h5 --layer 0 --q-head $head --position 11999 --budget $budget --json
      cp "$WORK/out" best.json
      expect_exit 0 "$KVTOOL" query $art.kvi --source d.h5 --layer 0 --q-head $head --position 11999 --budget $budget \
        --order rows --json
      cp "$WORK/out" rows.json
      same_set best.json rows.json
    done
  done
done
expect_reason 2 USAGE "$KVTOOL" query pair.kvi --source d.h5 --layer 0 --q-head 0 --position 11999 --order worst
expect_reason 2 USAGE "$KVTOOL" query pair.kvi --source d.h5 --layer 0 --q-head 0 --position 11999 -o order=worst
finish
