#!/usr/bin/python3
"""The long-context table of docs/quality.md (issue 51): the long-context test model
(tests/models/longctx.bin, as GGUF through tests/llamacpp/llama2c_to_gguf.py) on needle tasks
(needles.py) at each context and depth; per context, index kind (default builds, prefix = the
document before the question) and budget: answer exact-match accuracy under teacher forcing
(eval-decode --answer), mean KL and top-1 agreement of the question-and-answer steps, recall@k, and
the exact top-k, window and heavy-hitter selections of the same row counts; dense accuracy first.

    /usr/bin/python3 tests/models/needle_report.py --kvtool build/bin/kvtool --work /tmp/needles \
        [--contexts 2048,4096,8192] [--budgets 0.005,0.01,0.02,0.05] > table.md

Every number comes from the commands it runs; nothing is edited by hand.
"""
import argparse
import collections
import json
import os
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvtool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", default=os.path.join(HERE, "longctx.bin"), help="llama2.c checkpoint")
    ap.add_argument("--tokenizer", help="its character-level tokenizer (default: longctx.tok.bin beside it)")
    ap.add_argument("--contexts", default="2048,4096,8192")
    ap.add_argument("--depths", default="0.1,0.3,0.5,0.7,0.9")
    ap.add_argument("--kinds", default="single,multikey,multivalue")
    ap.add_argument("--budgets", default="0.005,0.01,0.02,0.05")
    ap.add_argument("--index-kinds", default=",".join(KINDS))
    args = ap.parse_args()
    kv, w = args.kvtool, args.work
    os.makedirs(w, exist_ok=True)
    gguf = os.path.join(w, "longctx.gguf")
    tok = args.tokenizer or os.path.join(os.path.dirname(args.model), "longctx.tok.bin")
    run([sys.executable, os.path.join(HERE, "..", "llamacpp", "llama2c_to_gguf.py"), args.model, "--tokenizer", tok,
         "-o", gguf])
    run([sys.executable, os.path.join(HERE, "needles.py"), "--out", os.path.join(w, "tasks"), "--contexts",
         args.contexts, "--depths", args.depths, "--kinds", args.kinds])
    budgets = args.budgets.split(",")
    # (context, row kind, budget) -> [exact answers], [kl], [top1], [recall], [fraction]
    acc = collections.defaultdict(lambda: collections.defaultdict(list))
    for name in sorted(os.listdir(os.path.join(w, "tasks"))):
        if not name.endswith(".json") or name.endswith(".ids.json"):
            continue
        t = json.load(open(os.path.join(w, "tasks", name)))
        base = os.path.join(w, name[:-5])
        dump = base + ".h5"
        if not os.path.exists(dump):
            run([kv, "dump", "--gguf", gguf, "--token-ids", os.path.join(w, "tasks", name[:-5] + ".ids.json"),
                 "--queries", "-o", dump, "-q"])
        arts = []
        for k in args.index_kinds.split(","):
            art = "%s.%s.kvi" % (base, k)
            if not os.path.exists(art):
                run([kv, "build", k, dump, "--prefix", str(t["ask"]), "-o", art, "-q"])
            arts.append(art)
        steps = t["answer"][1] - 1 - t["ask"]
        flags = sum((settings(k, budgets) for k in args.index_kinds.split(",")), [])
        out = json.loads(run([kv, "eval-decode", *arts, "--gguf", gguf, "--source", dump, "--steps", str(steps),
                              "--answer", "%d:%d" % tuple(t["answer"]), *flags,
                              *sum((["--baseline", b] for b in BASELINES), []), "--json", "-q"]))
        for r in out["results"]:
            setting = r["setting"].replace("rank_budget=", "")
            key = (t["context"], r["kind"], setting)
            a = acc[key]
            a["exact"].append(r["answer"]["exact"])
            a["dense"].append(r["answer"]["dense_exact"])
            for m in ("mean_kl", "top1_agreement", "recall_at_k", "selected_fraction"):
                a[m].append(r[m])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print("| context | kind | setting | rows % | answer exact | dense exact | mean KL | top-1 | recall@k |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(acc, key=lambda k: (k[0], k[1] in BASELINES, k[1], k[2])):
        a = acc[key]
        print("| %d | %s | %s | %.2f | %d/%d | %d/%d | %.3g | %.3f | %.3f |" % (
            key[0], key[1], key[2], 100 * mean(a["selected_fraction"]), sum(a["exact"]), len(a["exact"]),
            sum(a["dense"]), len(a["dense"]), mean(a["mean_kl"]), mean(a["top1_agreement"]), mean(a["recall_at_k"])))


if __name__ == "__main__":
    main()
