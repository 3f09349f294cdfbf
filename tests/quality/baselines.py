"""Quality gates (tests/quality/test_*_quality.sh): an index's retained attention mass
against selectors a user could deploy without it, recomputed in numpy from the dump.

The dense reference is the one of tests/interop/test_eval_numpy.py (and kvtool eval): for a query
at position t >= E (the artifact's coverage end) and its kv head, p = softmax(K[:E] q / sqrt(d)) in
float64, o = p V[:E]; a set S of n rows retains p[S].sum(); the oracle keeps the n largest p.
Ratio = mean retained / mean oracle over every (layer, query head, query), as eval's quality_ratio.

Baselines, each with the same n rows per query as the index selected (eval --csv selected_rows):
  window   4 sink rows + the n - 4 most recent covered rows (StreamingLLM)
  h2o      the n rows with the largest attention accumulated, per (layer, query head), over the
           queries at positions < E (causal: a query at t sees rows [0, t]); fixed for every test
           query: what a user could deploy from the prefix alone (H2O-style heavy hitters). Three
           accumulations: the plain sum (H2O), the mean over the queries that see the row, and the
           sum over the last RECENT prefix queries; the gate uses the best of the three
  hindsight  as h2o but accumulated over the test queries themselves (not deployable: an upper reference)

Usage: baselines.py gate --kind K --model M --dump D.h5 --artifact A.kvi --setting LABEL ... (see
main()). Prints one line with every number per (kind, model, setting), then a FAIL line per gate
that does not hold; exits 1 if any failed.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np

SINK = 4  # rows of the window baseline's sink (StreamingLLM keeps 4)
RECENT = 64  # prefix queries of h2o_recent (the observation window of the squeeze gates)


def load_dump(path):
    with h5py.File(path, "r") as f:
        return {"k": f["kv/k"][:].astype(np.float64), "v": f["kv/v"][:].astype(np.float64),
                "q": f["kv/q"][:].astype(np.float64), "qpos": f["kv/q_positions"][:].astype(np.int64),
                "q2kv": [int(x) for x in f.attrs["q_to_kv_head"]]}


def read_csv(path, label):
    """eval --csv records of one setting, keyed by (layer, q_head, position)."""
    out = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["selector"] == label:
                out[(int(r["layer"]), int(r["q_head"]), int(r["position"]))] = r
    return out


def softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class Head:
    """Dense attention of one (layer, query head) over the covered rows [0, E)."""

    def __init__(self, dump, layer, qh, E):
        kvh = dump["q2kv"][qh]
        self.k, self.v = dump["k"][layer, kvh, :E], dump["v"][layer, kvh, :E]
        d = self.k.shape[1]
        qpos = dump["qpos"]
        self.test = np.nonzero((qpos >= E) & (qpos < dump["k"].shape[2]))[0]
        self.positions = qpos[self.test]
        self.q = dump["q"][layer, qh, self.test]
        self.p = softmax(self.q @ self.k.T / math.sqrt(d))  # [queries, E]
        self.o = self.p @ self.v
        # Attention accumulated over the prefix queries, causal (row r is seen by queries at t >= r).
        pre = np.nonzero(qpos < E)[0]
        z = dump["q"][layer, qh, pre] @ self.k.T / math.sqrt(d)
        visible = np.arange(E)[None, :] <= qpos[pre][:, None]
        a = softmax(np.where(visible, z, -np.inf))
        acc, seen = a.sum(axis=0), visible.sum(axis=0)
        recent = a[qpos[pre] >= E - RECENT].sum(axis=0)
        # The plain sum favours early rows (seen by more queries), so two corrections compete too.
        self.order = {"h2o_sum": np.argsort(-acc, kind="stable"),
                      "h2o_mean": np.argsort(-acc / np.maximum(seen, 1), kind="stable"),
                      "h2o_recent": np.argsort(-recent, kind="stable"),
                      "hindsight": np.argsort(-self.p.sum(axis=0), kind="stable")}

    def window(self, n):
        """Retained mass and relative output error (plain renormalization, as eval's
        relative_output_error) of SINK sink rows + the n - SINK most recent rows, per query."""
        E = self.k.shape[0]
        s = np.minimum(SINK, n)
        col = np.arange(E)[None, :]
        keep = (col < s[:, None]) | (col >= (E - (n - s))[:, None])
        pk = self.p * keep
        mass = pk.sum(axis=1)
        err = np.linalg.norm(pk @ self.v / mass[:, None] - self.o, axis=1) / np.linalg.norm(self.o, axis=1)
        return mass, err

    def top(self, order, n):
        """Mass of the first n rows of a fixed order, per query."""
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        return (self.p * (rank[None, :] < n[:, None])).sum(axis=1)


HEADS = {}


def head(dump, layer, qh, E):
    if (layer, qh) not in HEADS:
        HEADS[(layer, qh)] = Head(dump, layer, qh, E)
    return HEADS[(layer, qh)]


def measure(dump, E, records):
    """Means over every evaluated query of retained mass per selector, oracle, and the window's
    relative output error; also the index's numbers as eval recorded them."""
    Hq = dump["q"].shape[1]
    names = ("h2o_sum", "h2o_mean", "h2o_recent", "hindsight")
    sums = {n: [] for n in ("oracle", "index", "window", "window_rel_err") + names}
    for layer in sorted({k[0] for k in records}):
        for qh in range(Hq):
            h = head(dump, layer, qh, E)
            rec = [records[(layer, qh, int(t))] for t in h.positions]
            n = np.array([int(r["selected_rows"]) for r in rec])
            sums["index"].append([float(r["retained_mass"]) for r in rec])
            sums["oracle"].append(np.cumsum(-np.sort(-h.p, axis=1), axis=1)[np.arange(len(n)), n - 1])
            mass, err = h.window(n)
            sums["window"].append(mass)
            sums["window_rel_err"].append(err)
            for name in names:
                sums[name].append(h.top(h.order[name], n))
    m = {k: float(np.mean(np.concatenate(v))) for k, v in sums.items()}
    assert sum(len(x) for x in sums["index"]) == len(records), "eval recorded queries numpy did not find"
    m["h2o"] = max(m["h2o_sum"], m["h2o_mean"], m["h2o_recent"])  # the strongest deployable fixed set
    return m


