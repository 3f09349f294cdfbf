"""Dumps written by h5py read back in kvtool, and kvtool dumps read back in h5py."""
import hashlib
import json
import os

import h5py
import numpy as np

from common import KVTOOL, check, run, run_json, workdir


def write_h5py_dump(path, dtype, L=2, H=2, Hq=4, T=40, d=16, frontier=None, tenant="default", nan_at=None):
    """The writer shown in formats/kvdump-v1.md, parameterised for the test."""
    rng = np.random.default_rng(0)
    k = rng.standard_normal((L, H, T, d)).astype(np.float32)
    v = rng.standard_normal((L, H, T, d)).astype(np.float32)
    if nan_at is not None:
        k[nan_at] = np.nan
    with h5py.File(path, "w") as f:
        g = f.create_group("kv")
        for name, x in (("k", k), ("v", v)):
            if dtype == "bfloat16":
                bits = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16
                ds = g.create_dataset(name, data=bits.astype(np.uint16), chunks=(1, 1, T, d))
                ds.attrs["dtype"] = "bfloat16"
            else:
                g.create_dataset(name, data=x.astype(dtype), chunks=(1, 1, T, d))
        g.create_dataset("tokens", data=np.arange(T, dtype=np.int32))
        a = f.attrs
        a["kvdump_version"] = 1
        a["model_artifact_sha256"] = hashlib.sha256(b"my-model").hexdigest()
        a["checkpoint_generation"] = 0
        a["adapter_set_sha256"] = hashlib.sha256(b"kvtool.adapter-set.v1:[]").hexdigest()
        a["position_contract"] = "post-rope-absolute-v1"
        a["rope_config"] = json.dumps({"theta": 10000.0, "scaling": "none", "pairing": "half"})
        a["tenant_namespace"] = tenant
        a["namespace_generation"] = 0
        a["request_generation"] = 0
        a["cache_generation"] = 0
        a["publication_generation"] = 0
        a["committed_frontier"] = T if frontier is None else frontier
        a["q_to_kv_head"] = np.repeat(np.arange(H), Hq // H).astype(np.int64)
        a["representation"] = "full-kv-%s-post-rope-v1" % dtype
    return k, v


with workdir() as w:
    # h5py -> kvtool, every dtype.
    for dt in ("float32", "float16", "bfloat16"):
        p = os.path.join(w, dt + ".h5")
        k, v = write_h5py_dump(p, dt)
        info = run_json(KVTOOL, "inspect", p, "--json")
        check(info["geometry"]["dtype"] == dt, f"dtype {info['geometry']['dtype']} != {dt}")
        check(info["geometry"]["layers"] == 2 and info["geometry"]["q_heads"] == 4, "geometry")
        ref = np.abs(k).max() if dt != "float16" else np.abs(k.astype(np.float16).astype(np.float32)).max()
        check(abs(info["health_summary"]["max_abs_k"] - ref) <= 0.01 * ref, f"max|K| {info['health_summary']['max_abs_k']} vs {ref}")
        ok = run_json(KVTOOL, "verify", p, "--json")
        check(ok["ok"] is True, "verify h5py dump")

    # h5py dumps with defects are rejected with their reasons.
    p = os.path.join(w, "nan.h5")
    write_h5py_dump(p, "float32", nan_at=(1, 0, 3, 2))
    e = run_json(KVTOOL, "verify", p, "--json", expect=1)
    check(e["reason"] == "NON_FINITE", e)
    p = os.path.join(w, "nan_tail.h5")
    write_h5py_dump(p, "float32", frontier=30, nan_at=(1, 0, 35, 2))
    check(run_json(KVTOOL, "verify", p, "--json")["uncommitted_rows"] == 10, "tail rows")
    p = os.path.join(w, "frontier.h5")
    write_h5py_dump(p, "float32", frontier=41)
    check(run_json(KVTOOL, "verify", p, "--json", expect=1)["reason"] == "FRONTIER_BEYOND_T", "frontier")
    p = os.path.join(w, "noattr.h5")
    write_h5py_dump(p, "float32")
    with h5py.File(p, "a") as f:
        del f.attrs["tenant_namespace"]
    check(run_json(KVTOOL, "verify", p, "--json", expect=1)["reason"] == "MISSING_ATTRIBUTE", "missing attr")
    # A hostile megabyte attribute is quoted in part: the error line stays short.
    p = os.path.join(w, "bigtenant.h5")
    write_h5py_dump(p, "float32", tenant="x/" * 500_000)
    r = run(KVTOOL, "verify", p, expect=1)
    check("BAD_ATTRIBUTE" in r.stderr and len(r.stderr) < 2000, f"a {len(r.stderr)}-byte error for a 1 MB tenant")
    p = os.path.join(w, "headmap.h5")
    write_h5py_dump(p, "float32")
    with h5py.File(p, "a") as f:
        f.attrs["q_to_kv_head"] = np.array([0, 0, 1, 5])
    check(run_json(KVTOOL, "verify", p, "--json", expect=1)["reason"] == "BAD_HEAD_MAP", "head map")
    p = os.path.join(w, "shape.h5")
    write_h5py_dump(p, "float32")
    with h5py.File(p, "a") as f:
        del f["kv/v"]
        f["kv"].create_dataset("v", data=np.zeros((2, 2, 39, 16), np.float32))
    check(run_json(KVTOOL, "verify", p, "--json", expect=1)["reason"] == "SHAPE_MISMATCH", "shape")
    p = os.path.join(w, "f64.h5")
    write_h5py_dump(p, "float64")
    check(run_json(KVTOOL, "verify", p, "--json", expect=1)["reason"] == "UNSUPPORTED_DTYPE", "f64")

    # kvtool -> h5py.
    p = os.path.join(w, "synth.h5")
    run(KVTOOL, "synth", "--layers", 2, "--kv-heads", 2, "--q-heads", 4, "--head-dim", 32, "--tokens", 50,
        "--seed", 9, "--dtype", "bf16", "--query-count", 5, "-o", p, "-q")
    with h5py.File(p, "r") as f:
        check(f["kv/k"].shape == (2, 2, 50, 32), "k shape")
        check(f["kv/k"].dtype == np.uint16 and f["kv/k"].attrs["dtype"] == "bfloat16", "bf16 storage")
        check(f["kv/k"].chunks == (1, 1, 50, 32), f"chunks {f['kv/k'].chunks}")
        check(f["kv/q"].shape == (2, 4, 5, 32), "q shape")
        check(list(f["kv/q_positions"][:]) == [45, 46, 47, 48, 49], "q positions")
        check(int(f.attrs["kvdump_version"]) == 1, "version attr")
        check(int(f.attrs["synthetic"]) == 1, "synthetic attr")
        check(list(f.attrs["q_to_kv_head"]) == [0, 0, 1, 1], "head map attr")
        json.loads(f.attrs["rope_config"])
        check(len(f.attrs["model_artifact_sha256"]) == 64, "model digest")
    p = os.path.join(w, "f16.h5")
    run(KVTOOL, "synth", "--layers", 1, "--kv-heads", 1, "--q-heads", 1, "--head-dim", 8, "--tokens", 10,
        "--seed", 1, "--dtype", "f16", "-o", p, "-q")
    with h5py.File(p, "r") as f:
        check(f["kv/k"].dtype == np.float16, "float16 is a native HDF5 half for h5py")
        check(np.isfinite(f["kv/k"][:]).all(), "finite")
print("ok")
