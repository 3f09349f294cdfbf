"""The calibrated thresholds of a squeeze artifact built from a real stories260K dump equal a numpy
recomputation from the dump's queries and the exported centroids (formats/kinds-v1.md §6.2, §6.3,
§6.6): per fine cluster the mean flat per-key score over the observation window's queries, then the
weighted quantile rule. `kvtool verify` recomputes them with the function that wrote them; this
recomputation shares no code with it."""
import json
import os

import h5py
import numpy as np

from common import KVTOOL, MODELS, check, run, workdir

E, T, W = 256, 300, 100

with workdir() as w:
    d, a, x = (os.path.join(w, n) for n in ("d.h5", "sq.kvi", "sq.h5"))
    run(KVTOOL, "dump", "--llama2c", os.path.join(MODELS, "stories260K.bin"), "--tokenizer",
        os.path.join(MODELS, "tok512.bin"), "--tokens", T, "--queries", "-o", d, "-q")
    run(KVTOOL, "build", "squeeze", d, "-o", a, "--prefix", E, "--observation-window", W, "--quantiles",
        "0.5,0.7,0.8,0.9", "-q")
    run(KVTOOL, "export", a, "-o", x)
    with h5py.File(d, "r") as f:
        Q, qpos = f["kv/q"][:].astype(np.float64), np.asarray(f["kv/q_positions"][:])
    with h5py.File(x, "r") as f:
        man = json.loads(f.attrs["kvi_manifest"])
        src, params, kd = man["source"], man["params"], man["kind_data"]
        window = np.nonzero((qpos >= max(0, E - W)) & (qpos < E))[0]
        check(len(window) == W, f"{len(window)} queries in the observation window")
        pairs, worst = [], 0.0
        for meta in kd["parts"]:
            l, kvh = meta["layer"], meta["kv_head"]
            if meta["indexed_rows"] == 0:
                continue
            g = f[f"parts/layer_{l}/kv_head_{kvh}"]
            cent, sizes = g["sq_fine_centroids"][:].astype(np.float64), g["sq_fine_sizes"][:].astype(np.float64)
            heads = [h for h in range(src["q_heads"]) if src["q_to_kv_head"][h] == kvh]
            qs = np.concatenate([Q[l, h, window] for h in heads])  # head order, then dump order
            z = qs @ cent.T / np.sqrt(cent.shape[1])  # [queries, C]
            e = np.exp(z - z.max(axis=1, keepdims=True))
            per_key = e / (e * sizes).sum(axis=1, keepdims=True)
            mine = per_key.mean(axis=0).astype(np.float32).astype(np.float64)
            stored = np.asarray(meta["calibration_scores"], dtype=np.float64)
            check(meta["calibration_queries"] == len(qs), f"part {l},{kvh}: calibration query count")
            check(list(meta["calibration_weights"]) == list(sizes.astype(np.int64)), f"part {l},{kvh}: weights")
            worst = max(worst, float(np.max(np.abs(mine - stored) / np.abs(stored))))
            pairs += list(zip(mine, sizes))
        check(worst <= 1e-5, f"calibration scores differ from numpy by {worst:.3g} (relative)")
        pairs.sort()
        scores = np.array([s for s, _ in pairs])
        cum = np.cumsum([wt for _, wt in pairs])
        for qk, stored in kd["thresholds"].items():
            idx = np.nonzero(cum >= float(qk) * cum[-1])[0]
            tau = scores[idx[0]] if len(idx) else scores[-1]
            print(f"q={qk}: numpy {tau:.9g}, artifact {stored:.9g}")
            check(abs(tau - stored) <= 1e-5 * abs(stored), f"threshold {qk}: numpy {tau} vs artifact {stored}")
        check(len(kd["thresholds"]) == 4, "four calibrated quantiles")
print("ok")
