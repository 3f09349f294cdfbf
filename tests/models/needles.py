#!/usr/bin/python3
"""Needle tasks in the style of RULER for the long-context test model (tests/models/README.md), generated
deterministically: C header text (longctx_data.header_corpus, a part the model was not trained on
first: the corpus's last tenth) of a given length with planted facts `/* fact KEY = VALUE */`, ending
in the question `/* ask KEY = ` and the VALUE (teacher forced: the dump holds the answer).

  single    one fact at the given depth, asked at the end
  multikey  8 facts with different keys; the one at the given depth is asked
  multivalue  4 facts with one key and 4 values, the first at the given depth and the others spread
            evenly after it; the question's answer is the 4 values in document order, separated by
            spaces (RULER's multi-value needle)

Writes, per task, NAME.json: {"token_ids": [BOS, ...], "ask": position of the question's first
token, "answer": [start, end) token positions of VALUE, "key", "value", "depth", "context"}: for
`kvtool dump --gguf M --token-ids` (token_ids only: see --ids-only) and `kvtool eval-decode --answer`.

Usage: needles.py --out DIR [--contexts 2048,4096,8192] [--depths 0.1,0.3,0.5,0.7,0.9] [--seed 7]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import longctx_data as data  # noqa: E402


KINDS = ["single", "multikey", "multivalue"]


def task(rng, corpus, context, depth, kind):
    n_facts = {"single": 1, "multikey": 8, "multivalue": 4}[kind]
    facts = [(data.random_word(rng, data.KEY_CHARS, 4), data.random_word(rng, data.VALUE_CHARS, 6))
             for _ in range(n_facts)]
    asked = 0 if kind != "multikey" else int(rng.integers(0, n_facts))
    if kind == "multivalue":
        facts = [(facts[0][0], v) for _, v in facts]
    key, value = facts[asked]
    if kind == "multivalue":
        value = " ".join(v for _, v in facts)
    question = "/* ask %s = " % key
    tail = question + value + " */\n"
    body_len = context - 1 - len(tail)  # BOS, the document, the question and answer
    lines = [data.fact(k, v) for k, v in facts]
    filler_len = body_len - sum(len(s) for s in lines)
    start = int(rng.integers(0, len(corpus) - filler_len - 1))
    filler = corpus[start:start + filler_len]
    # The asked fact at `depth` of the document, the others spread evenly around it.
    if kind == "multivalue":
        where = [(depth + (1 - depth) * i / n_facts, s) for i, s in enumerate(lines)]
    else:
        where = sorted(((depth if i == asked else (i + 0.5) / n_facts), s) for i, s in enumerate(lines))
    out, taken = [], 0
    for d, s in where:
        cut = max(int(d * filler_len), taken)
        cut = filler.rfind("\n", taken, cut) + 1 or cut  # at a line start, as the facts were trained
        out += [filler[taken:cut], s]
        taken = cut
    doc = "".join(out) + filler[taken:]
    text = doc + tail
    ids = [data.BOS] + [int(c) for c in text.encode("ascii")]
    ask = 1 + len(doc)
    v0 = ask + len(question)
    return {"token_ids": ids, "ask": ask, "answer": [v0, v0 + len(value)], "key": key, "value": value,
            "depth": depth, "context": context, "kind": kind}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="2048,4096,8192")
    ap.add_argument("--depths", default="0.1,0.3,0.5,0.7,0.9")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    corpus = data.header_corpus()
    corpus = corpus[int(len(corpus) * 0.9):]  # text the training windows were least likely drawn from
    os.makedirs(args.out, exist_ok=True)
    for kind in args.kinds.split(","):
        for ctx in (int(c) for c in args.contexts.split(",")):
            for depth in (float(d) for d in args.depths.split(",")):
                # One generator per task, seeded by what names it: a task does not depend on which
                # other contexts, depths or kinds were asked for in the same run.
                rng = np.random.default_rng([args.seed, KINDS.index(kind), ctx, int(round(depth * 1000))])
                t = task(rng, corpus, ctx, depth, kind)
                name = "%s-%d-%02d" % (kind, ctx, int(round(depth * 100)))
                with open(os.path.join(args.out, name + ".json"), "w") as f:
                    json.dump(t, f)
                with open(os.path.join(args.out, name + ".ids.json"), "w") as f:
                    json.dump(t["token_ids"], f)
                print(name, "ask", t["ask"], "answer", t["answer"], len(t["token_ids"]))


if __name__ == "__main__":
    main()
