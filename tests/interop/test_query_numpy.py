"""`kvtool query` answers of every kind on a real stories260K dump agree with an independent numpy
implementation of formats/kinds-v1.md (§2.2, §3.5, §4.5, §5.5, §6.6) computed from `kvtool export`
of the artifact: ids, scores and always-included rows. numpy scores in float64 where kvtool scores
pq and clusterkv in float32, so ids may differ only among rows whose score ties the selection
boundary within a small tolerance (reported; few are allowed)."""
import json
import os

import h5py
import numpy as np

from common import BIN, KVTOOL, MODELS, check, run, run_json, workdir

E, T = 256, 320
BUILDS = {  # name: (kind, build options); f16 centroids and codebooks are read by h5py as float16, i8 as int8
    "pq": ("pq", ["--subspaces", 2, "--bits", 6]),
    "pq-f16": ("pq", ["--subspaces", 2, "--bits", 7, "--codebook-dtype", "f16"]),
    "clusterkv": ("clusterkv", ["--tokens-per-cluster", 16]),
    "clusterkv-f16": ("clusterkv", ["--tokens-per-cluster", 5, "--centroid-dtype", "f16"]),
    "clusterkv-default": ("clusterkv", []),  # i8 centroids, the default count
    "lsh": ("lsh", ["-K", 4, "-L", 40]),
    "squeeze": ("squeeze", []),
}


def part(f, manifest, l, kvh):
    p = manifest["params"]
    begin = min(p["sink"], E)
    end = max(begin, E - p["local"])
    idx = (l - p["layers"][0]) * manifest["source"]["kv_heads"] + kvh
    meta = manifest["kind_data"]["parts"][idx]
    sec = lambda name: f[f"parts/layer_{l}/kv_head_{kvh}/{name}"][:]
    return begin, end, meta, sec


def ref_pq(q, p, begin, end, meta, sec, budget):
    n = end - begin
    m, k = p["subspaces"], 1 << p["bits"]
    cent = sec("pq_centroids").astype(np.float64)  # [m, k, dsub]
    codes = sec("pq_codes").astype(np.int64)  # [n, m]
    qs = q.reshape(m, -1)
    lut = np.einsum("jt,jct->jc", qs, cent)
    score = lut[np.arange(m)[None, :], codes].sum(axis=1)
    tol = 1e-5 * np.abs(np.einsum("jt,jct->jct", qs, cent)).sum(axis=2).max(axis=1).sum()
    want = min(n, int(np.floor(budget * n + 0.5)))
    order = np.lexsort((np.arange(n), -score))[:want]
    return [begin + int(i) for i in order], score, tol


def ref_clusterkv(q, p, begin, end, meta, sec, budget):
    n = end - begin
    cent, sizes = sec("ckv_centroids").astype(np.float64), sec("ckv_sizes").astype(np.int64)
    if p.get("centroid_dtype") == "i8":  # i8 rows: code x 2^(the row's exponent)
        cent = np.ldexp(cent, sec("ckv_centroids_exp").astype(np.int64)[:, None])
    members = sec("ckv_members").astype(np.int64)
    s = cent @ q
    tol = 1e-5 * np.abs(cent * q).sum(axis=1).max()
    starts = np.concatenate([[0], np.cumsum(sizes)])
    row_score = np.zeros(n)
    for c in range(len(sizes)):
        row_score[members[starts[c]:starts[c + 1]] - begin] = s[c]
    want, ids = min(n, int(np.floor(budget * n + 0.5))), []
    for c in np.lexsort((np.arange(len(s)), -s)):
        if len(ids) >= want:
            break
        ids += [int(x) for x in members[starts[c]:starts[c + 1]][:want - len(ids)]]
    return ids, row_score, tol


