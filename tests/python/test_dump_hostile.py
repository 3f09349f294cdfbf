"""Hostile and confused inputs to kvtool.DumpWriter / write_dump / from_cache.

Each block is the regression test of one way the package was found to mishandle input: the input, and what must happen now
(a kvtool.Error with the right reason and a message naming the argument, the output path and its
folder left as they were, no temporary file). Where the old behaviour was a silently wrong dump, the
dump is also read back or run through `kvtool verify`.
"""
import copy
import hashlib
import os
import pickle
import resource
import subprocess
import sys
import tempfile

import h5py
import numpy as np

import kvtool
from kvtool import _kvtool

KVTOOL = os.environ["KVTOOL"]
SHA = hashlib.sha256(b"hostile").hexdigest()
L, H, T, D = 2, 2, 5, 4
RNG = np.random.default_rng(12)
K = RNG.standard_normal((L, H, T, D)).astype(np.float32)
V = RNG.standard_normal((L, H, T, D)).astype(np.float32)


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def listing(directory):
    """Everything in the folder, temporaries (".NAME.tmp.*") included."""
    return sorted(os.listdir(directory))


def expect_error(fn, reason, needle=None, directory=None, before=None):
    """fn() raises a kvtool.Error with `reason` whose message holds `needle`; the folder is as before."""
    try:
        fn()
    except kvtool.Error as e:
        check(e.reason == reason, f"expected {reason}, got {e.reason}: {e}")
        check(needle is None or needle in str(e), f"{reason}: {needle!r} not in {str(e)[:300]!r}")
        if directory is not None:
            check(listing(directory) == (before or []), f"{reason}: folder now holds {listing(directory)}")
        return e
    except BaseException as e:  # noqa: BLE001 - any other exception is the failure being tested
        sys.exit(f"FAIL: expected kvtool.Error {reason}, got {type(e).__name__}: {e}")
    sys.exit(f"FAIL: no error (expected {reason}, {needle!r})")


def verify(path):
    p = subprocess.run([KVTOOL, "verify", path], capture_output=True, text=True)
    check(p.returncode == 0, f"kvtool verify {path}: {p.returncode} {p.stderr}")


def writer(path, **kw):
    args = dict(layers=L, kv_heads=H, head_dim=D, tokens=T, identity={"model_artifact_sha256": SHA})
    args.update(kw)
    return kvtool.DumpWriter(path, **args)


def raw_identity(**changes):
    """A complete identity dict for the bindings' own _DumpWriter (the package fills the defaults)."""
    ident = {k: "0" * 64 for k in ("model_artifact_sha256", "adapter_set_sha256")}
    ident.update(position_contract="p", rope_config="{}", tenant_namespace="t", representation="r", generator="g",
                 checkpoint_generation=0, namespace_generation=0, request_generation=0, cache_generation=0,
                 publication_generation=0, committed_frontier=1, synthetic=0)
    ident.update(changes)
    return ident


def fill(w, q_tokens=0):
    for layer in range(L):
        w.add_layer(layer, K[layer], V[layer], K[layer][:, :q_tokens] if q_tokens else None)


