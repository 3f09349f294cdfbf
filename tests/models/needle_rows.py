#!/usr/bin/python3
"""Where a needle task's answer rows are, for one index (docs/quality.md, "Long context"): at each
step that predicts an answer character, per layer and query head, the rank of the fact's matching
row by exact q.k over the prefix, the softmax mass the head puts on it, and whether the artifact's
selection at the budget (`kvtool query`) holds it.

    /usr/bin/python3 tests/models/needle_rows.py --kvtool build/bin/kvtool --task T.json --dump T.h5 \
        --artifact T.pq.kvi --budget 0.02

T.json is a needles.py task (single or multikey: one value), T.h5 its dump (`kvtool dump --gguf
--token-ids T.ids.json --queries`) and the artifact a build over the document before the question.
"""
import argparse
import json
import subprocess

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for a in ("--kvtool", "--task", "--dump", "--artifact"):
        ap.add_argument(a, required=True)
    ap.add_argument("--budget", default="0.02")
    args = ap.parse_args()
    t = json.load(open(args.task))
    if t["kind"] == "multivalue":
        raise SystemExit("needle_rows.py: a multivalue task has 4 facts; give a single or multikey task")
    ids, (a0, a1), prefix = t["token_ids"], t["answer"], t["ask"]
    fact = bytes(ids[1:]).decode("ascii").find("/* fact %s = " % t["key"]) + 1  # + 1: the BOS
    first = fact + len("/* fact %s = " % t["key"])  # the fact's first value character
    with h5py.File(args.dump, "r") as f:
        k, q, q_to_kv = f["kv/k"][:], f["kv/q"][:], f.attrs["q_to_kv_head"]
    d = k.shape[-1]
    print("step layer head  exact rank  mass  selected")
    for step in range(a0 - 1, a1 - 1):  # the step at position p predicts the character at p + 1
        row = first + step - (a0 - 1)  # the row after the fact character the step just read
        for layer in range(k.shape[0]):
            for head in range(q.shape[1]):
                s = k[layer, q_to_kv[head], :prefix] @ q[layer, head, step] / np.sqrt(d)
                p = np.exp(s - s.max())
                p /= p.sum()
                out = subprocess.run([args.kvtool, "query", args.artifact, "--source", args.dump, "--layer", str(layer),
                                      "--q-head", str(head), "--position", str(step), "--budget", args.budget,
                                      "--json"], check=True, stdout=subprocess.PIPE).stdout
                r = json.loads(out)
                held = row in set(r["candidates"]) | set(r["always_included"])
                print("%4d %5d %4d  %10d  %.3f  %s" % (step, layer, head, int((s > s[row]).sum()), p[row],
                                                       "yes" if held else "no"))


if __name__ == "__main__":
    main()
