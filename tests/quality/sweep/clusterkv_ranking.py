#!/usr/bin/env python3
"""Is clusterkv's gap in its cluster ranking or in its clusters? (docs/reports/defaults-sweep.md, 3.2)

A numpy model of clusterkv's selection on a real dump (cosine k-means of each part's indexed keys
into round(mult * 410 (n / 32768)^(1/3)) clusters, raw-mean centroids, 1 sink row, whole clusters
best first until the budget, the last one cut), scored for every query after the prefix by the
retained softmax mass over the prefix rows, against the dense top-k with the same rows. The
clusters stay fixed; only the ranking changes:

  mean      q . centroid (what clusterkv stores and ranks by)
  lognormal mean + the variance term of a log-normal cluster, |q|^2 r^2 / (2 d^2) (r^2: the mean
            squared distance of the members to the centroid)
  diag      mean + q^2 . (per-dimension member variance) / (2 d)
  box       the per-dimension min/max bound of q . k over the members (Quest's)
  ball      q . centroid + |q| * (largest member distance to the centroid)
  lme       log-mean-exp of the members' true scores (needs every key: the ceiling of any
            ranking of these clusters)
  max       the members' best true score (needs every key)

  /usr/bin/python3 tests/quality/sweep/clusterkv_ranking.py DUMP.h5 PREFIX BUDGET [MULT]

The k-means is numpy's, not kvtool's (FAISS), so the mean ranking's ratio is near, not equal to,
`kvtool eval`'s.
"""
import sys

import h5py
import numpy as np


def kmeans_cosine(x, c, rng, iters=20):
    xn = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    cent = xn[rng.choice(len(x), c, replace=False)]
    for _ in range(iters):
        a = np.argmax(xn @ cent.T, axis=1)
        for j in range(c):
            m = xn[a == j]
            if len(m):
                v = m.mean(0)
                cent[j] = v / max(np.linalg.norm(v), 1e-12)
    return np.argmax(xn @ cent.T, axis=1)


def take(key, members, budget, p, sink):
    taken, got = 0, p[:sink].sum()
    for c in np.argsort(-key, kind="stable"):
        if taken >= budget:
            break
        m = members[c][: budget - taken]
        got += p[sink + m].sum()
        taken += len(m)
    return got


def main():
    path, prefix, frac = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    mult = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    sink = 1
    f = h5py.File(path, "r")
    keys = f["kv/k"][:].astype(np.float64)
    queries = f["kv/q"][:].astype(np.float64)
    pos = f["kv/q_positions"][:]
    layers, heads, _, d = keys.shape
    group = queries.shape[1] // heads
    rng = np.random.default_rng(1)
    names = ["mean", "lognormal", "diag", "box", "ball", "lme", "max"]
    got = {v: [] for v in names}
    oracle = []
    for layer in range(layers):
        for h in range(heads):
            x = keys[layer, h, sink:prefix]
            n = len(x)
            c = max(1, round(mult * 410 * (n / 32768) ** (1 / 3)))
            a = kmeans_cosine(x, c, rng)
            members = [np.where(a == j)[0] for j in range(c)]
            cen = np.array([x[m].mean(0) if len(m) else np.zeros(d) for m in members])
            dev = [x[m] - cen[j] for j, m in enumerate(members)]
            r2 = np.array([(e ** 2).sum(1).mean() if len(e) else 0 for e in dev])
            rmax = np.array([np.sqrt((e ** 2).sum(1).max()) if len(e) else 0 for e in dev])
            var = np.array([(e ** 2).mean(0) if len(e) else np.zeros(d) for e in dev])
            lo = np.array([x[m].min(0) if len(m) else np.zeros(d) for m in members])
            hi = np.array([x[m].max(0) if len(m) else np.zeros(d) for m in members])
            budget = max(1, round(frac * n))
            for qh in range(h * group, (h + 1) * group):
                for t in np.where(pos >= prefix)[0]:
                    q = queries[layer, qh, t]
                    s = keys[layer, h, :prefix] @ q / np.sqrt(d)
                    p = np.exp(s - s.max())
                    p /= p.sum()
                    oracle.append(np.sort(p)[::-1][: sink + budget].sum())
                    sx = s[sink:]
                    mean = cen @ q / np.sqrt(d)
                    rank = {
                        "mean": mean,
                        "lognormal": mean + (q @ q) * r2 / (2 * d * d),
                        "diag": mean + (var @ (q * q)) / (2 * d),
                        "box": np.maximum(lo * q, hi * q).sum(1),
                        "ball": cen @ q + np.linalg.norm(q) * rmax,
                        "lme": np.array([np.log(np.mean(np.exp(sx[m] - sx.max()))) if len(m) else -1e30
                                         for m in members]),
                        "max": np.array([sx[m].max() if len(m) else -1e30 for m in members]),
                    }
                    for v in names:
                        got[v].append(take(rank[v], members, budget, p, sink))
    o = np.mean(oracle)
    print("%s prefix %d budget %.2f clusters x%.1f: %s" % (path.split("/")[-1], prefix, frac, mult,
          "  ".join("%s %.3f" % (v, np.mean(got[v]) / o) for v in names)))


if __name__ == "__main__":
    main()