def ref_lsh(q, p, begin, end, meta, sec, c):
    n, K, L = end - begin, p["bits"], p["tables"]
    w = sec("lsh_projections").astype(np.float64)  # [d, K*L]
    off, ids = sec("lsh_offsets").astype(np.int64), sec("lsh_ids").astype(np.int64)
    # One block of ids (formats/kinds-v1.md §5.3): these dumps end far below 65,536 rows.
    check(off.shape[0] == L, "lsh part with several id segments: this reader handles one")
    s = (q @ w).reshape(L, K)
    unsure = np.abs(s) <= 1e-5 * np.abs(q[:, None] * w).sum(axis=0).reshape(L, K)
    check(not unsure.any(), "a SimHash bit of this query sits on its hyperplane; pick another query")
    code = ((s > 0) * (1 << np.arange(K))).sum(axis=1)
    count = np.zeros(n)
    for t in range(L):
        count[ids[t, off[t, code[t]]:off[t, code[t] + 1]] - begin] += 1
    return [begin + int(i) for i in np.nonzero(count >= c)[0]], count, 0.0


def ref_squeeze(q, p, begin, end, meta, sec, manifest):
    n, d = end - begin, len(q)
    qkey = [k for k in manifest["kind_data"]["thresholds"] if float(k) == p["quantiles"][0]][0]
    tau = manifest["kind_data"]["thresholds"][qkey]
    fine, coarse = sec("sq_fine_centroids").astype(np.float64), sec("sq_coarse_centroids").astype(np.float64)
    sizes, members = sec("sq_fine_sizes").astype(np.float64), sec("sq_fine_members").astype(np.int64)
    parent = sec("sq_parent").astype(np.int64)
    # Rule "bound" (formats/kinds-v1.md §6.6): per group the largest child distance r, the offset s of
    # the size-weighted child mean from the coarse centroid; visit groups by upper bound descending.
    G, slack, qn = len(coarse), 1e-9, np.linalg.norm(np.asarray(q, dtype=np.float64))
    zg, zf = coarse @ q / np.sqrt(d), fine @ q / np.sqrt(d)
    S = np.array([sizes[parent == g].sum() for g in range(G)])
    up, lo = np.full(G, -np.inf), np.full(G, -np.inf)
    for g in np.nonzero(S > 0)[0]:
        ch, cn = fine[parent == g], np.linalg.norm(coarse[g])
        r = np.linalg.norm(ch - coarse[g], axis=1)[sizes[parent == g] > 0].max()
        s = np.linalg.norm((sizes[parent == g, None] * ch).sum(axis=0) / S[g] - coarse[g])
        up[g] = zg[g] + qn * (r + slack * (cn + r)) / np.sqrt(d)
        lo[g] = zg[g] - qn * (s + slack * (cn + s)) / np.sqrt(d)
    m = up.max()
    order = [g for g in sorted(range(G), key=lambda g: (-up[g], g)) if S[g] > 0]
    visited, known = np.zeros(G, bool), 0.0
    for k, g in enumerate(order):
        rest = sum(S[h] * np.exp(lo[h] - m) for h in order[k:])
        lhs, rhs = np.exp(up[g] - m), tau * (known + rest) * (1 - slack)
        check(abs(lhs - rhs) > 1e-9 * rhs, "a coarse group sits on its stopping test; pick another query")
        if rhs >= np.finfo(np.float64).tiny and lhs < rhs:
            break
        visited[g] = True
        known += (sizes[parent == g] * np.exp(zf[parent == g] - m)).sum()
    kept_c, out = visited[parent], (S > 0) & ~visited
    m2 = max(zf[kept_c].max() if kept_c.any() else -np.inf, lo[out].max() if out.any() else -np.inf)
    den = ((sizes[kept_c] * np.exp(zf[kept_c] - m2)).sum() + (S[out] * np.exp(lo[out] - m2)).sum()) * (1 - slack)
    score = np.where(kept_c, np.exp(zf - m2) / den, -1.0)
    starts = np.concatenate([[0], np.cumsum(sizes).astype(np.int64)])
    row_score = np.full(n, -1.0)
    for c in range(len(sizes)):
        row_score[members[starts[c]:starts[c + 1]] - begin] = score[c]
    check(np.all(np.abs(row_score - tau) > 1e-9 * tau), "a cluster sits on the threshold; pick another query")
    return [begin + int(i) for i in np.nonzero(row_score >= tau)[0]], row_score, 0.0


