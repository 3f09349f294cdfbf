#!/usr/bin/python3
"""Writes the tables of docs/reports/quality-runs.md: per shared model and index kind (default build options),
at 5 / 10 / 20 % with and without a x4 rerank, the retained-mass ratio (`kvtool eval`), KL and
top-1 agreement of decoding (`kvtool eval-decode`), index bytes as % of the K+V they cover, and
beside each setting the exact top-k, window and static heavy-hitter selections of the same row
count, per query head and shared per KV head.

    /usr/bin/python3 tests/quality/quality_report.py --kvtool build/bin/kvtool \
        --shared ../shared --work /tmp/quality > tables.md

Every number comes from the two commands it runs; nothing is edited by hand.
"""
import argparse
import json
import os
import subprocess
import sys

# (name, model, tokenizer, dump options, prefix rows, decode steps)
MODELS = [
    ("stories260K", "stories260K.bin", "tok512.bin", ["--tokens", "512"], 384, 64),
    ("babyllama361", "babyllama361.bin", None, ["--tokens", "256"], 192, 48),
    ("cheaders", "cheaders.bin", "tok128c.bin", ["--tokens", "512", "--prompt-file", "cheaders.prompt.txt"], 384, 64),
]
BUDGETS = ["0.05", "0.1", "0.2"]
KINDS = ["pq", "clusterkv", "squeeze", "lsh"]
BASELINES = ["topk", "window", "heavy"]


def run(args, quiet=False):
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if quiet else None)
    return out.stdout.decode()


def dump(kv, shared, work, name, model, tok, opts):
    path = os.path.join(work, name + ".h5")
    if os.path.exists(path):
        return path
    cmd = [kv, "dump", "--llama2c", os.path.join(shared, "models", model), "--queries", "-o", path, "-q"]
    if tok:
        cmd += ["--tokenizer", os.path.join(shared, "models", tok)]
    for i, o in enumerate(opts):
        if o == "--prompt-file":
            cmd += ["--prompt", open(os.path.join(shared, "models", opts[i + 1])).read()]
        elif i == 0 or opts[i - 1] != "--prompt-file":
            cmd.append(o)
    run(cmd)
    return path


def each_build(doc, kinds):
    """For the reports beside this one (adaptive_report.py, zone_report.py): their command line
    (--kvtool, --shared, --work), then per shared model and kind its dump and default build, as
    (kvtool, shared folder, name, model file, dump, artifact, decode steps)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    for name in ("--kvtool", "--shared", "--work"):
        ap.add_argument(name, required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    for name, model, tok, opts, prefix, steps in MODELS:
        d = dump(args.kvtool, args.shared, args.work, name, model, tok, opts)
        for kind in kinds:
            art = os.path.join(args.work, "%s.%s.kvi" % (name, kind))
            if not os.path.exists(art):
                run([args.kvtool, "build", kind, d, "--prefix", str(prefix), "-o", art, "-q"])
            yield args.kvtool, args.shared, name, model, d, art, steps


def settings_flags(kind):
    """What each kind sweeps: the budgets with and without a x4 rerank (pq, clusterkv), squeeze's
    rank budgets; lsh its collision thresholds, which set its own row counts."""
    if kind == "lsh":
        return ["--min-collisions", "2", "--min-collisions", "4", "--min-collisions", "8"]
    if kind == "squeeze":
        return sum((["-o", "rank_budget=" + b] for b in BUDGETS), [])
    flags = sum((["--budget", b] for b in BUDGETS), [])
    return flags + (["--rerank", "1", "--rerank", "4"] if kind in ("pq", "clusterkv") else [])


def measure(kv, shared, dumpf, art, kind, model, steps):
    """eval's retained-mass ratio and eval-decode's results (per head and shared), by setting."""
    flags = settings_flags(kind)
    ev = json.loads(run([kv, "eval", art, "--source", dumpf, "--json", "-q"] + flags))
    ratio = {}
    for b in ev["budgets"]:
        ratio[label_of(b["selector"])] = b["quality_ratio"]
    dec = {}
    for share in (False, True):
        cmd = [kv, "eval-decode", art, "--llama2c", os.path.join(shared, "models", model), "--source", dumpf,
               "--steps", str(steps), "--json", "-q"] + flags + sum((["--baseline", b] for b in BASELINES), [])
        if share:
            cmd.append("--share-kv-head")
        dec[share] = json.loads(run(cmd))["results"]
    return ev["index_bytes"]["stored_fraction"], ratio, dec


def label_of(selector):
    if "min_collisions" in selector:
        return "c=%d" % selector["min_collisions"]
    lab = selector["budget"]
    if selector.get("rerank", 1) > 1:
        lab += " r%g" % selector["rerank"]
    return lab


def rows(results):
    """eval-decode's results grouped: the artifact's row followed by its baselines."""
    groups, cur = [], None
    for r in results:
        if r["kind"] in BASELINES:
            cur[1][r["kind"]] = r
        else:
            cur = (r, {})
            groups.append(cur)
    return groups


def table(name, kinds):
    out = []
    for kind, (fraction, ratio, dec) in kinds.items():
        out.append("\n#### %s — %s (index %.1f %% of K+V stored)\n" % (name, kind, 100 * fraction))
        out.append("| setting | ratio | selected | KV-head union | KL | top-1 | topk KL | window KL | heavy KL "
                   "| shared: KL | top-1 | topk KL | window KL | heavy KL |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        shared = {g[0]["setting"]: g for g in rows(dec[True])}
        for art, base in rows(dec[False]):
            sh, sb = shared[art["setting"]]
            ratio_v = ratio.get(art["setting"])
            out.append("| %s | %s | %.3f | %.3f | %.4f | %.3f | %.4f | %.4f | %.4f | %.4f | %.3f | %.4f | %.4f | %.4f |" % (
                art["setting"], "%.3f" % ratio_v if ratio_v is not None else "—", art["selected_fraction"],
                art["selected_fraction_kv_union"], art["mean_kl"], art["top1_agreement"], base["topk"]["mean_kl"],
                base["window"]["mean_kl"], base["heavy"]["mean_kl"], sh["mean_kl"], sh["top1_agreement"],
                sb["topk"]["mean_kl"], sb["window"]["mean_kl"], sb["heavy"]["mean_kl"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvtool", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default=",".join(m[0] for m in MODELS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    kv = os.path.abspath(a.kvtool)
    for name, model, tok, opts, prefix, steps in MODELS:
        if name not in a.models.split(","):
            continue
        dumpf = dump(kv, a.shared, a.work, name, model, tok, opts)
        kinds = {}
        for kind in a.kinds.split(","):
            art = os.path.join(a.work, "%s.%s.kvi" % (name, kind))
            run([kv, "build", kind, dumpf, "--prefix", str(prefix), "-o", art, "-q", "--force"])
            kinds[kind] = measure(kv, a.shared, dumpf, art, kind, model, steps)
        print("\n### %s (prefix %d, %d decode steps)" % (name, prefix, steps))
        print(table(name, kinds))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
