"""kvtool eval's per-query numbers agree with an independent numpy computation from the dump and
the candidate receipts of `kvtool query` (retained mass, oracle mass, recall, output error)."""
import csv
import json
import os

import h5py
import numpy as np

from common import BIN, KVTOOL, check, run, run_json, workdir

with workdir() as w:
    d, a, c = (os.path.join(w, n) for n in ("d.h5", "a.kvi", "e.csv"))
    run(KVTOOL, "synth", "--layers", 2, "--kv-heads", 2, "--q-heads", 4, "--head-dim", 16, "--tokens", 220,
        "--seed", 8, "--dtype", "f32", "--query-count", 12, "-o", d, "-q")
    run(os.path.join(BIN, "kvtool-pq"), "build", d, "-o", a, "--prefix", 210, "--bits", 4, "--subspaces", 4, "--sink", 8, "--local", 6, "-q")
    run(KVTOOL, "eval", a, "--source", d, "--budget", "0.15", "--csv", c, "-q")
    rows = list(csv.DictReader(open(c)))
    check(len(rows) == 2 * 4 * 10, f"{len(rows)} csv rows")
    with h5py.File(d, "r") as f:
        K, V, Q = f["kv/k"][:], f["kv/v"][:], f["kv/q"][:]
        qpos = list(f["kv/q_positions"][:])
    E = 210
    for r in rows[::7]:
        l, h, kvh, t = int(r["layer"]), int(r["q_head"]), int(r["kv_head"]), int(r["position"])
        q = Q[l, h, qpos.index(t)].astype(np.float64)
        k, v = K[l, kvh, :E].astype(np.float64), V[l, kvh, :E].astype(np.float64)
        z = k @ q / np.sqrt(16)
        p = np.exp(z - z.max())
        p /= p.sum()
        rc = run_json(KVTOOL, "query", a, "--source", d, "--layer", l, "--q-head", h, "--position", t, "--budget", "0.15", "--json")
        sel = sorted({i for i in rc["candidates"] + rc["always_included"] if i < E})
        rho = p[sel].sum()
        oracle = np.sort(p)[::-1][:len(sel)].sum()
        top = set(np.argsort(-p, kind="stable")[:len(sel)])
        recall = len(top & set(sel)) / len(sel)
        o = p @ v
        o_r = p[sel] @ v[sel] / rho
        err = np.linalg.norm(o_r - o)
        for name, mine in (("retained_mass", rho), ("oracle_retained_mass", oracle), ("recall_support", recall), ("output_error", err)):
            theirs = float(r[name])
            # eval's dense reference is double precision (BLAS dgemm): equal to numpy's up to the CSV's
            # six significant digits.
            check(abs(mine - theirs) <= 1e-6 * max(1.0, abs(mine)), f"{name}: numpy {mine} vs kvtool {theirs} (row {r})")
        check(int(r["selected_rows"]) == len(sel), "selected rows")

    # --positions: a sample of the query positions, recorded in the JSON, each sampled row's metrics
    # equal to the full run's, the random sample reproducible from its seed.
    full = {(r["layer"], r["q_head"], r["position"]): r for r in rows}
    all_pos = sorted({int(r["position"]) for r in rows})
    for spec, seed, want in (("every:3", 0, all_pos[::3]), ("random:4", 5, None), ("random:4", 5, None), ("random:4", 6, None)):
        c2 = os.path.join(w, "s.csv")
        rep = run_json(KVTOOL, "eval", a, "--source", d, "--budget", "0.15", "--positions", spec, "--positions-seed", seed,
                       "--csv", c2, "--json")
        ps = rep["position_sample"]
        check(ps["rule"] == spec.split(":")[0] and ps["value"] == int(spec.split(":")[1]), f"position_sample {ps}")
        got = ps["positions"]
        check(got == sorted(set(got)) and set(got) <= set(all_pos), f"{spec}: positions {got} not a sorted subset")
        check(len(got) == (len(want) if want else 4) and rep["query_positions"] == len(got), f"{spec}: {len(got)} positions")
        if want:
            check(got == want, f"{spec}: {got} != every third of {all_pos}")
        else:
            check(ps["seed"] == seed, "seed recorded")
            samples = globals().setdefault("samples", {})
            if seed in samples:
                check(samples[seed] == got, f"random:4 seed {seed} is not reproducible: {samples[seed]} vs {got}")
            samples[seed] = got
        sub = list(csv.DictReader(open(c2)))
        check(len(sub) == 2 * 4 * len(got), f"{spec}: {len(sub)} csv rows")
        for r in sub:
            check(int(r["position"]) in got, f"{spec}: row at unsampled position {r['position']}")
            check(r == full[(r["layer"], r["q_head"], r["position"])], f"{spec}: row differs from the full run: {r}")
    check(samples[5] != samples[6], f"seeds 5 and 6 drew the same sample {samples[5]}")
    run(KVTOOL, "eval", a, "--source", d, "--positions", "every:0", expect=2)
    run(KVTOOL, "eval", a, "--source", d, "--positions", "sometimes", expect=2)
print("ok")
