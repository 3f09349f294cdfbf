#!/usr/bin/python3
"""The "Adaptive budgets" table of docs/quality.md: per shared model and budget
kind (pq, clusterkv; default builds), decoding with fixed budgets against top_p under no cap (budget
100 %: the index's estimate over every indexed row), each beside the exact top-k of the same mean
row count. A top_p setting fetches many rows for a head whose estimated attention is flat and few
for a peaked one; the question is whether that beats a fixed budget at equal mean rows.

    /usr/bin/python3 tests/quality/adaptive_report.py --kvtool build/bin/kvtool \
        --shared ../shared --work /tmp/adaptive > table.md

Every number comes from the commands it runs; nothing is edited by hand.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality_report import each_build, run  # noqa: E402

FIXED = ["0.02", "0.05", "0.1", "0.2"]
TOP_P = ["0.5", "0.8", "0.9", "0.95", "0.99"]


def main():
    print("| model | kind | setting | rows % | mean KL | top-1 | exact top-k KL, same mean rows | KL / top-k's |")
    print("|---|---|---|---|---|---|---|---|")
    for kv, shared, name, model, d, art, steps in each_build(__doc__, ("pq", "clusterkv")):
        kind = "pq" if art.endswith(".pq.kvi") else "clusterkv"
        decode = [kv, "eval-decode", art, "--llama2c", os.path.join(shared, "models", model), "--source", d,
                  "--steps", str(steps), "--baseline", "topk", "--json", "-q"]
        fixed = json.loads(run(decode + sum((["--budget", b] for b in FIXED), [])))["results"]
        adaptive = json.loads(run(decode + ["--budget", "100%"] + sum((["--top-p", p] for p in TOP_P), [])))["results"]
        rs = fixed + adaptive
        for i, r in enumerate(rs):
            if r["kind"] != kind:
                continue
            base = rs[i + 1]
            assert base["kind"] == "topk" and base["setting"] == r["setting"], (r, base)
            ratio = r["mean_kl"] / base["mean_kl"] if base["mean_kl"] > 0 else float("nan")
            print("| %s | %s | %s | %.1f | %.3g | %.3f | %.3g | %.2f |" % (
                name, kind, r["setting"], 100 * r["selected_fraction"], r["mean_kl"], r["top1_agreement"],
                base["mean_kl"], ratio))


if __name__ == "__main__":
    main()
