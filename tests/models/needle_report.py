#!/usr/bin/python3
"""The long-context table of docs/quality.md ("Long context"): the long-context test model
(tests/models/longctx.bin, as GGUF through tests/llamacpp/llama2c_to_gguf.py) on needle tasks
(needles.py) at each context, depth and task seed. Per context, index build (--variant; default:
each kind's default build) and budget, on the document before the question: answer exact-match
accuracy under teacher forcing (eval-decode --answer), mean KL and top-1 agreement of the
question-and-answer steps, recall@k, the index's bytes, and the exact top-k, window and
heavy-hitter selections of the same row counts as that build.

    /usr/bin/python3 tests/models/needle_report.py --kvtool build/bin/kvtool --work /tmp/needles \
        [--contexts 2048,4096,8192] [--budgets 0.005,0.01,0.02,0.05] \
        [--variant "pq-m16b8=pq -m 16 -b 8" ...] [--query="--rerank 4"] [--json rows.json] > table.md

Every number comes from the commands it runs; nothing is edited by hand. Dumps and builds are made
anew on every run (a few seconds), so a table never mixes files of another model or binary.
"""
import argparse
import collections
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ["pq", "clusterkv", "squeeze", "lsh"]
BASELINES = ["topk", "window", "heavy"]


def run(args):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE).stdout.decode()


def settings(kind, budgets):
    if kind == "lsh":
        return []  # its own collision threshold sets its rows
    if kind == "squeeze":
        return sum((["-o", "rank_budget=" + b] for b in budgets), [])
    return sum((["--budget", b] for b in budgets), [])


def base_setting(setting):
    """The setting whose baselines a row shares: "+est" (--estimated-zone) fetches the same rows."""
    return setting[:-len(" +est")] if setting.endswith(" +est") else setting


def variants(specs):
    """NAME=KIND [BUILD ARGS] -> (name, kind, args); a bare KIND is its default build."""
    out = []
    for s in specs:
        name, _, rest = s.partition("=")
        words = shlex.split(rest or name)
        out.append((name, words[0], words[1:]))
    return out


def index_percent(kv, art):
    """Raw section bytes as % of the part's K+V at f16 (what an engine holds), whatever the dump's dtype."""
    ib = json.loads(run([kv, "inspect", art, "--json"]))["index_bytes"]
    f16_kv = ib["kv_bytes"] * 2 // (4 if ib["kv_dtype"] == "float32" else 2)
    return 100.0 * ib["raw"] / f16_kv


def measure_task(args, gguf, tasks_dir, name, acc):
    kv, w = args.kvtool, args.work
    t = json.load(open(os.path.join(tasks_dir, name + ".json")))
    base = os.path.join(w, name)
    dump = base + ".h5"
    run([kv, "dump", "--gguf", gguf, "--token-ids", os.path.join(tasks_dir, name + ".ids.json"), "--queries", "-o",
         dump, "-q", "--force"])
    steps = t["answer"][1] - 1 - t["ask"]
    for vname, kind, build_args in variants(args.variant or KINDS):
        art = "%s.%s.kvi" % (base, vname)
        run([kv, "build", kind, dump, "--prefix", str(t["ask"]), "-o", art, "-q", "--force", *build_args])
        percent = index_percent(kv, art)
        out = json.loads(run([kv, "eval-decode", art, "--gguf", gguf, "--source", dump, "--steps", str(steps),
                              "--answer", "%d:%d" % tuple(t["answer"]), *settings(kind, args.budgets.split(",")),
                              *shlex.split(args.query), *sum((["--baseline", b] for b in args.baselines.split(",")), []), "--json",
                              "-q"]))
        for r in out["results"]:
            a = acc[(t["context"], vname, r["setting"].replace("rank_budget=", ""), r["kind"])]
            a["exact"].append(r["answer"]["exact"])
            a["dense"].append(r["answer"]["dense_exact"])
            a["index_percent"].append(percent if r["kind"] == kind else 0.0)
            for m in ("mean_kl", "top1_agreement", "recall_at_k", "selected_fraction"):
                a[m].append(r[m])


