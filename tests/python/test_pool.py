"""kvtool.Pool and kvtool.Lease: for every kind, a pool query (NumPy and torch vectors, one at a
time and as a batch) gives the candidates and scores of `kvtool query --json`; `kvtool load`
(the C++ pool's replay) accepts the same artifacts; a lease keeps its generation alive across a
publish of a newer one; retire hides a key and waits for its leases; budget, trust, tenant, digest
and argument errors are kvtool.Error with a reason; queries release the GIL."""
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import h5py
import numpy as np

import kvtool

KVTOOL = os.environ["KVTOOL"]
PREFIX, POSITION = 260, 290
BUILDS = {
    "pq": {"bits": 5, "subspaces": 4},
    "clusterkv": {"tokens_per_cluster": 20},
    "lsh": {"bits": 6, "tables": 20},
    "squeeze": {"observation_window": 60, "percent_clusters": 10},
}
SETTINGS = {  # (kvtool query words, keywords)
    "pq": (["--budget", "0.1"], {"budget": 0.1}),
    "clusterkv": (["--budget", "40"], {"budget": 40}),
    "lsh": (["--min-collisions", "3"], {"min_collisions": 3}),
    "squeeze": (["--quantile", "0.7"], {"quantile": 0.7}),
}


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def cli(*args):
    p = subprocess.run([KVTOOL, *map(str, args)], capture_output=True, text=True)
    check(p.returncode == 0, f"kvtool {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p


def cli_json(*args):
    return json.loads(cli(*args).stdout)


def expect_error(fn, reason, exit_code, what):
    try:
        fn()
    except kvtool.Error as e:
        check(e.reason == reason and e.exit_code == exit_code,
              f"{what}: expected {reason}/{exit_code}, got {e.reason}/{e.exit_code}: {e}")
        return e
    check(False, f"{what}: expected kvtool.Error {reason}, nothing was raised")


def dump_arrays():
    """Queries at POSITION [L, Hq, d] and keys [L, H, PREFIX, d] of d.h5, as float32."""
    with h5py.File("d.h5", "r") as f:
        i = list(f["kv/q_positions"][:]).index(POSITION)
        q = f["kv/q"][:, :, i, :].astype(np.float32)
        k = f["kv/k"][:, :, :PREFIX, :].astype(np.float32)
    return q, k


def same_answer(got, want, what):
    check(got["candidates"].dtype == np.int64 and got["scores"].dtype == np.float32, f"{what}: dtypes")
    check(got["candidates"].tolist() == want["candidates"], f"{what}: candidates differ from kvtool query")
    check(got["scores"].tolist() == want["scores"], f"{what}: scores differ from kvtool query")
    for k in ("always_included", "inclusion_probabilities", "selector", "kv_head", "content_digest"):
        check(got[k] == want[k], f"{what}: {k} {got[k]} != {want[k]}")


def test_same_answers(pool, q, keys):
    """Every kind, every query head of layer 1: pool == kvtool query --json; batch == singles."""
    torch = None
    try:
        import torch
    except ImportError:
        print("note: torch is missing; the torch vector case was skipped")
    for kind in BUILDS:
        receipt = pool.publish(kind, f"{kind}.kvi")
        check(receipt["kind"] == kind and receipt["generation"] >= 1, f"publish {kind}: {receipt}")
        words, kw = SETTINGS[kind]
        k = keys[1] if kind == "lsh" else None  # lsh receipts carry inclusion probabilities
        with pool.acquire(kind) as lease:
            singles = []
            for h in range(q.shape[1]):
                want = cli_json("query", f"{kind}.kvi", "--source", "d.h5", "--layer", 1, "--q-head", h, "--position",
                                POSITION, "--json", *words)
                got = lease.query(1, h, q[1, h], POSITION, keys=k, **kw)
                same_answer(got, want, f"{kind} head {h}")
                check(got["pool"] == {"generation": lease.generation, "tier": "host"}, f"{kind}: pool {got['pool']}")
                singles.append(got)
                if torch is not None and h == 0:
                    same_answer(lease.query(1, h, torch.from_numpy(q[1, h]), POSITION, keys=k, **kw), want,
                                f"{kind} torch")
            batch = lease.query_batch(1, list(range(q.shape[1])), q[1], POSITION, keys=k, **kw)
            for h, (b, s) in enumerate(zip(batch, singles)):
                check(b["candidates"].tolist() == s["candidates"].tolist() and b["scores"].tolist() == s["scores"].tolist()
                      and b["inclusion_probabilities"] == s["inclusion_probabilities"], f"{kind}: batch row {h}")
            # select: the batched call without receipts, over two threads, equals the singles.
            heads = list(range(q.shape[1]))
            ids, scores, counts, incl = lease.select(1, heads, q[1], POSITION, threads=2, keys=k, **kw)
            check((incl is None) == (k is None), f"{kind}: select inclusion present iff keys")
            for h, s in enumerate(singles):
                n = len(s["candidates"])
                check(counts[h] == n and ids[h, :n].tolist() == s["candidates"].tolist()
                      and scores[h, :n].tolist() == s["scores"].tolist() and (ids[h, n:] == -1).all(),
                      f"{kind}: select row {h}")
                if k is not None:
                    check(incl[h, :n].tolist() == s["inclusion_probabilities"], f"{kind}: select inclusion row {h}")
            # order="rows": the same candidates and scores by increasing row (every kind).
            ids_r, scores_r, counts_r, incl_r = lease.select(1, heads, q[1], POSITION, threads=2, keys=k, order="rows", **kw)
            for h, s in enumerate(singles):
                n = len(s["candidates"])
                by_row = sorted(zip(s["candidates"].tolist(), s["scores"].tolist()))
                check(counts_r[h] == n and ids_r[h, :n].tolist() == [r for r, _ in by_row]
                      and scores_r[h, :n].tolist() == [x for _, x in by_row], f"{kind}: select order=rows row {h}")
            ids2, _, counts2, _ = lease.select(1, heads, q[1], [POSITION] * len(heads), capacity=2, **kw)
            check(counts2.tolist() == counts.tolist() and ids2.tolist() == ids[:, :2].tolist(),
                  f"{kind}: select with capacity 2")
            # A CUDA stream (a handle, or an object with .cuda_stream) is the device tier's: a host
            # generation gives the same answers with one.
            class FakeStream:
                cuda_stream = 12345
            for stream in (FakeStream(), 0x7f00):
                ids3, _, counts3, _ = lease.select(1, heads, q[1], POSITION, stream=stream, **kw)
                check(counts3.tolist() == counts.tolist() and ids3.tolist() == ids.tolist(),
                      f"{kind}: select with stream {stream!r}")
        # Pool.query: one lease for the call, same answer.
        one = pool.query(kind, 1, 2, q[1, 2], POSITION, keys=k, **kw)
        check(one["candidates"].tolist() == singles[2]["candidates"].tolist(), f"{kind}: Pool.query")
    if keys is not None:  # [kv_heads, E, d] keys serve every query head of a batch
        with pool.acquire("lsh") as lease:
            a = lease.query_batch(1, [0, 3], q[1][[0, 3]], POSITION, keys=keys[1], min_collisions=3)
            b = lease.query(1, 3, q[1, 3], POSITION, keys=keys[1][1], min_collisions=3)  # head 3 -> kv head 1
            check(a[1]["inclusion_probabilities"] == b["inclusion_probabilities"], "3-D keys pick the kv head")
    # The C++ pool's own replay (kvtool load) agrees with the file path for the same artifacts.
    rep = cli_json("load", *[f"{k}.kvi" for k in BUILDS], "--source", "d.h5", "--device", "cpu", "--json")
    check(rep["queries"]["mismatches"] == 0 and rep["queries"]["count"] > 0, f"kvtool load: {rep['queries']}")
    check(sorted(pool.keys()) == sorted(BUILDS), f"keys {pool.keys()}")


def test_generations(q):
    """A lease keeps its generation across a newer publish and a retire; retire waits for leases."""
    pool = kvtool.Pool(host_budget=64 << 20)
    g1 = pool.publish("doc", "pq.kvi")["generation"]
    lease = pool.acquire("doc")
    before = lease.query(0, 1, q[0, 1], POSITION, budget=0.1)
    r2 = pool.publish("doc", "pq2.kvi")
    check(r2["generation"] > g1 and r2["replaced_generation"] == g1, f"second publish: {r2}")
    check(lease.generation == g1, "the lease moved to the new generation")
    with pool.acquire("doc") as newer:
        check(newer.generation == r2["generation"], "acquire does not see the new generation")
        n = newer.query(0, 1, q[0, 1], POSITION, budget=0.1)
    again = lease.query(0, 1, q[0, 1], POSITION, budget=0.1)
    check(again["candidates"].tolist() == before["candidates"].tolist(), "the old generation's answer changed")
    check(n["content_digest"] != again["content_digest"] or n["candidates"].tolist() != again["candidates"].tolist()
          or n["index_generation"] != again["index_generation"], "the two generations are indistinguishable")
    check(pool.stats()["retiring"] == 1, f"the leased old generation is not retiring: {pool.stats()}")
    lease.release()
    check(not lease.held, "release")
    expect_error(lambda: lease.query(0, 1, q[0, 1], POSITION), "USAGE", 2, "query on a released lease")
    pool.publish("doc", "pq.kvi")  # the stats settle once the old generation has no lease
    check(pool.stats()["retiring"] == 0, f"released generation still retiring: {pool.stats()}")
    # Retire with a lease held by this thread: refused instead of waiting forever.
    held = pool.acquire("doc")
    expect_error(lambda: pool.retire("doc"), "USAGE", 2, "retire(wait=True) under own lease")
    # Another thread releases it: retire(wait=True) returns once the lease is gone.
    t = threading.Timer(0.2, held.release)
    t0 = time.perf_counter()
    held._thread = -1  # the lease now belongs to the timer thread, which releases it
    t.start()
    check(pool.retire("doc") is True, "retire returned False")
    waited = time.perf_counter() - t0
    t.join()
    check(waited >= 0.15, f"retire did not wait for the lease ({waited:.3f} s)")
    expect_error(lambda: pool.acquire("doc"), "NOT_PUBLISHED", 1, "acquire after retire")
    check(pool.retire("doc") is False, "retire of a retired key")
    check("doc" not in pool.keys(), "retired key still listed")
    # A lease outlives its pool: the generation stays alive until the lease goes.
    p2 = kvtool.Pool(host_budget=64 << 20)
    p2.publish("x", "pq.kvi")
    orphan = p2.acquire("x")
    del p2
    gc.collect()
    check(orphan.query(0, 1, q[0, 1], POSITION, budget=0.1)["candidates"].tolist() == before["candidates"].tolist(),
          "a lease whose pool is gone answers differently")
    orphan.release()


def test_errors(q):
    expect_error(lambda: kvtool.Pool(host_budget=4096).publish("k", "pq.kvi"), "HOST_BUDGET_EXCEEDED", 1, "budget")
    # The module is built without the CUDA tier (python/CMakeLists.txt links kvtool_lib only).
    expect_error(lambda: kvtool.Pool(device=True), "DEVICE_UNAVAILABLE", 1, "device without CUDA")
    pool = kvtool.Pool(host_budget=64 << 20)
    expect_error(lambda: pool.publish("k", "missing.kvi"), "IO_ERROR", 3, "missing artifact")
    expect_error(lambda: pool.publish("k", "d.h5"), "BAD_MAGIC", 1, "a dump as artifact")
    expect_error(lambda: pool.publish("k", "pq.kvi", tenant="someone-else"), "TENANT_MISMATCH", 1, "tenant")
    expect_error(lambda: pool.publish("k", "pq.kvi", expected_content_digest="0" * 64), "CONTENT_MISMATCH", 1,
                 "digest")
    expect_error(lambda: pool.publish("k", "pq.kvi", require_signature=True), "USAGE", 2, "signature without keys")
    expect_error(lambda: pool.publish("k", "pq.kvi", device=True), "DEVICE_UNAVAILABLE", 1, "device publish")
    expect_error(lambda: pool.publish("", "pq.kvi"), "USAGE", 2, "empty key")
    expect_error(lambda: pool.acquire("nothing"), "NOT_PUBLISHED", 1, "acquire unknown key")
    expect_error(lambda: kvtool.Pool(host_budget=-1), "USAGE", 2, "negative budget")
    expect_error(lambda: kvtool.Pool(host_budget="big"), "USAGE", 2, "budget as a string")
    expect_error(lambda: kvtool.Pool(device_batch_queries=-1), "USAGE", 2, "negative device_batch_queries")
    expect_error(lambda: kvtool.Pool(device_batch_queries=1 << 20), "USAGE", 2, "device_batch_queries above 65535")
    check(kvtool.Pool(device_batch_queries=0).stats()["device"]["batch_buffers"] == 0, "no device: no batch buffers")
    pool.publish("k", "pq.kvi")
    with pool.acquire("k") as lease:
        expect_error(lambda: lease.query(0, 0, q[0, 0][:7], POSITION), "USAGE", 2, "short vector")
        expect_error(lambda: lease.query(0, 0, q[0], POSITION), "USAGE", 2, "2-D vector")
        bad = q[0, 0].copy()
        bad[0] = np.inf
        expect_error(lambda: lease.query(0, 0, bad, POSITION), "NON_FINITE", 1, "Inf vector")
        expect_error(lambda: lease.query(0, 0, ["x"] * q.shape[-1], POSITION), "USAGE", 2, "string vector")
        expect_error(lambda: lease.query(5, 0, q[0, 0], POSITION), "USAGE", 2, "layer 5")
        expect_error(lambda: lease.query(0, 99, q[0, 0], POSITION), "USAGE", 2, "q_head 99")
        expect_error(lambda: lease.query(0, 0, q[0, 0], 3), "USAGE", 2, "position before the coverage end")
        # Positions past every row a dump or decode has: refused, not answered with millions of
        # always-included rows that do not exist (single queries, batches, select).
        for far in (10**7, 2**31, 2**62, 2**63 - 1):
            e = expect_error(lambda: lease.query(0, 0, q[0, 0], far), "USAGE", 2, f"position {far}")
            check("position" in str(e), f"position {far}: the message names the position: {e}")
            expect_error(lambda: lease.query_batch(0, [0, 1], q[0][:2], far), "USAGE", 2, f"batch position {far}")
        for far in (2**31, 2**62):
            expect_error(lambda: lease.select(0, [0, 1], q[0][:2], far), "USAGE", 2, f"select position {far}")
        check(len(lease.query(0, 0, q[0, 0], POSITION + (1 << 19))["always_included"]) < (1 << 20) + 1024,
              "a position 2^19 rows on lists the rows up to it")
        expect_error(lambda: lease.query(0, 0, q[0, 0], POSITION, budget="most"), "USAGE", 2, "bad budget")
        expect_error(lambda: lease.query(0, 0, q[0, 0], POSITION, min_collisions=2), "USAGE", 2, "lsh option on pq")
        expect_error(lambda: lease.query(0, 0, q[0, 0], POSITION, keys=np.zeros((5, 3))), "USAGE", 2, "short keys")
        expect_error(lambda: lease.query_batch(0, [0, 1], q[0][:3], POSITION), "USAGE", 2, "heads vs rows")
        expect_error(lambda: lease.query_batch(0, 0, q[0][:1], POSITION), "USAGE", 2, "q_heads not a sequence")
        bad = q[0].copy()
        bad[2, 5] = np.nan
        expect_error(lambda: lease.query_batch(0, [0, 1, 2, 3], bad, POSITION), "NON_FINITE", 1, "NaN batch")
        expect_error(lambda: lease.select(0, [0, 1, 2, 3], bad, POSITION), "NON_FINITE", 1, "NaN select")
        expect_error(lambda: lease.select(0, [0, 1], q[0][:2], [POSITION]), "USAGE", 2, "positions vs rows")
        expect_error(lambda: lease.select(0, [0, 1], q[0][:2], POSITION, threads=0), "USAGE", 2, "threads 0")
        expect_error(lambda: lease.select(0, [0, 1], q[0][:2], POSITION, capacity=10**9), "USAGE", 2, "capacity")
        expect_error(lambda: lease.select(0, [0, 99], q[0][:2], POSITION), "USAGE", 2, "select q_head 99")
        expect_error(lambda: lease.select(0, [0, 1], q[0][:2], ["x", 1]), "USAGE", 2, "positions not ints")
        for bad_stream in ("s", -1, 2**64, True, 1.5):
            expect_error(lambda: lease.select(0, [0, 1], q[0][:2], POSITION, stream=bad_stream), "USAGE", 2,
                         f"stream {bad_stream!r}")


def test_gil_released(pool, q):
    """Another Python thread runs while a long query batch runs in C++."""
    Q = np.ascontiguousarray(np.repeat(q[1], 1500, axis=0))  # [6000, d]
    heads = list(range(q.shape[1])) * 1500
    ticks, done = [0], threading.Event()

    def spin():
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.01)
    with pool.acquire("clusterkv") as lease:
        # The extension call alone: turning its answers into dicts is Python (which lets the spinner
        # run whether or not the C++ part released the GIL).
        start, t0 = ticks[0], time.perf_counter()
        out = lease._native.query_batch(1, heads, Q, POSITION, None, {"budget": "0.1"})
        elapsed, during = time.perf_counter() - t0, ticks[0] - start
    done.set()
    t.join()
    check(len(out) == len(heads), "batch length")
    print(f"  query_batch of {len(heads)}: {elapsed:.3f} s, {during} ticks of the other thread")
    check(elapsed >= 0.05 and during >= max(10, 0.05 * elapsed / 0.001), "the GIL was held during query_batch")