def paths(w):
    # --- A NUL in the path: open() stopped at it and created "a" instead of "a\0b.h5" ---------------
    expect_error(lambda: kvtool.write_dump(os.path.join(w, "a\0b.h5"), K, V), "USAGE", "NUL", w)
    expect_error(lambda: _kvtool._DumpWriter(os.fsencode(os.path.join(w, "a\0b.h5")), 1, 1, 1, 1, 0, "f32",
                                             raw_identity(), [0], False), "USAGE", "NUL", w)  # the C++ check
    # A path that is not UTF-8 is a valid name: written under exactly that name.
    raw = os.path.join(os.fsencode(w), b"\xff\xfe.h5")
    out = kvtool.write_dump(raw, K, V)
    check(os.fsencode(out) == raw and listing(w) == [os.fsdecode(b"\xff\xfe.h5")], f"non-UTF-8 path: {listing(w)}")
    os.unlink(raw)

    # --- overwrite="no" is truthy: it replaced an existing file ------------------------------------
    keep = os.path.join(w, "keep.h5")
    with open(keep, "w") as f:
        f.write("someone's data")
    for bad in ("no", "False", 0, None):
        expect_error(lambda: kvtool.write_dump(keep, K, V, overwrite=bad), "USAGE", "overwrite", w, ["keep.h5"])
    check(open(keep).read() == "someone's data", "overwrite='no' replaced the file")
    os.unlink(keep)

    # --- A dangling symlink at the path, overwrite=False: the rename replaced the link ------------
    link = os.path.join(w, "link.h5")
    os.symlink(os.path.join(w, "missing", "target.h5"), link)
    expect_error(lambda: writer(link), "OUTPUT_EXISTS", "link.h5", w, ["link.h5"])  # refused when created
    expect_error(lambda: kvtool.write_dump(link, K, V), "OUTPUT_EXISTS", "link.h5", w, ["link.h5"])
    check(os.path.islink(link), "the symlink was replaced")
    os.unlink(link)

    # --- The path appears while a writer is open (overwrite=False): commit clobbered it ------------
    out = os.path.join(w, "late.h5")
    wr = writer(out)
    fill(wr)
    with open(out, "w") as f:
        f.write("written by another process meanwhile")
    expect_error(wr.commit, "OUTPUT_EXISTS", "late.h5")
    check(open(out).read().startswith("written by another"), "commit replaced a file created meanwhile")
    check(wr.state == "open", f"a refused commit must leave the writer open, got {wr.state}")
    os.unlink(out)
    check(wr.commit() == out and wr.state == "committed", "commit after removing the file")
    verify(out)
    os.unlink(out)

    def in_block():  # the same inside `with`: the refused commit aborts, nothing of ours is left
        with writer(out) as wr2:
            fill(wr2)
            with open(out, "w") as f:
                f.write("theirs")

    expect_error(in_block, "OUTPUT_EXISTS", None, w, ["late.h5"])
    check(open(out).read() == "theirs", "with-block commit replaced a file created meanwhile")
    os.unlink(out)


def integers(w):
    out = os.path.join(w, "x.h5")
    # --- Integers beyond 64 bits reached pybind11 and came back as a TypeError ----------------------
    expect_error(lambda: writer(out, layers=2**80), "USAGE", "layers", w)
    expect_error(lambda: writer(out, tokens=-(2**70)), "USAGE", "tokens", w)
    expect_error(lambda: writer(out, identity={"cache_generation": 2**64}), "USAGE", "cache_generation", w)
    wr = writer(out)
    expect_error(lambda: wr.add_layer(2**80, K[0], V[0]), "USAGE", "layer", w, [n for n in listing(w)])
    expect_error(lambda: wr.add_layer(np.uint64(2**64 - 1), K[0], V[0]), "USAGE", "layer")
    expect_error(lambda: wr.add_layer(np.bool_(True), K[0], V[0]), "USAGE", "bool")
    wr.add_layer(np.int32(0), K[0], V[0])  # NumPy integer scalars and 0-d arrays are layer numbers
    wr.add_layer(np.array(1), K[1], V[1])
    wr.abort()
    pkv = tuple((k[None], v[None]) for k, v in zip(K, V))
    expect_error(lambda: kvtool.from_cache(pkv, out, batch_index=2**80), "USAGE", "batch_index", w)
    # A 10**6-entry head map is refused before a Python int is made of each entry.
    expect_error(lambda: writer(out, q_to_kv_head=np.zeros(10**6, np.int64)), "BAD_HEAD_MAP", "1000000", w)
    # A shape claimed by an object (nothing allocated): named after kv_heads, not after q_heads.
    claim = type("Claim", (), {"shape": (2**40, 2**40, 2**40)})()
    expect_error(lambda: kvtool.write_dump(out, [claim], [claim]), "USAGE", "kv_heads", w)


def queries_beyond_t(w):
    # --- q_tokens > T: the default q_positions were range(T - T_q, T), negative rows; the committed
    #     dump failed `kvtool verify` (BAD_ATTRIBUTE) ----------------------------------------------
    out = os.path.join(w, "q.h5")
    tq = T + 2
    wr = writer(out, q_tokens=tq)
    for layer in range(L):
        wr.add_layer(layer, K[layer], V[layer], np.ones((H, tq, D), np.float32))
    expect_error(wr.commit, "USAGE", "set_q_positions", w, [n for n in listing(w)])
    check(wr.state == "open", "refused commit must leave the writer open")
    wr.set_q_positions(np.arange(tq) % T)  # repeated rows are allowed: several queries at one row
    wr.commit()
    verify(out)
    os.unlink(out)
    pkv = tuple((k[None], v[None]) for k, v in zip(K, V))
    qs = [np.ones((1, H, tq, D), np.float32)] * L
    expect_error(lambda: kvtool.from_cache(pkv, out, queries=qs), "USAGE", "pass q_positions", w)
    kvtool.from_cache(pkv, out, queries=qs, q_positions=np.arange(tq) % T)
    verify(out)
    os.unlink(out)


