#!/usr/bin/env python3
"""How much of an index's decode KL is its build seed (docs/reports/quality-runs.md, "Build-seed spread").
For each shared model (docs/quality.md's dumps: prefix 384 / 192 / 384, 64 / 48 / 64 decode
steps), pq and clusterkv are built with their defaults and --seed 0..SEEDS-1; one `kvtool
eval-decode` decodes every build at budgets 0.05 / 0.1 / 0.2 with the exact top-k beside them.
Prints, per model, kind and budget, the KL of each seed over the exact top-k's and their spread.

  /usr/bin/python3 tests/quality/sweep/seed_spread.py --kvtool build/bin/kvtool --shared ../shared --work /tmp/seeds
  (--clusterkv-args "--centroid-dtype f16": the previous clusterkv default; --pq-args "--loss
  anisotropic": score-aware codebooks, docs/reports/defaults-sweep.md section 5)
"""
import argparse
import json
import math
import os
import subprocess

MODELS = [  # name, model, tokenizer, dump options, prefix, decode steps (as tests/quality/quality_report.py)
    ("stories260K", "stories260K.bin", "tok512.bin", ["--tokens", "512"], 384, 64),
    ("babyllama361", "babyllama361.bin", None, ["--tokens", "256"], 192, 48),
    ("cheaders", "cheaders.bin", "tok128c.bin", ["--tokens", "512", "--prompt-file", "cheaders.prompt.txt"], 384, 64),
]
KINDS = ["pq", "clusterkv"]
BUDGETS = ["0.05", "0.1", "0.2"]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvtool", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--clusterkv-args", default="", help='more clusterkv build options, e.g. "--centroid-dtype f16"')
    ap.add_argument("--pq-args", default="", help='more pq build options, e.g. "--loss anisotropic"')
    ap.add_argument("--budgets", default=",".join(BUDGETS))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    models = os.path.join(a.shared, "models")
    print("| model | kind | budget | exact top-k KL | KL / top-k, seed 0..%d | median | max |" % (a.seeds - 1))
    print("|---|---|---|---|---|---|---|")
    for name, model, tok, opts, prefix, steps in MODELS:
        dump = os.path.join(a.work, name + ".h5")
        opts = [open(os.path.join(models, o)).read() if o.endswith(".txt") else o for o in opts]
        opts = ["--prompt" if o == "--prompt-file" else o for o in opts]
        cmd = [a.kvtool, "dump", "--llama2c", os.path.join(models, model), "--queries", "-o", dump, "-q", "--force"]
        run(cmd + opts + (["--tokenizer", os.path.join(models, tok)] if tok else []))
        arts = []
        for kind in KINDS:
            for seed in range(a.seeds):
                art = os.path.join(a.work, "%s.%s.s%d.kvi" % (name, kind, seed))
                more = (a.clusterkv_args if kind == "clusterkv" else a.pq_args).split()
                run([a.kvtool, "build", kind, dump, "--prefix", str(prefix), "--seed", str(seed), "-o", art, "-q",
                     "--force"] + more)
                arts.append((kind, seed, art))
        cmd = [a.kvtool, "eval-decode"] + [x[2] for x in arts] + ["--llama2c", os.path.join(models, model), "--source",
                                                                   dump, "--steps", str(steps), "--json", "-q",
                                                                   "--baseline", "topk"]
        budgets = a.budgets.split(",")
        results = json.loads(run(cmd + sum((["--budget", b] for b in budgets), [])))["results"]
        topk = {r["budget"]: r["mean_kl"] for r in results if r["kind"] == "topk"}
        for kind in KINDS:
            for b in budgets:
                kl = [r["mean_kl"] for r in results if r["kind"] == kind and math.isclose(r["budget"], float(b))
                      for x in arts if x[2] == r["artifact"] and x[0] == kind]
                ref = [v for k, v in topk.items() if math.isclose(k, float(b))][0]
                ratios = sorted(v / ref for v in kl)
                print("| %s | %s | %s | %.5f | %s | %.2f× | %.2f× |" % (
                    name, kind, b, ref, " ".join("%.2f" % (v / ref) for v in kl), ratios[len(ratios) // 2],
                    ratios[-1]))


if __name__ == "__main__":
    main()
