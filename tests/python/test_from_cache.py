"""kvtool.from_cache: the three cache shapes PyTorch LLM code uses (a tuple of per-layer (k, v), an
object with key_cache/value_cache, one with layers[i].keys/.values), as NumPy arrays and as torch
tensors, with per-layer queries; only the chosen sequence of a batch is written; only about one
layer's float32 copy exists at a time; bad caches are kvtool.Errors that leave no file."""
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc

import h5py
import numpy as np

import kvtool

try:
    import torch
except ImportError:
    torch = None

KVTOOL = os.environ["KVTOOL"]
L, B, H, HQ, T, D = 4, 3, 2, 4, 33, 8


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def run_json(*args):
    p = subprocess.run([KVTOOL, *map(str, args)], capture_output=True, text=True)
    check(p.returncode == 0, f"kvtool {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


def expect_error(fn, reason, directory, name, needle=None):
    try:
        fn()
    except kvtool.Error as e:
        check(e.reason == reason, f"expected {reason}, got {e.reason}: {e}")
        check(needle is None or needle in str(e), f"message {str(e)!r} lacks {needle!r}")
        left = [n for n in os.listdir(directory) if n == name or n.startswith("." + name + ".tmp")]
        check(left == [], f"{reason}: left {left} behind")
        return
    sys.exit(f"FAIL: no kvtool.Error (expected {reason})")


class KeyValueCache:
    """HF DynamicCache (transformers <= 4.55): key_cache / value_cache lists."""

    def __init__(self, keys, values):
        self.key_cache, self.value_cache = list(keys), list(values)


class Layer:
    def __init__(self, k, v):
        self.keys, self.values = k, v


class LayeredCache:
    """Newer HF caches: layers[i].keys / .values."""

    def __init__(self, keys, values):
        self.layers = [Layer(k, v) for k, v in zip(keys, values)]


def shapes(keys, values):
    return {"tuple": tuple(zip(keys, values)), "key_cache": KeyValueCache(keys, values),
            "layers": LayeredCache(keys, values)}


def read(path, name):
    with h5py.File(path, "r") as f:
        return f["kv"][name][...].astype(np.float32)


rng = np.random.default_rng(3)
KEYS = [rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(L)]
VALUES = [rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(L)]
QUERIES = [rng.standard_normal((B, HQ, T, D)).astype(np.float32) for _ in range(L)]
INPUT_IDS = rng.integers(0, 512, (B, T))


def expect_dump(path, b, what, dtype=np.float16, queries=True):
    for name, src in (("k", KEYS), ("v", VALUES)) + ((("q", QUERIES),) if queries else ()):
        got = read(path, name)
        want = np.stack([x[b] for x in src]).astype(dtype).astype(np.float32)
        check(np.array_equal(got, want), f"{what}: /kv/{name} is not sequence {b} of the cache")
    with h5py.File(path, "r") as f:
        check(np.array_equal(f["kv/tokens"][...], INPUT_IDS[b]), f"{what}: tokens")
        if queries:
            check(list(f["kv/q_positions"][...]) == list(range(T)), f"{what}: q_positions")
            check(list(f.attrs["q_to_kv_head"]) == [0, 0, 1, 1], f"{what}: grouped head map")


with tempfile.TemporaryDirectory(prefix="kvtool-pycache-") as w:
    # --- NumPy caches of each shape, batch_index 0 and 2 -----------------------------------------
    for name, cache in shapes(KEYS, VALUES).items():
        for b in (0, 2):
            p = os.path.join(w, f"np-{name}-{b}.h5")
            out = kvtool.from_cache(cache, p, queries=QUERIES, tokens=INPUT_IDS, batch_index=b,
                                    q_positions=np.arange(T), identity={"tenant_namespace": "nb"})
            check(out == p, "from_cache returns the path")
            expect_dump(p, b, f"numpy {name} b={b}")
    p = os.path.join(w, "np-tuple-0.h5")
    info = run_json("inspect", p, "--json")
    check((info["geometry"]["layers"], info["geometry"]["kv_heads"], info["geometry"]["q_heads"],
           info["geometry"]["tokens"], info["geometry"]["q_tokens"]) == (L, H, HQ, T, T), f"inspect {info['geometry']}")
    check(info["identity"]["tenant_namespace"] == "nb" and "from_cache" in info["generator"], "inspect identity")
    check(run_json("verify", p, "--json")["ok"] is True, "verify")
    # Without queries: K/V only; a GQA head map must then be given.
    p = kvtool.from_cache(shapes(KEYS, VALUES)["tuple"], os.path.join(w, "noq.h5"), tokens=INPUT_IDS[1],
                          batch_index=1, q_to_kv_head=[0, 0, 1, 1], dtype="f32")
    expect_dump(p, 1, "no queries, f32", dtype=np.float32, queries=False)
    check(run_json("inspect", p, "--json")["geometry"]["q_heads"] == 4, "q_to_kv_head without queries")

    # --- torch tensors: each cache shape, each dtype ---------------------------------------------
    if torch is None:
        print("torch checks skipped: python3-torch is not installed")
    else:
        tk = [torch.from_numpy(x) for x in KEYS]
        tv = [torch.from_numpy(x).requires_grad_() for x in VALUES]  # as left by a forward pass
        tq = [torch.from_numpy(x) for x in QUERIES]
        for name, cache in shapes(tk, tv).items():
            p = os.path.join(w, f"t-{name}.h5")
            kvtool.from_cache(cache, p, queries=tq, tokens=torch.from_numpy(INPUT_IDS), batch_index=1)
            expect_dump(p, 1, f"torch {name}")
        for tdt, dt in ((torch.float16, "f16"), (torch.bfloat16, "bf16"), (torch.float32, "bf16")):
            keys = [x.to(tdt) for x in tk]
            # V a distinct tensor: keys and values that are one object are refused as an MLA latent
            vals = [x.clone() for x in keys]
            p = kvtool.from_cache(shapes(keys, vals)["layers"], os.path.join(w, f"t-{tdt}-{dt}.h5"), dtype=dt)
            with h5py.File(p, "r") as f:
                raw = f["kv/k"][...]
            got = (raw.astype(np.uint32) << 16).view(np.float32) if dt == "bf16" else raw.astype(np.float32)
            want = torch.stack([x[0] for x in keys]).to(torch.bfloat16 if dt == "bf16" else torch.float16).float()
            check(np.array_equal(got, want.numpy()), f"torch {tdt} -> {dt}: values differ from torch's rounding")
            check(run_json("verify", p, "--json")["ok"] is True, f"verify torch {tdt} -> {dt}")
        meta_kv = (torch.ones(1, 1, 2, 2, device="meta"), torch.ones(1, 1, 2, 2, device="meta"))
        expect_error(lambda: kvtool.from_cache([meta_kv], os.path.join(w, "x"),),
                     "USAGE", w, "x", "CPU")

    # --- Bounded memory: one layer of one sequence converted at a time -----------------------------
    big_keys = [np.random.default_rng(i).standard_normal((2, 4, 512, 64)).astype(np.float16) for i in range(6)]
    f32_layer_kv = 2 * 4 * 512 * 64 * 4  # k and v of one layer of one sequence, float32
    for label, keys, bound in (("float16", big_keys, 2 * f32_layer_kv),
                               ("float32", [x.astype(np.float32) for x in big_keys], 0.1 * f32_layer_kv)):
        vals = [x.copy() for x in keys]  # distinct arrays: one object as K and V is refused (MLA)
        tracemalloc.start()
        kvtool.from_cache(tuple(zip(keys, vals)), os.path.join(w, f"mem-{label}.h5"), batch_index=1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        check(peak <= bound, f"{label} cache: peak {peak} B > {bound:.0f} B (one layer's k+v in float32 is "
                             f"{f32_layer_kv} B, the whole cache {6 * f32_layer_kv} B)")
        print(f"from_cache {label}: traced peak {peak} B; one layer k+v f32 = {f32_layer_kv} B; "
              f"cache {6 * f32_layer_kv} B")

    # --- Bad caches -------------------------------------------------------------------------------
    bad = "bad.h5"
    pb = os.path.join(w, bad)
    pairs = list(zip(KEYS, VALUES))
    expect_error(lambda: kvtool.from_cache(pairs, pb, batch_index=3), "USAGE", w, bad, "batch_index 3")
    expect_error(lambda: kvtool.from_cache(pairs, pb, batch_index=-1), "USAGE", w, bad)
    expect_error(lambda: kvtool.from_cache({"k": 1}, pb), "USAGE", w, bad, "key_cache")
    expect_error(lambda: kvtool.from_cache([], pb), "USAGE", w, bad, "no layers")
    expect_error(lambda: kvtool.from_cache([KEYS[0]], pb), "USAGE", w, bad)  # not (k, v) pairs
    expect_error(lambda: kvtool.from_cache([(KEYS[0][0], VALUES[0][0])], pb), "USAGE", w, bad, "[batch, heads, T, d]")
    short = pairs[:3] + [(KEYS[3][:, :, :-1], VALUES[3][:, :, :-1])]  # e.g. a sliding-window layer
    expect_error(lambda: kvtool.from_cache(short, pb), "SHAPE_MISMATCH", w, bad)
    expect_error(lambda: kvtool.from_cache(pairs, pb, queries=QUERIES[:2]), "SHAPE_MISMATCH", w, bad)
    expect_error(lambda: kvtool.from_cache(pairs, pb, queries=QUERIES[0]), "USAGE", w, bad, "per-layer list")
    expect_error(lambda: kvtool.from_cache(pairs, pb, queries=[q[:, :, :, :4] for q in QUERIES]), "SHAPE_MISMATCH",
                 w, bad)
    expect_error(lambda: kvtool.from_cache(pairs, pb, tokens=INPUT_IDS[:, :-1]), "SHAPE_MISMATCH", w, bad)
    expect_error(lambda: kvtool.from_cache(pairs, pb, q_positions=[1]), "USAGE", w, bad, "without queries")
    empty = LayeredCache(KEYS, VALUES)
    empty.layers[2].keys = None  # an HF layer that was never filled
    expect_error(lambda: kvtool.from_cache(empty, pb), "USAGE", w, bad, "layer 2")
    nan_keys = [x.copy() for x in KEYS]
    nan_keys[3][1, 0, 4, 2] = np.nan
    expect_error(lambda: kvtool.from_cache(list(zip(nan_keys, VALUES)), pb, batch_index=1), "NON_FINITE", w, bad)
    kvtool.from_cache(list(zip(nan_keys, VALUES)), pb, batch_index=0)  # the NaN is in another sequence
    check(os.path.exists(pb), "NaN in another sequence refused")

print("ok: test_from_cache")
