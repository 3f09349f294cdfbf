#!/usr/bin/python3
"""Writes hostile kvdump files for tests/cli/test_security_dump.sh.

Usage: make_hostile_dumps.py OUTDIR. Each file breaks exactly one rule of formats/kvdump-v1.md;
ok.h5 breaks none. The writer follows the h5py example of that page.
"""
import hashlib
import json
import os
import sys

import h5py
import numpy as np

L, H, HQ, T, D = 2, 2, 4, 32, 16
SHA = "ab" * 32


def attrs(f, **over):
    a = f.attrs
    a["kvdump_version"] = 1
    a["model_artifact_sha256"] = SHA
    a["checkpoint_generation"] = 0
    a["adapter_set_sha256"] = hashlib.sha256(b"kvtool.adapter-set.v1:[]").hexdigest()
    a["position_contract"] = "post-rope-absolute-v1"
    a["rope_config"] = json.dumps({"theta": 10000.0, "scaling": "none", "pairing": "half"})
    a["tenant_namespace"] = "acme"
    for gen in ("namespace", "request", "cache", "publication"):
        a[gen + "_generation"] = 0
    a["committed_frontier"] = T
    a["q_to_kv_head"] = np.asarray([0, 0, 1, 1], np.int64)
    a["representation"] = "full-kv-fp32-post-rope-v1"
    for k, v in over.items():
        a[k] = v


def write(path, q=None, q_positions=None, positions=None, **over):
    rng = np.random.default_rng(3)
    k = rng.standard_normal((L, H, T, D)).astype(np.float32)
    v = rng.standard_normal((L, H, T, D)).astype(np.float32)
    if q is None:
        q = rng.standard_normal((L, HQ, 4, D)).astype(np.float32)
    with h5py.File(path, "w") as f:
        g = f.create_group("kv")
        g.create_dataset("k", data=k, chunks=(1, 1, T, D))
        g.create_dataset("v", data=v, chunks=(1, 1, T, D))
        g.create_dataset("q", data=q, chunks=(1, 1, q.shape[2], D))
        qp = [T - 4, T - 3, T - 2, T - 1] if q_positions is None else q_positions
        g.create_dataset("q_positions", data=np.asarray(qp, np.int64))
        if positions is not None:
            g.create_dataset("positions", data=np.asarray(positions, np.int64))
        attrs(f, **over)


def write_shape_only(path, shape, chunks, dtype="float32", data=None, compression=None):
    """K and V of `shape` whose chunks are never written (or hold `data`)."""
    with h5py.File(path, "w") as f:
        g = f.create_group("kv")
        for name in ("k", "v"):
            if data is None:
                g.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks)
            else:
                g.create_dataset(name, data=data, chunks=chunks, compression=compression)
        attrs(f, q_to_kv_head=np.zeros(shape[1], np.int64), committed_frontier=shape[2])


def main(out):
    os.makedirs(out, exist_ok=True)
    p = lambda name: os.path.join(out, name)
    write(p("ok.h5"))
    # Finding 13: identity attributes.
    write(p("tenant_nul.h5"), tenant_namespace=np.bytes_(b"a\x00b"))
    write(p("tenant_traversal.h5"), tenant_namespace="../../etc/passwd")
    write(p("tenant_dotdot.h5"), tenant_namespace="..")
    write(p("tenant_empty.h5"), tenant_namespace="")
    write(p("sha_short.h5"), model_artifact_sha256="abc123")
    write(p("sha_nonhex.h5"), model_artifact_sha256="zz" * 32)
    write(p("positions_decreasing.h5"), positions=list(range(T - 1)) + [0])
    # Finding 13: query values and positions.
    bad = np.random.default_rng(4).standard_normal((L, HQ, 4, D)).astype(np.float32)
    bad[1, 3, 2, 5] = np.nan
    write(p("q_nan.h5"), q=bad)
    bad = bad.copy()
    bad[1, 3, 2, 5] = np.inf
    write(p("q_inf.h5"), q=bad)
    write(p("qpos_negative.h5"), q_positions=[-1, 1, 2, 3])
    write(p("qpos_beyond.h5"), q_positions=[0, 1, 2, T])
    # Finding 2: a head map longer than the kv heads allow.
    write(p("headmap_long.h5"), q_to_kv_head=np.zeros(4098, np.int64))
    # Findings 12 and 13: shapes the file's storage does not hold.
    write_shape_only(p("layers_2p20.h5"), (1 << 20, 1, 4, 4), (1, 1, 4, 4))
    write_shape_only(p("huge_unwritten.h5"), (4096, 4096, 1 << 20, 128), (1, 1, 1 << 14, 128), dtype="float16")
    with h5py.File(p("contiguous_unwritten.h5"), "w") as f:
        g = f.create_group("kv")
        for name in ("k", "v"):
            g.create_dataset(name, shape=(64, 8, 4096, 64), dtype="float32")
        attrs(f, q_to_kv_head=np.zeros(8, np.int64), committed_frontier=4096)
    tiny = np.random.default_rng(5).standard_normal((1, 1, 1024, 64)).astype(np.float16)
    write_shape_only(p("tiny_chunks.h5"), tiny.shape, (1, 1, 1, 1), data=tiny)
    zeros = np.zeros((1, 1, 1 << 20, 64), np.float16)  # 128 MiB of zeros: a decompression bomb
    write_shape_only(p("gzip_bomb.h5"), zeros.shape, (1, 1, 1 << 14, 64), data=zeros, compression="gzip")
    # A dump whose K lives in another file.
    write(p("external.h5"))
    with h5py.File(p("external.h5"), "a") as f:
        del f["kv/k"]
        f["kv/k"] = h5py.ExternalLink("ok.h5", "/kv/k")


if __name__ == "__main__":
    main(sys.argv[1])
