#!/usr/bin/python3
"""The "Estimated zone" table of docs/quality.md: per shared model and cluster
kind (clusterkv; squeeze at rank budgets; default builds), decoding at fixed budgets with and
without RetroInfer's estimated zone (eval-decode --estimated-zone: every cluster's left-out rows
attended as one entry, the centroid's score weighted by their count, their mean value), at equal
fetched rows, beside the exact top-k of the same rows.

    /usr/bin/python3 tests/quality/zone_report.py --kvtool build/bin/kvtool \
        --shared ../shared --work /tmp/zone > table.md

Every number comes from the commands it runs; nothing is edited by hand.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality_report import each_build, run  # noqa: E402

BUDGETS = ["0.02", "0.05", "0.1", "0.2"]


def flags(kind):
    if kind == "squeeze":
        return sum((["-o", "rank_budget=" + b] for b in BUDGETS), [])
    return sum((["--budget", b] for b in BUDGETS), [])


def main():
    print("| model | kind | setting | rows % | mean KL | + estimated zone | ratio | top-1 | + zone | exact top-k KL |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kv, shared, name, model, d, art, steps in each_build(__doc__, ("clusterkv", "squeeze")):
        kind = "squeeze" if art.endswith(".squeeze.kvi") else "clusterkv"
        extra = ["--quantile", "0.9"] if kind == "squeeze" else []
        rs = json.loads(run([kv, "eval-decode", art, "--llama2c", os.path.join(shared, "models", model), "--source", d,
                             "--steps", str(steps), "--baseline", "topk", "--estimated-zone", "--json", "-q"] +
                            flags(kind) + extra))["results"]
        for i, r in enumerate(rs):
            if r["kind"] != kind or r["estimated_zone"]:
                continue
            base, est = rs[i + 1], rs[i + 2]
            assert base["kind"] == "topk" and est["estimated_zone"] and est["setting"] == r["setting"] + " +est"
            print("| %s | %s | %s | %.1f | %.3g | %.3g | %.2f | %.3f | %.3f | %.3g |" % (
                name, kind, r["setting"].replace("rank_budget=", "rb "), 100 * r["selected_fraction"],
                r["mean_kl"], est["mean_kl"], est["mean_kl"] / r["mean_kl"] if r["mean_kl"] else float("nan"),
                r["top1_agreement"], est["top1_agreement"], base["mean_kl"]))


if __name__ == "__main__":
    main()
