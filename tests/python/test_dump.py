"""kvtool.DumpWriter / kvtool.write_dump: what they write equals the inputs (read back with h5py), is
accepted by `kvtool inspect` / `kvtool verify`, for f32, f16 and bf16; every bad input is a
kvtool.Error with a reason and leaves nothing at the output path; the GIL is released while writing
and float32 inputs reach the C++ writer without a copy."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc

import h5py
import numpy as np

import kvtool

KVTOOL = os.environ["KVTOOL"]
SHA = hashlib.sha256(b"test-model").hexdigest()
L, H, HQ, T, TQ, D = 3, 2, 4, 37, 5, 16


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def run_json(*args):
    p = subprocess.run([KVTOOL, *map(str, args)], capture_output=True, text=True)
    check(p.returncode == 0, f"kvtool {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


def stored(x, dtype):
    """x as the dump stores it, back in float32 (bf16: round to nearest even, formats/kvdump-v1.md)."""
    x = np.asarray(x, np.float32)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        u = x.view(np.uint32).astype(np.uint64)
        bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)
        return (bits << 16).astype(np.uint32).view(np.float32)
    return x


def read_h5(path, name):
    with h5py.File(path, "r") as f:
        ds = f["kv"][name]
        data = ds[...]
        if ds.attrs.get("dtype") in ("bfloat16", b"bfloat16"):
            data = (data.astype(np.uint32) << 16).view(np.float32)
        return data.astype(np.float32), dict(f.attrs)


def leftovers(directory, name):
    """The output file and any temporary of it."""
    return [n for n in os.listdir(directory) if n == name or n.startswith("." + name + ".tmp")]


def expect_error(fn, reason, directory=None, name=None, needle=None):
    try:
        fn()
    except kvtool.Error as e:
        check(e.reason == reason, f"expected {reason}, got {e.reason}: {e}")
        check(needle is None or needle in str(e), f"message {str(e)!r} lacks {needle!r}")
        if directory is not None:
            check(leftovers(directory, name) == [], f"{reason}: left {leftovers(directory, name)} behind")
        return e
    sys.exit(f"FAIL: no kvtool.Error (expected {reason})")


rng = np.random.default_rng(7)
K = rng.standard_normal((L, H, T, D)).astype(np.float32)
V = rng.standard_normal((L, H, T, D)).astype(np.float32)
Q = rng.standard_normal((L, HQ, TQ, D)).astype(np.float32)
TOKENS = rng.integers(0, 32000, T)
POSITIONS = np.arange(T) * 2 + 3
QPOS = np.arange(T - TQ, T) - 1
IDENTITY = {"model_artifact_sha256": SHA, "tenant_namespace": "team-a", "checkpoint_generation": 4,
            "rope_config": {"theta": 500000.0, "pairing": "half"}, "cache_generation": 9,
            "committed_frontier": T - 2}


def check_dump(path, dtype, k=K, v=V, q=Q):
    for name, want in (("k", k), ("v", v), ("q", q)):
        got, attrs = read_h5(path, name)
        check(np.array_equal(got, stored(want, dtype)), f"{dtype}: /kv/{name} differs from the input")
    check(attrs["model_artifact_sha256"] == SHA and attrs["tenant_namespace"] == "team-a", "identity attrs")
    check(attrs["committed_frontier"] == T - 2 and attrs["cache_generation"] == 9, "frontier/generation attrs")
    check(list(attrs["q_to_kv_head"]) == [0, 0, 1, 1], f"q_to_kv_head {attrs['q_to_kv_head']}")
    with h5py.File(path, "r") as f:
        check(np.array_equal(f["kv/tokens"][...], TOKENS), "tokens")
        check(np.array_equal(f["kv/positions"][...], POSITIONS), "positions")
        check(np.array_equal(f["kv/q_positions"][...], QPOS), "q_positions")
    info = run_json("inspect", path, "--json")
    g = info["geometry"]
    want_dtype = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype]
    check((g["layers"], g["kv_heads"], g["q_heads"], g["tokens"], g["head_dim"], g["q_tokens"], g["dtype"])
          == (L, H, HQ, T, D, TQ, want_dtype), f"inspect geometry {g}")
    ident = info["identity"]
    check(ident["model_artifact_sha256"] == SHA and ident["checkpoint_generation"] == 4, f"inspect identity {ident}")
    check(json.loads(ident["rope_config"])["theta"] == 500000.0, "rope_config dict -> JSON")
    check(ident["representation"] == f"full-kv-{ {'f32': 'fp32', 'f16': 'fp16', 'bf16': 'bf16'}[dtype] }-post-rope-v1",
          f"representation {ident['representation']}")
    check(info["has"] == {"q": True, "tokens": True, "positions": True}, f"has {info['has']}")
    check(info["generator"].startswith("kvtool."), f"generator {info['generator']}")
    check(run_json("verify", path, "--json")["ok"] is True, "verify")


with tempfile.TemporaryDirectory(prefix="kvtool-pydump-") as w:
    # --- DumpWriter and write_dump, every dtype ----------------------------------------------------
    for dtype in ("f32", "f16", "bf16"):
        p = os.path.join(w, f"w-{dtype}.h5")
        with kvtool.DumpWriter(p, layers=L, kv_heads=H, head_dim=D, tokens=T, q_heads=HQ, q_tokens=TQ,
                               dtype=dtype, identity=IDENTITY) as wr:
            check(not os.path.exists(p), "the output exists before commit")
            for layer in (2, 0, 1):  # any order
                kl = K[layer].copy()
                kl.flags.writeable = False  # read-only inputs are fine
                wr.add_layer(layer, kl, V[layer][None], Q[layer])  # a batch axis of 1 is accepted
            wr.set_tokens(TOKENS)
            wr.set_positions(POSITIONS)
            wr.set_q_positions(QPOS)
        check(wr.state == "committed" and os.path.exists(p), "context manager did not commit")
        check_dump(p, dtype)
        p2 = os.path.join(w, f"o-{dtype}.h5")
        out = kvtool.write_dump(p2, K, list(V), q=Q, q_positions=QPOS, tokens=TOKENS, positions=POSITIONS,
                                dtype=dtype, identity=IDENTITY)
        check(out == p2, "write_dump returns the path")
        check_dump(p2, dtype)
    # Default identity and q_positions: a dump that verifies; queries default to the last T_q rows.
    p = kvtool.write_dump(os.path.join(w, "defaults.h5"), K, V, q=Q)
    with h5py.File(p, "r") as f:
        check(list(f["kv/q_positions"][...]) == list(range(T - TQ, T)), "default q_positions")
        check(f.attrs["model_artifact_sha256"] == "0" * 64, "default model digest")
        check(f.attrs["committed_frontier"] == T and f.attrs["representation"] == "full-kv-fp16-post-rope-v1",
              "default frontier/representation")
        check(json.loads(f.attrs["rope_config"])["pairing"] == "half", "default rope_config")
    check(run_json("verify", p, "--json")["ok"] is True, "verify defaults")
    check(kvtool.DumpWriter.__doc__ and "committed_frontier" in kvtool.DumpWriter.__doc__, "identity table in help")

    # NaN/Inf beyond the committed frontier are allowed (not committed history), and verify agrees.
    Kn = K.copy()
    Kn[1, 0, T - 1, 3] = np.nan
    p = kvtool.write_dump(os.path.join(w, "nan-tail.h5"), Kn, V, identity={"committed_frontier": T - 1})
    check(run_json("verify", p, "--json")["ok"] is True, "NaN beyond the frontier")

    # --- Every refused input: a reason, and no file (nor temporary) left ---------------------------
    def writer(name, **kw):
        args = dict(layers=L, kv_heads=H, head_dim=D, tokens=T)
        args.update(kw)
        return kvtool.DumpWriter(os.path.join(w, name), **args)

    def in_block(name, body, **kw):
        def go():
            with writer(name, **kw) as wr:
                body(wr)
        return go

    bad = "bad.h5"
    Kn = K.copy()
    Kn[1, 1, 5, 0] = np.nan
    e = expect_error(in_block(bad, lambda wr: [wr.add_layer(i, Kn[i], V[i]) for i in range(L)]), "NON_FINITE", w, bad)
    check("layer 1, kv head 1" in str(e) and "row 5" in str(e), f"NaN located: {e}")
    big = K.copy()
    big[0, 0, 0, 0] = 70000.0  # finite in float32, Inf in float16
    expect_error(lambda: kvtool.write_dump(os.path.join(w, bad), big, V), "NON_FINITE", w, bad, "float16")
    kvtool.write_dump(os.path.join(w, "big-f32.h5"), big, V, dtype="f32")  # fine as f32
    big[0, 0, 0, 0] = 3.4e38  # finite in float32, rounds to Inf in bfloat16
    expect_error(lambda: kvtool.write_dump(os.path.join(w, bad), big, V, dtype="bf16"), "NON_FINITE", w, bad)
    Qn = Q.copy()
    Qn[2, 3, 4, 1] = np.inf
    expect_error(lambda: kvtool.write_dump(os.path.join(w, bad), K, V, q=Qn), "NON_FINITE", w, bad, "query head 3")
    expect_error(in_block(bad, lambda wr: wr.add_layer(0, K[0], V[0, :, :-1])), "SHAPE_MISMATCH", w, bad)
    expect_error(in_block(bad, lambda wr: wr.add_layer(0, K[0, :, :, :8], V[0, :, :, :8])), "SHAPE_MISMATCH", w, bad,
                 "expected [2, 37, 16]")
    expect_error(in_block(bad, lambda wr: wr.add_layer(0, K[:2], V[:2])), "SHAPE_MISMATCH", w, bad, "batch axis")
    expect_error(lambda: kvtool.write_dump(os.path.join(w, bad), K, V[:2]), "SHAPE_MISMATCH", w, bad)
    expect_error(lambda: kvtool.write_dump(os.path.join(w, bad), [K[0], K[1][:, :5]], [V[0], V[1][:, :5]]),
                 "SHAPE_MISMATCH", w, bad)
    expect_error(in_block(bad, lambda wr: wr.add_layer(L, K[0], V[0])), "USAGE", w, bad, "not in [0, 3)")
    expect_error(in_block(bad, lambda wr: wr.add_layer(-1, K[0], V[0])), "USAGE", w, bad)
    expect_error(in_block(bad, lambda wr: [wr.add_layer(0, K[0], V[0]), wr.add_layer(0, K[0], V[0])]), "USAGE",
                 w, bad, "already added")
    expect_error(in_block(bad, lambda wr: wr.add_layer(0, K[0], V[0])), "USAGE", w, bad, "layer(s) 1, 2")
    expect_error(in_block(bad, lambda wr: wr.add_layer(0, K[0], V[0], Q[0])), "USAGE", w, bad, "q_tokens=0")
    expect_error(in_block(bad, lambda wr: [wr.add_layer(i, K[i], V[i]) for i in range(L)], q_tokens=TQ, q_heads=HQ),
                 "USAGE", w, bad, "without q")
    expect_error(in_block(bad, lambda wr: wr.set_tokens(TOKENS[:-1])), "SHAPE_MISMATCH", w, bad)
    expect_error(in_block(bad, lambda wr: wr.set_tokens(np.full(T, 2**40))), "USAGE", w, bad, "int32")
    expect_error(in_block(bad, lambda wr: wr.set_positions(POSITIONS[::-1])), "BAD_ATTRIBUTE", w, bad)
    expect_error(in_block(bad, lambda wr: wr.set_q_positions([0, 1, 2, 3, T]), q_tokens=TQ), "BAD_ATTRIBUTE", w, bad)
    expect_error(lambda: writer(bad, dtype="f8"), "USAGE", w, bad, "unknown dtype")
    expect_error(lambda: writer(bad, dtype=3), "USAGE", w, bad)
    e = expect_error(lambda: writer(bad, identity={"tokenizer_digest": "x"}), "USAGE", w, bad, "tokenizer_digest")
    check("model_artifact_sha256" in str(e) and "tenant_namespace" in str(e), "known keys listed")
    expect_error(lambda: writer(bad, identity={"model_artifact_sha256": "abc"}), "BAD_ATTRIBUTE", w, bad)
    expect_error(lambda: writer(bad, identity={"tenant_namespace": "../x"}), "BAD_ATTRIBUTE", w, bad)
    expect_error(lambda: writer(bad, identity={"rope_config": "[1, 2]"}), "BAD_ATTRIBUTE", w, bad)
    expect_error(lambda: writer(bad, identity={"tenant_namespace": 5}), "USAGE", w, bad)
    expect_error(lambda: writer(bad, identity={"cache_generation": 2**70}), "USAGE", w, bad)
    expect_error(lambda: writer(bad, identity={"committed_frontier": T + 1}), "FRONTIER_BEYOND_T", w, bad)
    expect_error(lambda: writer(bad, identity="sha"), "USAGE", w, bad)
    expect_error(lambda: writer(bad, q_to_kv_head=[0, 2]), "BAD_HEAD_MAP", w, bad)
    expect_error(lambda: writer(bad, q_heads=3), "USAGE", w, bad, "multiple")
    expect_error(lambda: writer(bad, q_heads=4, q_to_kv_head=[0, 1]), "USAGE", w, bad)
    # Huge claimed sizes are refused before anything is allocated or written.
    expect_error(lambda: writer(bad, tokens=2**40), "SHAPE_MISMATCH", w, bad)
    expect_error(lambda: writer(bad, layers=10**6), "SHAPE_MISMATCH", w, bad)
    expect_error(lambda: writer(bad, kv_heads=2**62), "USAGE", w, bad)
    expect_error(lambda: writer(bad, head_dim=0), "USAGE", w, bad)
    # Wrong Python types.
    expect_error(lambda: writer(bad, layers="3"), "USAGE", w, bad)
    expect_error(lambda: writer(bad, layers=3.0), "USAGE", w, bad)
    expect_error(lambda: kvtool.DumpWriter(5, layers=1, kv_heads=1, head_dim=1, tokens=1), "USAGE")
    expect_error(in_block(bad, lambda wr: wr.add_layer("0", K[0], V[0])), "USAGE", w, bad)
    expect_error(in_block(bad, lambda wr: wr.add_layer(0, "keys", V[0])), "USAGE", w, bad)
    expect_error(in_block(bad, lambda wr: wr.add_layer(0, K[0].astype(np.complex64), V[0])), "USAGE", w, bad)
    expect_error(lambda: kvtool.write_dump(os.path.join(w, bad), K[0], V[0]), "USAGE", w, bad, "[L, heads, T, d]")
    # The engine itself refuses anything but float32 C-contiguous arrays (no silent copy there).
    # The module kvtool/dump.py (kvtool.dump is the function `kvtool dump --gguf`).
    dump_module = sys.modules["kvtool.dump"]
    raw = kvtool._kvtool._DumpWriter(os.path.join(w, bad), L, H, D, T, 0, "f16", dump_module._identity(
        None, "f16", D, T, "t"), [0, 1], False)
    expect_error(lambda: raw.add_layer(0, K[0].astype(np.float64), V[0]), "USAGE", needle="float32")
    expect_error(lambda: raw.add_layer(0, np.asfortranarray(K[0]), V[0]), "USAGE", needle="C-contiguous")
    raw.abort()
    raw = None
    check(leftovers(w, bad) == [], "the raw writer left a file")

    # An exception inside the with block aborts; abort() and garbage collection leave nothing.
    try:
        with writer(bad) as wr:
            wr.add_layer(0, K[0], V[0])
            raise KeyError("user code failed")
    except KeyError:
        pass
    check(wr.state == "aborted" and leftovers(w, bad) == [], "exception in the block left a file")
    wr = writer(bad)
    wr.add_layer(0, K[0], V[0])
    check(len(leftovers(w, bad)) == 1 and not os.path.exists(os.path.join(w, bad)), "one temporary, no output")
    del wr
    check(leftovers(w, bad) == [], "a dropped writer left its temporary")
    wr = writer(bad)
    wr.abort()
    expect_error(lambda: wr.add_layer(0, K[0], V[0]), "USAGE", needle="aborted")
    # overwrite=False keeps an existing file intact; overwrite=True replaces it at commit only.
    keep = os.path.join(w, "keep.h5")
    with open(keep, "wb") as f:
        f.write(b"precious")
    expect_error(lambda: kvtool.write_dump(keep, K, V), "OUTPUT_EXISTS")
    check(open(keep, "rb").read() == b"precious", "overwrite=False touched the file")
    wr = kvtool.DumpWriter(keep, layers=L, kv_heads=H, head_dim=D, tokens=T, overwrite=True)
    wr.add_layer(0, K[0], V[0])
    check(open(keep, "rb").read() == b"precious", "overwrite=True replaced the file before commit")
    wr.abort()
    check(open(keep, "rb").read() == b"precious", "abort touched the existing file")
    # After commit: further writes refused, abort() is a no-op, the file stays.
    p = os.path.join(w, "done.h5")
    wr = writer("done.h5")
    for i in range(L):
        wr.add_layer(i, K[i], V[i])
    check(wr.missing_layers == [], "missing_layers")
    check(wr.commit() == p, "commit returns the path")
    expect_error(lambda: wr.add_layer(0, K[0], V[0]), "USAGE", needle="committed")
    wr.abort()
    check(os.path.exists(p) and wr.state == "committed", "abort after commit removed the dump")

    # Threads may share one writer (the GIL is released while writing; the writer serialises).
    p = os.path.join(w, "threads.h5")
    wr = writer("threads.h5", dtype="f32")
    ths = [threading.Thread(target=wr.add_layer, args=(i, K[i], V[i])) for i in range(L)]
    [t.start() for t in ths]
    [t.join() for t in ths]
    wr.commit()
    check(np.array_equal(read_h5(p, "k")[0], K) and np.array_equal(read_h5(p, "v")[0], V), "threaded layers")

    # --- float32 C-contiguous inputs reach HDF5 without a Python-side copy; others are copied once -
    LB = np.random.default_rng(1).standard_normal((1, 8, 4096, 64)).astype(np.float32)  # 8 MiB a layer
    layer_bytes = LB[0].nbytes
    for arr, lo, hi, what in ((LB[0], 0, 0.05, "float32"), (LB[0].astype(np.float16), 0.9, 1.5, "float16")):
        wr = kvtool.DumpWriter(os.path.join(w, "mem.h5"), layers=1, kv_heads=8, head_dim=64, tokens=4096,
                               overwrite=True)
        tracemalloc.start()
        wr.add_layer(0, arr, arr)
        peak = tracemalloc.get_traced_memory()[1] / 2  # k and v
        tracemalloc.stop()
        wr.abort()
        check(lo * layer_bytes <= peak <= hi * layer_bytes,
              f"{what} input: Python-side peak {peak:.0f} B per array, layer is {layer_bytes} B")

    # --- The GIL is released while a layer is checked, converted and written -----------------------
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    HUGE = np.random.default_rng(2).standard_normal((4, 16384, 128)).astype(np.float32)  # 32 MiB
    th = threading.Thread(target=ticker)
    th.start()
    time.sleep(0.01)
    wr = kvtool.DumpWriter(os.path.join(w, "gil.h5"), layers=1, kv_heads=4, head_dim=128, tokens=16384,
                           dtype="bf16", overwrite=True)
    t0 = time.perf_counter()
    wr.add_layer(0, HUGE, HUGE)
    t1 = time.perf_counter()
    stop.set()
    th.join()
    wr.abort()
    inside = sum(t0 < t < t1 for t in ticks)
    check(inside >= 5, f"only {inside} ticks of another thread during a {1000 * (t1 - t0):.0f} ms add_layer: "
                       "the GIL was held")
    print(f"GIL: {inside} ticks during a {1000 * (t1 - t0):.0f} ms add_layer")

print("ok: test_dump")