def table(acc, order):
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    rows = []
    for key in sorted(acc, key=lambda k: (k[0], order.index(k[1]), k[2], k[3] in BASELINES, BASELINES.index(k[3])
                                          if k[3] in BASELINES else 0)):
        a = acc[key]
        topk = acc.get((key[0], key[1], base_setting(key[2]), "topk"))
        rows.append({"context": key[0], "build": key[1], "setting": key[2], "rows": key[3],
                     "selected_percent": 100 * mean(a["selected_fraction"]), "index_percent": mean(a["index_percent"]),
                     "exact": sum(a["exact"]), "dense_exact": sum(a["dense"]), "tasks": len(a["exact"]),
                     "mean_kl": mean(a["mean_kl"]), "kl_over_topk": mean(a["mean_kl"]) / mean(topk["mean_kl"])
                     if topk and mean(topk["mean_kl"]) > 0 else None,
                     "top1": mean(a["top1_agreement"]), "recall_at_k": mean(a["recall_at_k"])})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvtool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", default=os.path.join(HERE, "longctx.bin"), help="llama2.c checkpoint")
    ap.add_argument("--tokenizer", help="its character-level tokenizer (default: longctx.tok.bin beside it)")
    ap.add_argument("--contexts", default="2048,4096,8192")
    ap.add_argument("--depths", default="0.1,0.3,0.5,0.7,0.9")
    ap.add_argument("--kinds", default="single,multikey,multivalue", help="needle task kinds")
    ap.add_argument("--seeds", default="7", help="task seeds (needles.py --seed), comma-separated")
    ap.add_argument("--budgets", default="0.005,0.01,0.02,0.05")
    ap.add_argument("--variant", action="append", metavar="NAME=KIND [ARGS]",
                    help="an index build (repeatable): NAME=KIND and `kvtool build` options, or a bare KIND "
                    "(default: %s at their defaults)" % ", ".join(KINDS))
    ap.add_argument("--query", default="",
                    help="more eval-decode options for every build, given as --query=OPTIONS: e.g. --query=\"--rerank 4\", "
                    "--query=\"--top-p 0.9\" (the budget is its cap) or --query=--estimated-zone (adds \"+est\" rows)")
    ap.add_argument("--baselines", default=",".join(BASELINES),
                    help="eval-decode baselines beside each build (topk is the one KL / top-k needs)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    gguf = os.path.join(args.work, "longctx.gguf")
    tok = args.tokenizer or os.path.join(os.path.dirname(args.model), "longctx.tok.bin")
    run([sys.executable, os.path.join(HERE, "..", "llamacpp", "llama2c_to_gguf.py"), args.model, "--tokenizer", tok,
         "-o", gguf])
    acc = collections.defaultdict(lambda: collections.defaultdict(list))
    for seed in args.seeds.split(","):
        tasks_dir = os.path.join(args.work, "tasks-%s" % seed)
        run([sys.executable, os.path.join(HERE, "needles.py"), "--out", tasks_dir, "--contexts", args.contexts,
             "--depths", args.depths, "--kinds", args.kinds, "--seed", seed])
        for name in sorted(os.listdir(tasks_dir)):
            if name.endswith(".json") and not name.endswith(".ids.json"):
                measure_task(args, gguf, tasks_dir, name[:-5], acc)
    rows = table(acc, [v[0] for v in variants(args.variant or KINDS)])
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)
    print_table(rows)


def print_table(rows):
    """One line per context, build and setting; its baselines (same rows) as columns."""
    at = {(r["context"], r["build"], r["setting"], r["rows"]): r for r in rows}
    print("| context | build | setting | rows % | index % of K+V | answers | dense | mean KL | KL / top-k | top-1 "
          "| recall@k | top-k answers, KL | window answers, KL | heavy answers, KL |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["rows"] in BASELINES:
            continue
        base = []
        for b in BASELINES:
            x = at.get((r["context"], r["build"], base_setting(r["setting"]), b))
            base.append("%d, %.3g" % (x["exact"], x["mean_kl"]) if x else "-")
        print("| %d | %s | %s | %.2f | %.2f | %d/%d | %d | %.3g | %s | %.3f | %.3f | %s |" % (
            r["context"], r["build"], r["setting"], r["selected_percent"], r["index_percent"], r["exact"], r["tasks"],
            r["dense_exact"], r["mean_kl"], "%.1f" % r["kl_over_topk"] if r["kl_over_topk"] is not None else "-",
            r["top1"], r["recall_at_k"], " | ".join(base)))

if __name__ == "__main__":
    main()