def test_threads(pool, q):
    """Threads querying one pool at once get the single-threaded answers; releasing a lease while
    another thread queries through it ends that thread's queries with USAGE, never a crash."""
    want = [pool.query("pq", 1, h, q[1, h], POSITION, budget=0.1)["candidates"].tolist() for h in range(q.shape[1])]
    bad, errors = [], []

    def worker(lease):
        try:
            for _ in range(50):
                for h in range(q.shape[1]):
                    if lease.query(1, h, q[1, h], POSITION, budget=0.1)["candidates"].tolist() != want[h]:
                        bad.append(h)
        except kvtool.Error as e:
            errors.append(e.reason)

    shared = pool.acquire("pq")
    threads = [threading.Thread(target=worker, args=(shared,)) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    shared.release()  # mid-flight: the workers' next query raises USAGE
    for t in threads:
        t.join()
    check(not bad, f"concurrent answers differ for heads {sorted(set(bad))}")
    check(set(errors) <= {"USAGE"}, f"released lease: {errors}")
    with pool.acquire("pq") as lease:  # and without a release, every thread finishes cleanly
        threads = [threading.Thread(target=worker, args=(lease,)) for _ in range(4)]
        errors.clear()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    check(not bad and not errors, f"concurrent queries: {bad} {errors}")


def main():
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)
        cli("synth", "--layers", 2, "--kv-heads", 2, "--q-heads", 4, "--head-dim", 32, "--tokens", 300, "--seed", 4,
            "--query-count", 120, "-o", "d.h5", "-q")
        for kind, params in BUILDS.items():
            kvtool.build(kind, "d.h5", f"{kind}.kvi", prefix=PREFIX, **params)
        kvtool.build("pq", "d.h5", "pq2.kvi", prefix=PREFIX, seed=3, bits=4, subspaces=4)
        q, keys = dump_arrays()
        pool = kvtool.Pool(host_budget=256 << 20)
        t0 = time.perf_counter()
        test_same_answers(pool, q, keys)
        print(f"ok test_same_answers ({time.perf_counter() - t0:.2f} s)")
        for t in (test_generations, test_errors):
            t0 = time.perf_counter()
            t(q)
            print(f"ok {t.__name__} ({time.perf_counter() - t0:.2f} s)")
        test_gil_released(pool, q)
        print("ok test_gil_released")
        t0 = time.perf_counter()
        test_threads(pool, q)
        print(f"ok test_threads ({time.perf_counter() - t0:.2f} s)")


if __name__ == "__main__":
    main()