def inclusion(cos, K, T, c):
    """formats/kinds-v1.md §5.5: probability that a row collides with the query in >= c of T tables."""
    P = (1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / math.pi) ** K
    if c == 2:
        u = 1.0 - (1.0 - P) ** (T - 1) * (1.0 + (T - 1) * P)
    else:
        j = np.arange(c)[:, None]
        logs = [math.lgamma(T + 1) - math.lgamma(x + 1) - math.lgamma(T - x + 1) for x in range(c)]
        with np.errstate(divide="ignore"):
            terms = np.exp(np.array(logs)[:, None] + j * np.log(P) + (T - j) * np.log1p(-P))
        u = np.maximum(0.0, 1.0 - terms.sum(axis=0))
    return np.where(P <= 0, 0.0, np.where(P >= 1, 1.0, u))


def lsh_estimator(dump, exported, params, E, records, c):
    """MagicPIG's estimator recomputed from the dump and `kvtool export` of the artifact: the
    query hashed with the stored projections, collisions counted from the CSR tables, every
    colliding row weighted by 1/inclusion probability, sink and local rows exact. Returns the mean
    relative output error, the sampled fraction and its expectation (mean inclusion probability
    of the indexed rows), and how many queries' row counts differ from eval's."""
    K, T = int(params["bits"]), int(params["tables"])
    begin, end = int(params["sink"]), E - int(params["local"])
    always = np.r_[np.arange(begin), np.arange(end, E)]
    rel, frac, expect, mismatched = [], [], [], 0
    with h5py.File(exported, "r") as f:
        for layer, qh in sorted({(k[0], k[1]) for k in records}):
            kvh = dump["q2kv"][qh]
            g = f[f"parts/layer_{layer}/kv_head_{kvh}"]
            w, off, ids = g["lsh_projections"][:], g["lsh_offsets"][:].astype(np.int64), g["lsh_ids"][:]
            # One block of ids (formats/kinds-v1.md §5.3): the quality dumps end far below 65,536 rows.
            assert off.shape[0] == ids.shape[0], "lsh part with several id segments: this reader handles one"
            mu = g["lsh_mu"][:].astype(np.float64)
            bucket = np.empty((T, end - begin), np.int64)  # bucket of each indexed row in each table
            for tb in range(T):
                bucket[tb, ids[tb].astype(np.int64) - begin] = np.repeat(np.arange(2**K), np.diff(off[tb]))
            k, v = dump["k"][layer, kvh, :E], dump["v"][layer, kvh, :E]
            kc = k[begin:end] - mu
            pos = sorted(p for (l_, h_, p) in records if (l_, h_) == (layer, qh))
            q = dump["q"][layer, qh, [int(np.nonzero(dump["qpos"] == t)[0][0]) for t in pos]]  # [N, d]
            s = (q.astype(np.float32) @ w).reshape(len(pos), T, K)
            code = ((s > 0) * (1 << np.arange(K))).sum(axis=2)  # [N, T]
            count = np.zeros((len(pos), end - begin), np.int64)
            for tb in range(T):
                count += bucket[tb][None, :] == code[:, tb][:, None]
            sampled = count >= c  # [N, n]
            nrm = np.linalg.norm(q, axis=1)[:, None] * np.linalg.norm(kc, axis=1)[None, :]
            u = inclusion(np.divide(q @ kc.T, nrm, out=np.zeros(nrm.shape), where=nrm > 0), K, T, c)
            z = q @ k.T / math.sqrt(q.shape[1])
            e = np.exp(z - z.max(axis=1, keepdims=True))
            wgt = np.zeros_like(e)
            wgt[:, always] = e[:, always]
            keep = sampled & (u > 0)
            wgt[:, begin:end] = np.where(keep, e[:, begin:end] / np.where(keep, u, 1.0), 0.0)
            o, o_est = (e @ v) / e.sum(axis=1, keepdims=True), (wgt @ v) / wgt.sum(axis=1, keepdims=True)
            rel += list(np.linalg.norm(o_est - o, axis=1) / np.linalg.norm(o, axis=1))
            frac += list(sampled.sum(axis=1) / (end - begin))
            expect += list(u.mean(axis=1))
            rows = sampled.sum(axis=1) + len(always)
            mismatched += sum(int(rows[i]) != int(records[(layer, qh, t)]["selected_rows"]) for i, t in enumerate(pos))
    return float(np.mean(rel)), float(np.mean(frac)), float(np.mean(expect)), mismatched


