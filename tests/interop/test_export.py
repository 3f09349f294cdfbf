"""kvtool export writes every artifact section as an HDF5 dataset that h5py reads back intact."""
import hashlib
import json
import os

import h5py
import numpy as np

from common import BIN, KVTOOL, check, run, run_json, workdir

with workdir() as w:
    d = os.path.join(w, "d.h5")
    a = os.path.join(w, "a.kvi")
    e = os.path.join(w, "a.h5")
    run(KVTOOL, "synth", "--layers", 2, "--kv-heads", 2, "--q-heads", 2, "--head-dim", 8, "--tokens", 30, "--seed", 2, "-o", d, "-q")
    run(os.path.join(BIN, "kvtool-testgen"), d, "-o", a)
    info = run_json(KVTOOL, "inspect", a, "--json")
    run(KVTOOL, "export", a, "-o", e)
    with h5py.File(e, "r") as f:
        manifest = json.loads(f.attrs["kvi_manifest"])
        check(manifest == info["manifest"], "manifest attribute")
        n = 0
        for s in manifest["sections"]:
            name = (f"parts/layer_{s['layer']}/kv_head_{s['kv_head']}/{s['name']}" if s["layer"] >= 0
                    else f"sections/{s['name']}")
            ds = f[name]
            check(list(ds.shape) == s["shape"], f"{name} shape")
            raw = np.ascontiguousarray(ds[:]).tobytes()
            check(hashlib.sha256(raw).hexdigest() == s["sha256"], f"{name} digest")
            n += 1
        check(n == len(manifest["sections"]) == 9, "section count")
        with h5py.File(d, "r") as src:
            check(np.array_equal(f["parts/layer_1/kv_head_0/keys"][:], src["kv/k"][1, 0].astype(np.float32)), "keys content")
print("ok")
