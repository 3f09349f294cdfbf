#!/usr/bin/env python3
"""The always-included sink rows of pq and clusterkv at equal selected rows (docs/reports/defaults-sweep.md,
"Sinks"). For each shared model and prefix, each kind is built with several --sink counts; every
build is decoded (kvtool eval-decode) and evaluated (kvtool eval) at the row counts its default
sink count selects at budgets 0.05 / 0.1 / 0.2, so each row of the table compares the same number
of attended rows, only split differently between fixed first rows and index-chosen ones.

  /usr/bin/python3 tests/quality/sweep/sinks.py --kvtool build/bin/kvtool --shared ../shared --work /tmp/sinks
"""
import argparse
import json
import os
import subprocess

MODELS = [  # name, model, tokenizer, dump options, prefixes, decode steps
    ("stories260K", "stories260K.bin", "tok512.bin", ["--tokens", "512"], [128, 384], 64),
    ("babyllama361", "babyllama361.bin", None, ["--tokens", "256"], [96, 192], 48),
    ("cheaders", "cheaders.bin", "tok128c.bin", ["--tokens", "512"], [128, 384], 64),
]
KINDS = {"pq": 32, "clusterkv": 16}  # kind -> its default sink count
SINKS = [32, 16, 8, 4, 2, 1, 0]
FRACTIONS = [0.05, 0.1, 0.2]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvtool", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--json", help="write every measurement here")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    models = os.path.join(a.shared, "models")
    out = []
    for name, model, tok, opts, prefixes, steps in MODELS:
        dump = os.path.join(a.work, name + ".h5")
        cmd = [a.kvtool, "dump", "--llama2c", os.path.join(models, model), "--queries", "-o", dump, "-q", "--force"] + opts
        if tok:
            cmd += ["--tokenizer", os.path.join(models, tok)]
        if name == "cheaders":
            cmd += ["--prompt", open(os.path.join(models, "cheaders.prompt.txt")).read()]
        run(cmd)
        for prefix in prefixes:
            for kind, s0 in KINDS.items():
                # rows the default selects: its sinks + the budget's share of the indexed rows
                totals = [s0 + max(1, round(f * (prefix - s0))) for f in FRACTIONS]
                for sink in [s for s in SINKS if s <= s0]:  # fewer sinks than the default, same rows
                    art = os.path.join(a.work, "%s.%d.%s.s%d.kvi" % (name, prefix, kind, sink))
                    run([a.kvtool, "build", kind, dump, "--prefix", str(prefix), "--sink", str(sink), "-o", art, "-q",
                         "--force"])
                    budgets = [str(t - sink) for t in totals]
                    dec = json.loads(run([a.kvtool, "eval-decode", art, "--llama2c", os.path.join(models, model),
                                          "--source", dump, "--steps", str(steps), "--json", "-q", "--budget"] + budgets))
                    ev = json.loads(run([a.kvtool, "eval", art, "--source", dump, "--json", "-q", "--budget"] + budgets))
                    ratios = [b["quality_ratio"] for b in ev["budgets"]]
                    for r, ratio, total in zip(dec["results"], ratios, totals):
                        row = {"model": name, "prefix": prefix, "kind": kind, "sink": sink, "rows": total,
                               "selected_fraction": r["selected_fraction"], "mean_kl": r["mean_kl"],
                               "top1": r["top1_agreement"], "ratio": ratio}
                        out.append(row)
                        print("%-12s P%-4d %-9s sink %-2d rows %-3d sel %.3f  KL %.4f  top1 %.3f  ratio %.3f" %
                              (name, prefix, kind, sink, total, row["selected_fraction"], row["mean_kl"], row["top1"],
                               ratio), flush=True)
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