def compare(kind, rc, ids, row_score, tol, begin, end, pos, where):
    check(rc["always_included"] == list(range(begin)) + list(range(end, pos + 1)), f"{where}: always-included rows")
    got, scores = rc["candidates"], rc["scores"]
    check(len(got) == len(scores) == len(set(got)), f"{where}: ids/scores")
    if kind in ("pq", "clusterkv"):
        check(len(got) == len(ids), f"{where}: {len(got)} rows, the budget gives {len(ids)}")
        check(all(a >= b for a, b in zip(scores, scores[1:])), f"{where}: not best first")
        kth = row_score[ids[-1] - begin] if ids else 0
    else:
        check(got == sorted(got), f"{where}: not ascending")
    boundary = 0
    for i in set(got) ^ set(ids):
        check(begin <= i < end, f"{where}: row {i} is not indexed")
        near = kind in ("pq", "clusterkv") and abs(row_score[i - begin] - kth) <= 2 * tol
        check(near, f"{where}: row {i} (score {row_score[i - begin]}) differs off the boundary")
        boundary += 1
    for i, s in zip(got, scores):
        want = row_score[i - begin]
        ok = s == want if kind == "lsh" else abs(s - want) <= tol + 1e-6 * abs(want)
        check(ok, f"{where}: row {i} score {s}, numpy {want}")
    return boundary


with workdir() as w:
    d = os.path.join(w, "d.h5")
    run(KVTOOL, "dump", "--llama2c", os.path.join(MODELS, "stories260K.bin"), "--tokenizer",
        os.path.join(MODELS, "tok512.bin"), "--tokens", T, "--queries", "-o", d, "-q")
    with h5py.File(d, "r") as f:
        Q, qpos = f["kv/q"][:], list(f["kv/q_positions"][:])
    total = {"queries": 0, "rows": 0, "boundary": 0}
    for name, (kind, extra) in BUILDS.items():
        a, x = os.path.join(w, name + ".kvi"), os.path.join(w, name + ".h5")
        run(KVTOOL, "build", kind, d, "-o", a, "--prefix", E, *extra, "-q")
        run(KVTOOL, "export", a, "-o", x)
        with h5py.File(x, "r") as f:
            manifest = json.loads(f.attrs["kvi_manifest"])
            p = manifest["params"]
            for l in (0, 4):
                for h in (0, 5):
                    kvh = manifest["source"]["q_to_kv_head"][h]
                    begin, end, meta, sec = part(f, manifest, l, kvh)
                    for pos in (E - 1, T - 1):
                        q = Q[l, h, qpos.index(pos)].astype(np.float64)
                        args = ["--budget", "0.1"] if kind in ("pq", "clusterkv") else []
                        args += ["--min-collisions", 3] if kind == "lsh" else []
                        rc = run_json(KVTOOL, "query", a, "--source", d, "--layer", l, "--q-head", h, "--position",
                                      pos, *args, "--json")
                        if kind == "pq":
                            ids, rs, tol = ref_pq(q, p, begin, end, meta, sec, 0.1)
                        elif kind == "clusterkv":
                            ids, rs, tol = ref_clusterkv(q, p, begin, end, meta, sec, 0.1)
                        elif kind == "lsh":
                            ids, rs, tol = ref_lsh(q, p, begin, end, meta, sec, 3)
                        else:
                            ids, rs, tol = ref_squeeze(q, p, begin, end, meta, sec, manifest)
                        where = f"{kind} layer {l} q_head {h} position {pos}"
                        total["boundary"] += compare(kind, rc, ids, rs, tol, begin, end, pos, where)
                        total["queries"] += 1
                        total["rows"] += len(rc["candidates"])
        check(total["rows"] > 0, f"{kind}: no rows compared")
    print(f"compared {total['queries']} queries, {total['rows']} rows; {total['boundary']} boundary ties")
    check(total["queries"] == len(BUILDS) * 2 * 2 * 2, "query count")
    check(total["boundary"] * 100 <= total["rows"], "too many boundary ties")
print("ok")