def llround(x):
    return math.floor(x + 0.5)  # C's llround for the positive values used here (not banker's rounding)


def raw_index_bytes(kind, p, n, d):
    """Raw section bytes of one part with n indexed rows, from formats/kinds-v1.md §3.3-§6.4."""
    if kind == "pq":
        m, k = int(p["subspaces"]), 2 ** int(p["bits"])
        cw = 2 if p.get("codebook_dtype") == "f16" else 4
        return m * k * (d // m) * cw + n * m * (1 if int(p["bits"]) <= 8 else 2)
    if kind == "clusterkv":
        C = min(int(p["clusters"]), max(n, 1)) if p.get("clusters") else max(1, llround(n / p["tokens_per_cluster"]))
        dtype = p.get("centroid_dtype", "f32")
        cw = {"f16": 2 * d, "i8": d + 1}.get(dtype, 4 * d)  # i8: codes and one exponent per centroid
        return C * cw + 2 * C * 4 + n * 4
    if kind == "squeeze":
        C = max(1, min(n, math.floor(p["percent_clusters"] / 100 * n)))
        G = max(1, min(C, llround(p["coarse_percent"] / 100 * C)))
        return C * d * 4 + 3 * C * 4 + 2 * n * 4 + G * d * 4
    if kind == "lsh":
        K, T = int(p["bits"]), int(p["tables"])
        return d * 4 + d * K * T * 4 + T * (2**K + 1) * 4 + T * n * 2
    raise ValueError(kind)


def run(*args):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True).stdout