def identity(w):
    out = os.path.join(w, "x.h5")
    # --- A NUL in an identity string: HDF5 stored the text before it, so a dump claiming
    #     "post-rope-absolute-v1\0junk" silently had the default contract --------------------------
    for key in ("position_contract", "representation", "generator", "tenant_namespace"):
        expect_error(lambda: writer(out, identity={key: "post-rope-absolute-v1\0junk"}), "USAGE", key, w)
    ident = raw_identity(position_contract="a\0b")
    expect_error(lambda: _kvtool._DumpWriter(os.fsencode(out), 1, 1, 1, 1, 0, "f32", ident, [0], False), "USAGE",
                 "position_contract", w)  # the C++ check itself
    # --- synthetic=2 or -1 was stored as 1 ---------------------------------------------------------
    for bad in (2, -1):
        expect_error(lambda: writer(out, identity={"synthetic": bad}), "USAGE", "synthetic", w)
    # --- Both a key and its alias: the one later in the dict won -----------------------------------
    expect_error(lambda: writer(out, identity={"model_artifact_sha256": SHA, "model_artifact_digest": "1" * 64}),
                 "USAGE", "twice", w)
    # --- A huge value quoted whole in the error (a 1 MB message) -----------------------------------
    e = expect_error(lambda: writer(out, identity={"tenant_namespace": "x" * 10**6}), "BAD_ATTRIBUTE",
                     "tenant_namespace", w)
    check(len(str(e)) < 1000, f"a {len(str(e))}-character message")
    # --- rope_config computed with NumPy scalars was "not JSON serializable" -----------------------
    write = writer(out, identity={"rope_config": {"theta": np.float32(5e5), "head_dim": np.int64(D)}})
    fill(write)
    write.commit()
    with h5py.File(out, "r") as f:
        rope = f.attrs["rope_config"]
    check('"head_dim":4' in rope.replace(" ", "") and "500000" in rope, f"rope_config stored as {rope}")
    os.unlink(out)
    expect_error(lambda: writer(out, dtype=None), "USAGE", "None", w)  # said "unknown dtype 'float64'"


def arguments(w):
    out = os.path.join(w, "x.h5")
    # --- write_dump(k=None / a generator / an int): TypeError; "abc" / a dict: wrong layer counts ---
    for bad in (None, (x for x in K), 5, "abc", {0: K[0], 1: K[1]}, {1, 2}):
        expect_error(lambda: kvtool.write_dump(out, bad, V), "USAGE", "k must be", w)
    expect_error(lambda: kvtool.write_dump(out, K, V, q=iter(K)), "USAGE", "q must be", w)
    bad_shape = type("S", (), {"shape": "abc"})()
    expect_error(lambda: kvtool.write_dump(out, [bad_shape], [bad_shape]), "USAGE", "k[0]", w)
    # --- Non-arrays in add_layer / set_tokens: "has dtype object; expected floating-point numbers" --
    wr = writer(out)
    for bad in (None, {"k": 1}, (x for x in K[0])):
        expect_error(lambda: wr.add_layer(0, bad, V[0]), "USAGE", "k must be a NumPy array", w, listing(w))
    expect_error(lambda: wr.set_tokens([2**70] * T), "USAGE", "64 bits")
    expect_error(lambda: wr.set_tokens(np.ones(T, bool)), "USAGE", "expected integers")
    # --- Shape errors did not say which layer ------------------------------------------------------
    wr.add_layer(0, K[0], V[0])
    expect_error(lambda: wr.add_layer(1, K[1], V[1][:, :3]), "SHAPE_MISMATCH", "v of layer 1")
    # --- pickle / copy: a TypeError about _DumpWriter; copy.copy shared one temporary --------------
    for op in (pickle.dumps, copy.copy, copy.deepcopy):
        expect_error(lambda: op(wr), "USAGE", "cannot be pickled or copied")
    check(wr.state == "open", "copying must not touch the writer")
    wr.abort()
    check(listing(w) == [], f"abort left {listing(w)}")
    # --- 300 missing layers listed one by one in the commit error ----------------------------------
    many = writer(out, layers=300)
    e = expect_error(many.commit, "USAGE", "(300 layers)")
    check(len(str(e)) < 300, f"a {len(str(e))}-character message")
    many.abort()


