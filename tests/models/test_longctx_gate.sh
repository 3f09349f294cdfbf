#!/usr/bin/env bash
# The long-context decode gate (docs/quality.md, "Long context"): the committed
# long-context model (tests/models/longctx.bin) on 9 needle tasks at 4,096 characters (single,
# multikey, multivalue at depths 0.1, 0.5, 0.9), every kind at its default build, budgets 1 % and
# 2 %, eval-decode teacher forced (needle_report.py). It holds:
#   - the model retrieves: dense attention answers at least DENSE_MIN tasks exactly;
#   - the exact top-k of each build's row count keeps every answer dense attention gets;
#   - every kind's KL is below the sink + recent window's of the same rows, at every budget;
#   - pq's and clusterkv's KL over the exact top-k's at 1 % and 2 % stays under the ceilings below.
# The aims (within 2x at 2 %, 3x at 1 %) are not met yet; the ceilings are the measured ratios with
# a quarter of headroom, so a change that widens the gap fails here. Each line prints its aim.
source "${KVTOOL_SOURCE:?}/tests/cli/lib.sh"
HERE=$KVTOOL_SOURCE/tests/models
PY=/usr/bin/python3
[ -d /usr/include ] || skip "no /usr/include (the tasks' text)"
$PY "$HERE/needle_report.py" --kvtool "$KVTOOL" --work r --contexts 4096 --depths 0.1,0.5,0.9 --budgets 0.01,0.02 \
  --baselines topk,window --json rows.json >table.md || fail "needle_report.py"
cat table.md
$PY - rows.json <<'EOF2' || fail "the gate"
import json, sys
DENSE_MIN = 4  # of 9: docs/quality.md, "Long context"
AIM = {"0.01": 3.0, "0.02": 2.0}  # docs/quality.md's aims: KL within 3x (1 %) and 2x (2 %) of the exact top-k's
# Measured with this configuration (docs/quality.md, "Long context": the 4,096 rows of its table):
# pq 17.3x and 19.9x, clusterkv 11.9x and 11.9x at 1 % and 2 %; a quarter of headroom, rounded up.
CEILING = {("pq", "0.01"): 22, ("pq", "0.02"): 25, ("clusterkv", "0.01"): 15, ("clusterkv", "0.02"): 15}
rows = json.load(open(sys.argv[1]))
at = {(r["build"], r["rows"], r["setting"]): r for r in rows}
bad = []
for r in rows:
    if r["rows"] in ("topk", "window"):
        continue
    key = (r["build"], r["setting"])
    top, win = at[(r["build"], "topk", r["setting"])], at[(r["build"], "window", r["setting"])]
    if r["dense_exact"] < DENSE_MIN:
        bad.append("%s %s: dense attention answers %d of %d (at least %d)" % (*key, r["dense_exact"], r["tasks"], DENSE_MIN))
    if top["exact"] < top["dense_exact"]:
        bad.append("%s %s: the exact top-k answers %d, dense %d" % (*key, top["exact"], top["dense_exact"]))
    if not r["mean_kl"] < win["mean_kl"]:
        bad.append("%s %s: KL %.3g is not below the window's %.3g" % (*key, r["mean_kl"], win["mean_kl"]))
    ratio = r["kl_over_topk"]
    line = "%-9s %-5s KL %.3g = %.1fx top-k (window %.3g)  answers %d/%d (dense %d)" % (
        *key, r["mean_kl"], ratio, win["mean_kl"], r["exact"], r["tasks"], r["dense_exact"])
    if key in CEILING:
        line += "  ceiling %.0fx, aim %.0fx: %s" % (CEILING[key], AIM[r["setting"]],
                                                   "met" if ratio <= AIM[r["setting"]] else "not met")
        if ratio > CEILING[key]:
            bad.append("%s %s: KL %.1fx the exact top-k's, above the ceiling %.0fx" % (*key, ratio, CEILING[key]))
    print(line)
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
EOF2
finish