def index_bytes(kvtool, artifact, d):
    """(stored bytes, raw bytes, raw bytes the format spec predicts, indexed rows) of the artifact."""
    ins = json.loads(run(kvtool, "inspect", artifact, "--json"))
    man = ins["manifest"]
    expect, rows = 0, 0
    for part in man["kind_data"]["parts"]:
        n = int(part["indexed_rows"])
        rows += n
        if n > 0 and not part.get("dense", False):
            expect += raw_index_bytes(man["kind"], man["params"], n, d)
    return ins["section_bytes"]["stored"], ins["section_bytes"]["raw"], expect, rows, man["params"]


def squeeze_checks(rep, always, n_idx, hier_vs_flat, need):
    """Per mode, the indexed fraction falls strictly as the quantile rises (a mixed-up threshold
    table fails); at quantile hier_vs_flat (None: none), the hierarchy (rule "bound") retains at least flat's mass (its
    centroids scored are printed): it keeps a superset of flat's rows (formats/kinds-v1.md §6.6), which
    tests/quality/squeeze_superset.cpp checks query by query."""
    by = {}
    for b in rep["budgets"]:
        sel = b["selector"]
        by.setdefault(sel["mode"], []).append((sel["quantile"], (b["selected_rows_mean"] - always) / n_idx, b))
    for mode, rows in by.items():
        rows.sort(key=lambda r: r[0])
        fr = [r[1] for r in rows]
        need(all(x > y for x, y in zip(fr, fr[1:])), f"{mode}: indexed fraction not falling with the quantile: {fr}")
    for (q, _, hier), (_, _, flat) in zip(by["hierarchical"], by["flat"]):
        if q != hier_vs_flat:
            continue
        print(f"  q={q}: centroids scored per query: hierarchical {hier['centroids_scored_mean']:.1f}, "
              f"flat {flat['centroids_scored_mean']:.1f}")
        need(hier["retained_mass_mean"] >= flat["retained_mass_mean"] - 1e-12, f"q={q}: hierarchy retains less than flat")


def gain_over(a, labels, rep, stored, raw, d, need):
    """The artifact against another build of the same dump (--gain-over OTHER GAIN): at every gated
    setting the same selected fraction (within 0.005) and a quality ratio at least OTHER's + GAIN,
    with raw section bytes (the format's, formats/kinds-v1.md) at most OTHER's. Stored bytes are
    printed, not gated: zstd packs 6-bit pq codes in u8 tighter than 7-bit ones."""
    other, gain = a.gain_over[0], float(a.gain_over[1])
    rep2 = json.loads(run(a.kvtool, "eval", other, "--source", a.dump, "--json", *a.eval_args.split()))
    stored2, raw2 = index_bytes(a.kvtool, other, d)[:2]
    print(f"{a.kind} {a.model}: index bytes raw {raw} stored {stored}; {os.path.basename(other)} raw {raw2} stored {stored2}")
    need(raw <= raw2, f"raw index bytes {raw} above {other}'s {raw2}")
    for label, b, b2 in zip(labels, rep["budgets"], rep2["budgets"]):
        if label not in a.settings:
            continue
        r1, r2 = b["quality_ratio"], b2["quality_ratio"]
        f1, f2 = b["selected_fraction_mean"], b2["selected_fraction_mean"]
        print(f"{a.kind} {a.model} [{label}]: eval ratio {r1:.4f} at fraction {f1:.4f}; {os.path.basename(other)} "
              f"{r2:.4f} at {f2:.4f} (gain {r1 - r2:+.4f}, at least {gain:+.2f})")
        need(abs(f1 - f2) <= 0.005, f"{label}: selected fraction {f1:.4f} vs {other}'s {f2:.4f}")
        need(r1 >= r2 + gain, f"{label}: ratio {r1:.4f} does not gain {gain} over {other}'s {r2:.4f}")