def caches(w):
    out = os.path.join(w, "x.h5")
    pkv = tuple((k[None], v[None]) for k, v in zip(K, V))
    # --- HF input_ids [1, T] with batch_index=1: IndexError ----------------------------------------
    two = tuple((np.concatenate([k, k]), np.concatenate([v, v])) for k, v in pkv)
    expect_error(lambda: kvtool.from_cache(two, out, batch_index=1, tokens=np.arange(T)[None]), "USAGE",
                 "batch_index", w)
    # --- key_cache / layers that are not lists: TypeError; an empty .layers: "not a supported cache"
    expect_error(lambda: kvtool.from_cache(type("C", (), {"key_cache": 5, "value_cache": 5})(), out), "USAGE",
                 "key_cache", w)
    expect_error(lambda: kvtool.from_cache(type("C", (), {"layers": 5})(), out), "USAGE", "layers", w)
    expect_error(lambda: kvtool.from_cache(type("C", (), {"layers": []})(), out), "USAGE", "no layers", w)
    # --- Arguments swapped: from_cache(path, cache) --------------------------------------------------
    expect_error(lambda: kvtool.from_cache(out, pkv), "USAGE", "from_cache(past_key_values, path", w)
    # --- An empty cache (T = 0): "tokens must be at least 1", an argument nobody passed --------------
    expect_error(lambda: kvtool.from_cache(tuple((k[:, :, :0], v[:, :, :0]) for k, v in pkv), out), "USAGE",
                 "keys[0]", w)
    expect_error(lambda: kvtool.from_cache(pkv, out, queries=[K[0][None]]), "SHAPE_MISMATCH",
                 "keys has 2 layers but queries has 1", w)


def streams_and_interrupts(w):
    # --- A declared geometry of 2^31 tokens x 4096 heads x 4096 layers allocates nothing -----------
    out = os.path.join(w, "big.h5")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    big = kvtool.DumpWriter(out, layers=4096, kv_heads=4096, head_dim=4096, tokens=2**31, q_tokens=2**31,
                            q_heads=4096, dtype="f32")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    temp = [os.path.getsize(os.path.join(w, n)) for n in listing(w)]
    check(grown < 64 and len(temp) == 1 and temp[0] < 1 << 20, f"grew {grown:.0f} MiB, temporaries {temp}")
    expect_error(lambda: big.add_layer(0, K[0], V[0]), "SHAPE_MISMATCH", "expected [4096, 2147483648, 4096]")
    big.abort()
    check(listing(w) == [], f"abort left {listing(w)}")

    # --- KeyboardInterrupt / SystemExit inside `with`: propagated, nothing left --------------------
    for exc in (KeyboardInterrupt, SystemExit):
        try:
            with writer(out) as wr:
                wr.add_layer(0, K[0], V[0])
                raise exc()
        except exc:
            pass
        check(listing(w) == [] and wr.state == "aborted", f"{exc.__name__}: {listing(w)}, {wr.state}")

    # --- Awkward memory: written values are exactly the inputs -------------------------------------
    ro = K.copy()
    ro.flags.writeable = False
    np.save(os.path.join(w, "k.npy"), K)
    mm = np.load(os.path.join(w, "k.npy"), mmap_mode="r")
    for name, k in (("negative strides", K[:, ::-1, ::-1].copy()[:, ::-1, ::-1]), ("Fortran", np.asfortranarray(K)),
                    ("read-only", ro), ("memory-mapped", mm), ("big-endian", K.astype(">f4"))):
        kvtool.write_dump(out, k, V, dtype="f32")
        with h5py.File(out, "r") as f:
            check(np.array_equal(f["kv"]["k"][...], K), f"{name} input stored wrongly")
        os.unlink(out)
    os.unlink(os.path.join(w, "k.npy"))


def main():
    with tempfile.TemporaryDirectory() as w:
        for part in (paths, integers, queries_beyond_t, identity, arguments, caches, streams_and_interrupts):
            part(w)
            check(listing(w) == [], f"{part.__name__} left {listing(w)}")
    for fn in (kvtool.DumpWriter, kvtool.write_dump, kvtool.from_cache):  # the user documentation
        check(fn.__doc__ and "overwrite" in fn.__doc__ and "Example::" in fn.__doc__, f"{fn.__name__} docstring")
    check("OUTPUT_EXISTS" in kvtool.DumpWriter.__doc__ and "NUL" in kvtool.DumpWriter.__doc__, "errors documented")
    print("ok")


main()