def gate(a):
    fails = []

    def need(ok, what):
        if not ok:
            fails.append(what)

    work = os.path.dirname(os.path.abspath(a.artifact))
    csv_path = os.path.join(work, os.path.basename(a.artifact) + ".eval.csv")
    rep = json.loads(run(a.kvtool, "eval", a.artifact, "--source", a.dump, "--json", "--csv", csv_path, *a.eval_args.split()))
    dump = load_dump(a.dump)
    E, n_idx, d = rep["coverage"][1], rep["indexed_rows"], dump["k"].shape[3]
    stored, raw, expect, rows, params = index_bytes(a.kvtool, a.artifact, d)
    for kv in a.param:  # the gate's expectations hold only for the parameters it built with
        name, value = kv.split("=", 1)
        need(str(params.get(name)) == value, f"manifest params.{name} = {params.get(name)}, expected {value}")
    per_row, key_row = stored / rows, 4 * d
    bytes_txt = f"index bytes {stored} ({per_row:.1f}/indexed row, keys {key_row}/row)"
    need(raw == expect, f"raw section bytes {raw} != {expect} from formats/kinds-v1.md")
    need(stored <= raw, f"stored section bytes {stored} > raw {raw}")
    if a.max_key_fraction is not None:
        need(per_row <= a.max_key_fraction * key_row, f"index bytes per row {per_row:.1f} > {a.max_key_fraction} x key bytes")
    bounds = {lab: (float(lo), float(hi)) for lab, lo, hi in a.indexed_fraction}
    labels = {}
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            labels.setdefault(r["selector"], None)
    need(len(labels) == len(rep["budgets"]), f"eval wrote {len(labels)} CSV settings for {len(rep['budgets'])} summaries")
    for missing in (set(a.settings) | set(bounds)) - set(labels):  # a renamed setting must not skip its gate
        need(False, f"eval has no setting {missing} (it has {list(labels)})")
    for label, b in zip(labels, rep["budgets"]):
        frac = (b["selected_rows_mean"] - a.always) / n_idx
        line = (f"{a.kind} {a.model} [{label}]: selected fraction {b['selected_fraction_mean']:.3f} "
                f"(indexed {frac:.3f})")
        if label in bounds:
            lo, hi = bounds[label]
            line += f" in [{lo}, {hi}]"
            need(lo <= frac <= hi, f"{label}: indexed fraction {frac:.4f} outside [{lo}, {hi}]")
        if label not in a.settings:
            print(line)
            continue
        recs = read_csv(csv_path, label)
        m = measure(dump, E, recs)
        ratio = {k: m[k] / m["oracle"] for k in ("index", "window", "h2o", "h2o_sum", "h2o_mean", "h2o_recent", "hindsight")}
        need(abs(m["oracle"] - b["oracle_retained_mass_mean"]) <= 1e-6, f"{label}: numpy oracle {m['oracle']} != eval {b['oracle_retained_mass_mean']}")
        line += (f"; ratio index {ratio['index']:.4f} window {ratio['window']:.4f} h2o {ratio['h2o']:.4f} "
                 f"(sum {ratio['h2o_sum']:.4f} mean {ratio['h2o_mean']:.4f} recent {ratio['h2o_recent']:.4f}) "
                 f"hindsight {ratio['hindsight']:.4f} (oracle {m['oracle']:.4f}); {bytes_txt}")
        need(ratio["index"] >= a.min_ratio, f"{label}: ratio {ratio['index']:.4f} < {a.min_ratio}")
        for base in ("window", "h2o") + (("hindsight",) if a.beat_hindsight else ()):
            need(ratio["index"] >= ratio[base] + a.margin, f"{label}: index {ratio['index']:.4f} does not beat {base} {ratio[base]:.4f} by {a.margin}")
        if a.lsh_max_rel_err is not None:
            exported = os.path.join(work, os.path.basename(a.artifact) + ".export.h5")
            run(a.kvtool, "export", a.artifact, "-o", exported)
            c = int(b["selector"]["min_collisions"])
            rel, sfrac, expfrac, mism = lsh_estimator(dump, exported, params, E, recs, c)
            theirs = b["estimator_relative_output_error_mean"]
            line += (f"; estimator rel.err numpy {rel:.4f} eval {theirs:.4f} window {m['window_rel_err']:.4f} "
                     f"(max {a.lsh_max_rel_err}); sampled fraction {b['sampled_fraction_mean']:.4f} numpy {sfrac:.4f} "
                     f"expected {expfrac:.4f}; row-count mismatches {mism}/{len(recs)}")
            need(abs(rel - theirs) <= 0.01 * theirs, f"{label}: estimator error numpy {rel:.5f} vs eval {theirs:.5f}")
            need(abs(sfrac - b["sampled_fraction_mean"]) <= 0.01 * sfrac, f"{label}: sampled fraction numpy {sfrac:.5f} vs eval")
            need(mism <= 0.01 * len(recs), f"{label}: {mism} queries' row counts differ from eval")
            need(abs(sfrac - expfrac) <= 0.2 * expfrac, f"{label}: sampled fraction {sfrac:.4f} not within 20% of the inclusion probabilities' mean {expfrac:.4f}")
            need(rel <= a.lsh_max_rel_err, f"{label}: estimator relative error {rel:.4f} > {a.lsh_max_rel_err}")
            need(rel + a.margin <= m["window_rel_err"], f"{label}: estimator error {rel:.4f} not below the window's {m['window_rel_err']:.4f} by {a.margin}")
        print(line)
    if a.versus:  # another build of the same kind (e.g. tree k-means) must lose at most TOL
        other, tol = a.versus[0], float(a.versus[1])
        rep2 = json.loads(run(a.kvtool, "eval", other, "--source", a.dump, "--json", *a.eval_args.split()))
        for label, b, b2 in zip(labels, rep["budgets"], rep2["budgets"]):
            if label in a.settings:
                r1, r2 = b["quality_ratio"], b2["quality_ratio"]
                print(f"{a.kind} {a.model} [{label}]: eval ratio {r1:.4f}, {os.path.basename(other)} {r2:.4f} "
                      f"(difference {r2 - r1:+.4f}, at least -{tol})")
                need(r2 >= r1 - tol, f"{label}: {other} ratio {r2:.4f} more than {tol} below {r1:.4f}")
    if a.gain_over:  # a build at no more index bytes must retain GAIN more at the same selected fraction
        gain_over(a, labels, rep, stored, raw, d, need)
    if a.squeeze_checks:
        squeeze_checks(rep, a.always, n_idx, a.hier_vs_flat, need)
    for f_ in fails:
        print(f"FAIL: {a.kind} {a.model}: {f_}")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvtool", default=os.environ.get("KVTOOL"))
    ap.add_argument("--kind", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--eval-args", default="")
    ap.add_argument("--settings", nargs="+", required=True, help="eval setting labels the ratio gates apply to")
    ap.add_argument("--min-ratio", type=float, required=True)
    ap.add_argument("--margin", type=float, default=0.02)
    ap.add_argument("--beat-hindsight", action="store_true")
    ap.add_argument("--always", type=int, required=True, help="always-included rows of the documented defaults")
    ap.add_argument("--indexed-fraction", nargs=3, action="append", default=[], metavar=("LABEL", "LO", "HI"))
    ap.add_argument("--max-key-fraction", type=float)
    ap.add_argument("--lsh-max-rel-err", type=float)
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="expected manifest param")
    ap.add_argument("--squeeze-checks", action="store_true")
    ap.add_argument("--versus", nargs=2, metavar=("ARTIFACT", "TOL"),
                    help="eval's quality_ratio of ARTIFACT (same eval args) at least the artifact's - TOL, per gated setting")
    ap.add_argument("--gain-over", nargs=2, metavar=("ARTIFACT", "GAIN"),
                    help="eval's quality_ratio at least ARTIFACT's + GAIN at the same selected fraction and no more index bytes")
    ap.add_argument("--hier-vs-flat", type=float, help="squeeze: quantile of the hierarchy-vs-flat check")
    sys.exit(gate(ap.parse_args()))


if __name__ == "__main__":
    main()
