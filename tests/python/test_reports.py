"""kvtool.inspect / verify / build / eval / eval_decode / query give what the command line gives: for a small
synthetic dump, each dict equals `kvtool <cmd> --json` run by subprocess; kvtool.build writes the
artifact `kvtool build KIND` writes (same manifest digest, same bytes) for all four kinds; eval's
records are the rows of `eval --csv`; query takes NumPy and torch vectors and returns arrays; bad
kinds, parameters, files and vectors raise kvtool.Error with the CLI's reason and exit code and
leave no output file; build and eval release the GIL."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import kvtool

KVTOOL = os.environ["KVTOOL"]
PREFIX = 260
# The same options for both paths: (command-line words, kvtool.build keywords).
BUILDS = {
    "pq": (["--bits", "5", "--subspaces", "4", "--codebook-dtype", "f16"], {"bits": 5, "subspaces": 4, "codebook_dtype": "f16"}),
    "clusterkv": (["--tokens-per-cluster", "20", "--dense-layers", "1"], {"tokens_per_cluster": 20, "dense_layers": [1]}),
    "lsh": (["-K", "6", "-L", "20"], {"bits": 6, "tables": 20}),
    "squeeze": (["--observation-window", "60", "--percent-clusters", "10", "--quantiles", "0.6,0.8"],
                {"observation_window": 60, "percent_clusters": 10, "quantiles": [0.6, 0.8]}),
}
# Query settings per kind: (command-line words, keywords).
SETTINGS = {
    "pq": (["--budget", "0.1"], {"budget": 0.1}),
    "clusterkv": (["--budget", "40"], {"budget": 40}),
    "lsh": (["--min-collisions", "3"], {"min_collisions": 3}),
    "squeeze": (["--quantile", "0.8", "--flat"], {"quantile": 0.8, "flat": True}),
}


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def cli(*args, ok=True):
    p = subprocess.run([KVTOOL, *map(str, args)], capture_output=True, text=True)
    if ok:
        check(p.returncode == 0, f"kvtool {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p


def cli_json(*args):
    return json.loads(cli(*args).stdout)


def plain(d):
    """A receipt with its arrays as lists (to compare with the CLI's JSON)."""
    d = dict(d)
    for k in ("candidates", "scores"):
        if isinstance(d.get(k), np.ndarray):
            d[k] = d[k].tolist()
    return d


def close(a, b, rel=1e-9):
    """a == b, floats within `rel`: eval's dense attention goes through OpenBLAS, whose sums depend
    on its thread count (`OPENBLAS_NUM_THREADS=1 kvtool eval` differs from the default in the last
    bits, and a build in this process leaves BLAS single-threaded)."""
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return abs(a - b) <= rel * max(1.0, abs(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def expect_error(fn, reason, exit_code, cls=kvtool.Error, what=""):
    try:
        fn()
    except kvtool.Error as e:
        check(e.reason == reason and e.exit_code == exit_code and isinstance(e, cls),
              f"{what}: expected {cls.__name__} {reason}/{exit_code}, got {type(e).__name__} {e.reason}/{e.exit_code}: {e}")
        return e
    check(False, f"{what}: expected kvtool.Error {reason}, nothing was raised")


def test_builds():
    """Every kind: the Python build equals the command line's (summary, digest, bytes)."""
    for kind, (words, params) in BUILDS.items():
        want = cli_json("build", kind, "d.h5", "-o", f"cli.{kind}.kvi", "--prefix", PREFIX, "--seed", 7,
                        "--threads", 1, "--json", "-q", *words)
        got = kvtool.build(kind, "d.h5", f"py.{kind}.kvi", prefix=PREFIX, seed=7, threads=2, **params)
        for k in ("output", "threads"):
            want.pop(k), got.pop(k)
        check(got == want, f"build {kind}: {got} != {want}")
        with open(f"cli.{kind}.kvi", "rb") as a, open(f"py.{kind}.kvi", "rb") as b:
            check(a.read() == b.read(), f"build {kind}: the artifacts differ")
    # Another seed is another artifact (the seed reaches the builder).
    other = kvtool.build("pq", "d.h5", "seed8.kvi", prefix=PREFIX, seed=8, bits=5, subspaces=4)
    check(other["manifest_sha256"] != kvtool.inspect("py.pq.kvi")["manifest_sha256"], "seed is ignored")
    # Common options: layers and shard as strings or pairs, zstd_level.
    a = kvtool.build("pq", "d.h5", "l1.kvi", prefix=PREFIX, layers="1-1", shard=(0, 1), zstd_level=0, bits=4)
    b = cli_json("build", "pq", "d.h5", "-o", "l1c.kvi", "--prefix", PREFIX, "--layers", "1-1", "--zstd-level", 0,
                 "--bits", 4, "--json", "-q")
    check(a["manifest_sha256"] == b["manifest_sha256"], "layers/zstd_level differ from the CLI's")


def test_inspect_verify():
    for path in ("d.h5", "py.pq.kvi", "py.squeeze.kvi"):
        check(kvtool.inspect(path) == cli_json("inspect", path, "--json"), f"inspect {path}")
    check(kvtool.verify("d.h5") == cli_json("verify", "d.h5", "--json"), "verify dump")
    got = kvtool.verify("py.lsh.kvi", source="d.h5")
    check(got == cli_json("verify", "py.lsh.kvi", "--source", "d.h5", "--json"), "verify artifact --source")
    check(got["source_checked"] == "d.h5", "verify did not check the source")
    # Signed: trusted_keys as a file and as a directory; require_signature without keys is USAGE.
    os.makedirs("keys", exist_ok=True)
    cli("keygen", "-o", "keys/team.pem")
    kvtool.build("lsh", "d.h5", "signed.kvi", prefix=PREFIX, sign_key="keys/team.pem", bits=6, tables=20)
    want = cli_json("verify", "signed.kvi", "--pubkey", "keys/team.pub.pem", "--require-signature", "--json")
    check(kvtool.verify("signed.kvi", trusted_keys=["keys/team.pub.pem"], require_signature=True) == want, "signed")
    check(kvtool.verify("signed.kvi", trusted_keys="keys", require_signature=True)["signature_trusted"], "dir keys")
    expect_error(lambda: kvtool.verify("signed.kvi", require_signature=True), "USAGE", 2, kvtool.UsageError, "no keys")
    expect_error(lambda: kvtool.verify("py.lsh.kvi", trusted_keys=["keys/team.pub.pem"], require_signature=True),
                 "SIGNATURE_REQUIRED", 1, kvtool.InvalidInputError, "unsigned with require_signature")
    cli("synth", "--layers", 2, "--kv-heads", 2, "--q-heads", 4, "--head-dim", 32, "--tokens", 300, "--seed", 5,
        "--query-count", 120, "-o", "other.h5", "-q")
    expect_error(lambda: kvtool.verify("py.pq.kvi", source="other.h5"), "MODEL_MISMATCH", 1, what="other source")


def test_eval():
    for kind in BUILDS:
        words, kw = SETTINGS[kind]
        if "--flat" in words:  # eval has no --flat: the option by name
            words = [w for w in words if w != "--flat"] + ["-o", "flat=true"]
        got = kvtool.eval(f"py.{kind}.kvi", "d.h5", **kw)
        want = cli_json("eval", f"py.{kind}.kvi", "--source", "d.h5", "--json", *words)
        got.pop("artifact"), want.pop("artifact")
        # Exactly equal: eval runs BLAS on one thread, so the bits do not depend on the caller.
        check(got == want, f"eval {kind}: {json.dumps(got)[:300]} != {json.dumps(want)[:300]}")
    got = kvtool.eval("py.pq.kvi", "d.h5", positions="random:3", positions_seed=4)
    want = cli_json("eval", "py.pq.kvi", "--source", "d.h5", "--json", "--positions", "random:3", "--positions-seed", "4")
    got.pop("artifact"), want.pop("artifact")
    check(got == want and len(got["position_sample"]["positions"]) == 3, f"eval positions: {got['position_sample']}")
    got = kvtool.eval("py.pq.kvi", "d.h5", budget=[0.05, 0.2], records=True)
    cli("eval", "py.pq.kvi", "--source", "d.h5", "--budget", "0.05", "--budget", "0.2", "--csv", "e.csv", "-q")
    with open("e.csv") as f:
        rows = list(csv.DictReader(f))
    recs = got.pop("records")
    check(len(recs) == len(rows) > 0, f"{len(recs)} records, {len(rows)} csv rows")
    check(all(set(r) == set(rows[0]) for r in recs), f"record keys {sorted(recs[0])} != csv columns")
    for r, c in zip(recs, rows):
        for k, v in c.items():
            same = r[k] == v if k == "selector" else abs(float(r[k]) - float(v)) <= 1e-5 * max(1.0, abs(float(v)))
            check(same, f"record {k}: {r[k]} != csv {v}")
    check(sorted({r["selector"] for r in recs}) == ["0.05", "0.2"], "records' selectors")
    check([s["budget"] for s in (b["selector"] for b in got["budgets"])] == ["0.05", "0.2"], "swept budgets")
    check("records" not in kvtool.eval("py.pq.kvi", "d.h5"), "records without records=True")
    expect_error(lambda: kvtool.eval("py.pq.kvi", "d.h5", positions="every:0"), "USAGE", 2, what="eval positions")


def dumped_query(layer, q_head, position):
    import h5py
    with h5py.File("d.h5", "r") as f:
        i = list(f["kv/q_positions"][:]).index(position)
        return f["kv/q"][layer, q_head, i, :].astype(np.float32)


def test_query():
    for kind in BUILDS:
        words, kw = SETTINGS[kind]
        got = kvtool.query(f"py.{kind}.kvi", "d.h5", layer=1, q_head=3, position=290, **kw)
        want = cli_json("query", f"py.{kind}.kvi", "--source", "d.h5", "--layer", 1, "--q-head", 3, "--position", 290,
                        "--json", *words)
        check(got["candidates"].dtype == np.int64 and got["scores"].dtype == np.float32, f"{kind}: array dtypes")
        check(plain(got) == want, f"query {kind}: {plain(got)} != {want}")
    # vector= as NumPy (float64 and a strided view) and torch: the receipt of --vector.
    v = dumped_query(0, 1, 299)
    np.savetxt("v.txt", v[None, :], fmt="%.9g")
    want = cli_json("query", "py.pq.kvi", "--source", "d.h5", "--layer", 0, "--q-head", 1, "--vector", "v.txt", "--json")
    wide = np.zeros((len(v), 2))
    wide[:, 0] = v
    for vec in (v, v.astype(np.float64), wide[:, 0], list(map(float, v))):
        check(plain(kvtool.query("py.pq.kvi", "d.h5", layer=0, q_head=1, vector=vec)) == want, "query vector=")
    try:
        import torch
    except ImportError:
        print("note: torch is missing; the torch vector case was skipped")
    else:
        got = kvtool.query("py.pq.kvi", "d.h5", layer=0, q_head=1, vector=torch.from_numpy(v))
        check(plain(got) == want, "query torch vector")


def test_errors():
    E = kvtool.Error
    expect_error(lambda: kvtool.build("ivf", "d.h5", "x.kvi"), "USAGE", 2, kvtool.UsageError, "bad kind")
    e = expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", bitz=5), "USAGE", 2, kvtool.UsageError, "bitz")
    check("bitz" in str(e) and "bits" in str(e), f"the message names the unknown and the known names: {e}")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", bits="5"), "USAGE", 2, what="bits as a string")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", bits=5.5), "USAGE", 2, what="bits as a float")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", bits=40), "USAGE", 2, what="bits out of range")
    expect_error(lambda: kvtool.build("squeeze", "d.h5", "x.kvi", quantiles=[0.5, float("nan")]), "USAGE", 2,
                 what="NaN quantile")
    expect_error(lambda: kvtool.build("squeeze", "d.h5", "x.kvi", quantiles=[]), "USAGE", 2, what="no quantiles")
    expect_error(lambda: kvtool.build("clusterkv", "d.h5", "x.kvi", clusters=4, tokens_per_cluster=9), "USAGE", 2,
                 what="clusters and tokens_per_cluster")
    expect_error(lambda: kvtool.build("clusterkv", "d.h5", "x.kvi", centroid="median"), "USAGE", 2, what="centroid")
    expect_error(lambda: kvtool.build("clusterkv", "d.h5", "x.kvi", centroid_dtype="f64"), "USAGE", 2, what="centroid_dtype")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", codebook_dtype=16), "USAGE", 2, what="codebook_dtype")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", shard="2/2"), "USAGE", 2, what="shard 2/2")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", layers="b-a"), "USAGE", 2, what="layers b-a")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", prefix=-3), "USAGE", 2, what="negative prefix")
    expect_error(lambda: kvtool.build("pq", "d.h5", "x.kvi", prefix=10**6), "USAGE", 2, what="prefix past the dump")
    expect_error(lambda: kvtool.build("pq", "missing.h5", "x.kvi"), "IO_ERROR", 3, kvtool.IOError, "missing dump")
    expect_error(lambda: kvtool.build("pq", "py.pq.kvi", "x.kvi"), "NOT_A_DUMP", 1, what="artifact as dump")
    check(not [n for n in os.listdir(".") if n.startswith("x.kvi") or n.startswith(".x.kvi")], "output left behind")
    expect_error(lambda: kvtool.inspect("missing.kvi"), "IO_ERROR", 3, kvtool.IOError, "missing inspect")
    with open("junk.bin", "wb") as f:
        f.write(b"not a dump" * 10)
    expect_error(lambda: kvtool.inspect("junk.bin"), "UNKNOWN_FILE_TYPE", 1, what="junk")
    expect_error(lambda: kvtool.inspect(42), "USAGE", 2, what="path as int")
    expect_error(lambda: kvtool.verify("py.pq.kvi", source="missing.h5"), "IO_ERROR", 3, what="missing source")
    expect_error(lambda: kvtool.eval("py.pq.kvi", "d.h5", min_collisions=2), "USAGE", 2, what="eval lsh option on pq")
    expect_error(lambda: kvtool.eval("py.pq.kvi", "d.h5", budget="lots"), "USAGE", 2, what="eval bad budget")
    expect_error(lambda: kvtool.eval("py.pq.kvi", "d.h5", budget=[]), "USAGE", 2, what="eval empty sweep")
    q = lambda **kw: kvtool.query("py.pq.kvi", "d.h5", layer=0, q_head=0, **kw)  # noqa: E731
    expect_error(lambda: q(vector=np.zeros(31, np.float32)), "USAGE", 2, what="vector of 31")
    expect_error(lambda: q(vector=np.zeros((2, 32), np.float32)), "USAGE", 2, what="2-D vector")
    expect_error(lambda: q(vector=["a"] * 32), "USAGE", 2, what="vector of strings")
    bad = np.ones(32, np.float32)
    bad[3] = np.nan
    expect_error(lambda: q(vector=bad), "NON_FINITE", 1, what="NaN vector")
    expect_error(lambda: q(position=12), "NO_QUERIES", 1, what="no query at 12")
    expect_error(lambda: q(), "USAGE", 2, what="neither position nor vector")
    expect_error(lambda: q(position=290, budget=0.1, quantile=0.5), "USAGE", 2, what="squeeze option on pq")
    expect_error(lambda: kvtool.query("py.pq.kvi", "d.h5", layer=9, q_head=0, position=290), "USAGE", 2,
                 what="layer 9")
    expect_error(lambda: kvtool.query("py.pq.kvi", "other.h5", layer=0, q_head=0, position=290), "MODEL_MISMATCH", 1,
                 what="query on another dump")
    check(issubclass(kvtool.UsageError, E), "UsageError is a kvtool.Error")


def test_gil_released():
    """A Python thread keeps running while build and eval run in C++ (a bigger dump: long calls)."""
    cli("synth", "--layers", 1, "--kv-heads", 2, "--q-heads", 8, "--head-dim", 64, "--tokens", 3000, "--seed", 2,
        "--query-count", 200, "-o", "big.h5", "-q")
    for name, work in (("build", lambda: kvtool.build("pq", "big.h5", "big.kvi", prefix=2400, bits=8, threads=1)),
                       ("eval", lambda: kvtool.eval("big.kvi", "big.h5", budget=0.1))):
        ticks, done = [0], threading.Event()

        def spin():
            while not done.is_set():
                ticks[0] += 1
                time.sleep(0.001)

        t = threading.Thread(target=spin)
        t.start()
        time.sleep(0.01)
        start, t0 = ticks[0], time.perf_counter()
        work()
        elapsed, ticks_during = time.perf_counter() - t0, ticks[0] - start
        done.set()
        t.join()
        # With the GIL held the spinner cannot tick during the call (at most once, at its start).
        check(elapsed < 0.05 or ticks_during >= max(10, 0.05 * elapsed / 0.001),
              f"{name}: {ticks_during} ticks in {elapsed:.3f} s: the GIL was held")
        print(f"  {name}: {ticks_during} ticks of the other thread during {elapsed:.3f} s")
        check(elapsed >= 0.05, f"{name} took {elapsed:.3f} s: too short to tell")


def test_eval_decode():
    """kvtool.eval_decode equals `kvtool eval-decode --json` (a trained model from the shared
    folder; skipped without it), 100 % reproduces dense decoding, and bad arguments raise."""
    model = os.path.join(os.environ.get("KVTOOL_SHARED", "../shared"), "models", "stories260K.bin")
    if not os.path.exists(model):
        print(f"  eval_decode: no {model}, not run")
        return
    cli("dump", "--llama2c", model, "--tokens", 120, "--queries", "-o", "m.h5", "-q")
    cli("build", "pq", "m.h5", "--prefix", 96, "-o", "m.pq.kvi", "-q")
    want = cli_json("eval-decode", "m.pq.kvi", "--llama2c", model, "--source", "m.h5", "--steps", 12, "--budget", "0.1",
                    "--budget", "100%", "--baseline", "window", "--json", "-q")
    got = kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, steps=12, budget=[0.1, "100%"], baselines="window")
    check(got == want, f"eval_decode: {got} != {want}")
    full = [r for r in got["results"] if r["kind"] == "pq" and r["budget"] == 1.0]
    check(len(full) == 1 and full[0]["mean_kl"] == 0 and full[0]["top1_agreement"] == 1, f"100 %: {full}")
    # The estimated zone: estimated_zone= as the CLI's --estimated-zone (a cluster kind).
    cli("build", "clusterkv", "m.h5", "--prefix", 96, "-o", "m.ckv.kvi", "-q")
    want = cli_json("eval-decode", "m.ckv.kvi", "--llama2c", model, "--source", "m.h5", "--steps", 4, "--budget", "0.1",
                    "--estimated-zone", "--json", "-q")
    got = kvtool.eval_decode("m.ckv.kvi", "m.h5", llama2c=model, steps=4, budget=0.1, estimated_zone=True)
    check(got == want and [r["setting"] for r in got["results"]] == ["0.1", "0.1 +est"], f"zone: {got} != {want}")
    # Adaptive budgets: top_p= as the CLI's --top-p.
    want = cli_json("eval-decode", "m.pq.kvi", "--llama2c", model, "--source", "m.h5", "--steps", 4, "--budget", "100%",
                    "--top-p", "0.5", "--top-p", "0.9", "--json", "-q")
    got = kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, steps=4, budget="100%", top_p=[0.5, 0.9])
    check(got == want and [r["setting"] for r in got["results"]] == ["1 p0.5", "1 p0.9"], f"top_p: {got} != {want}")
    # Rerank through Python: query and eval_decode take rerank= as the CLI's --rerank.
    got = kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, steps=4, budget=0.1, rerank=[1, 4])
    check([r["setting"] for r in got["results"]] == ["0.1", "0.1 r4"], f"rerank settings: {got}")
    rc = kvtool.query("m.pq.kvi", "m.h5", layer=1, q_head=0, position=100, budget=8, rerank=4)
    want = cli_json("query", "m.pq.kvi", "--source", "m.h5", "--layer", 1, "--q-head", 0, "--position", 100,
                    "--budget", 8, "--rerank", 4, "--json")
    check(plain(rc) == want and len(want["candidates"]) == 8, f"query rerank: {plain(rc)} != {want}")
    # One selection per KV head and the heavy-hitter baseline, as --share-kv-head --baseline heavy.
    want = cli_json("eval-decode", "m.pq.kvi", "--llama2c", model, "--source", "m.h5", "--steps", 4, "--budget", "0.1",
                    "--baseline", "heavy", "--share-kv-head", "--json", "-q")
    got = kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, steps=4, budget=0.1, baselines="heavy",
                             share_kv_head=True)
    check(got == want and got["share_kv_head"] is True, f"eval_decode shared: {got} != {want}")
    # The same model as a GGUF file (kvtool dump --gguf): gguf= as --gguf, one model or the other.
    conv = os.path.join(os.environ.get("KVTOOL_SOURCE", "."), "tests", "llamacpp", "llama2c_to_gguf.py")
    subprocess.run(["/usr/bin/python3", conv, model, "-o", "m.gguf"], check=True)
    cli("dump", "--gguf", "m.gguf", "--tokens-from", "m.h5", "--queries", "-o", "g.h5", "-q")
    # kvtool.dump(gguf=) writes what `kvtool dump --gguf` writes, the same JSON back.
    import h5py
    ids = [int(t) for t in h5py.File("m.h5", "r")["kv/tokens"][:8]]
    got = kvtool.dump("p.h5", gguf="m.gguf", token_ids=ids, tokens=40, queries=True)
    with open("ids.json", "w") as f:
        json.dump(ids, f)
    want = cli_json("dump", "--gguf", "m.gguf", "--token-ids", "ids.json", "--tokens", 40, "--queries", "-o", "c.h5",
                    "--json")
    check({**got, "output": ""} == {**want, "output": ""} and len(got["tokens"]) == 40, f"dump gguf: {got} != {want}")
    a, b = h5py.File("p.h5", "r"), h5py.File("c.h5", "r")
    check(all((a[n][:] == b[n][:]).all() for n in ("kv/k", "kv/v", "kv/q", "kv/tokens")), "dump(gguf=) differs from the CLI")
    for bad in (dict(), dict(prompt="x", token_ids=[1]), dict(token_ids="12"), dict(token_ids=[]),
                dict(token_ids=[1], activations="fast")):
        try:
            kvtool.dump("x.h5", gguf="m.gguf", **bad)
            check(False, f"dump took {bad}")
        except kvtool.UsageError:
            pass
    check(not os.path.exists("x.h5"), "a refused dump left x.h5")
    cli("build", "pq", "g.h5", "--prefix", 96, "-o", "g.pq.kvi", "-q")
    want = cli_json("eval-decode", "g.pq.kvi", "--gguf", "m.gguf", "--source", "g.h5", "--steps", 8, "--budget", "100%",
                    "--json", "-q")
    got = kvtool.eval_decode("g.pq.kvi", "g.h5", gguf="m.gguf", steps=8, budget="100%")
    check(got == want and got["results"][0]["mean_kl"] == 0, f"eval_decode gguf: {got} != {want}")
    # The same sums whatever this process's BLAS threads (OpenBLAS's own split moved the last bits
    # on an AVX2-only EPYC, and a build before had left one thread set: docs/models.md).
    blas = [line.split()[-1] for line in open("/proc/self/maps") if "libopenblas" in line]
    if blas:
        import ctypes
        lib = ctypes.CDLL(blas[0])
        before = lib.openblas_get_num_threads()
        try:
            for t in (1, 3):
                lib.openblas_set_num_threads(t)
                again = kvtool.eval_decode("g.pq.kvi", "g.h5", gguf="m.gguf", steps=8, budget="100%")
                check(again == want, f"eval_decode gguf with {t} BLAS threads: {again} != {want}")
                check(lib.openblas_get_num_threads() == t, f"eval_decode left {lib.openblas_get_num_threads()} "
                      f"BLAS threads set, not {t}")
        finally:
            lib.openblas_set_num_threads(before)
    # answer= as --answer START:END: the answer's tokens counted under teacher forcing.
    want = cli_json("eval-decode", "g.pq.kvi", "--gguf", "m.gguf", "--source", "g.h5", "--steps", 8, "--budget", "0.1",
                    "--answer", "99:103", "--json", "-q")
    got = kvtool.eval_decode("g.pq.kvi", "g.h5", gguf="m.gguf", steps=8, budget=0.1, answer=(99, 103))
    check(got == want and got["results"][0]["answer"]["tokens"] == 4, f"eval_decode answer: {got} != {want}")
    for bad in (dict(), dict(llama2c=model, gguf="m.gguf"), dict(gguf="m.gguf", answer=(103, 99)),
                dict(gguf="m.gguf", answer=[99]), dict(gguf="m.gguf", answer=(99.0, 100)),
                dict(gguf="m.gguf", answer=(90, 92))):
        try:
            kvtool.eval_decode("g.pq.kvi", "g.h5", steps=2, **bad)
            check(False, f"eval_decode took {bad}")
        except kvtool.UsageError:
            pass
    # A query option no kind takes is a misspelling, not a setting some other kind might want.
    try:
        kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, steps=2, budgte=0.1)
        check(False, "eval_decode took budgte=")
    except kvtool.UsageError as e:
        check("budgte" in str(e), f"misspelt keyword: {e}")
    # The divergence as text, as --tokenizer.
    tok = os.path.join(os.path.dirname(model), "tok512.bin")
    want = cli_json("eval-decode", "m.pq.kvi", "--llama2c", model, "--tokenizer", tok, "--source", "m.h5", "--steps",
                    12, "--budget", "0.02", "--json", "-q")
    got = kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, tokenizer=tok, steps=12, budget=0.02)
    check(got == want and all("diverge_text" in r for r in got["results"]), f"eval_decode text: {got} != {want}")
    got = kvtool.eval("m.pq.kvi", "m.h5", budget=0.1, share_kv_head=True)
    check(got["share_kv_head"] is True, f"eval shared: {got}")
    expect_error(lambda: kvtool.eval("m.pq.kvi", "m.h5", share_kv_head=1), "USAGE", 2, kvtool.UsageError,
                 "share_kv_head")
    expect_error(lambda: kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, baselines="random"), "USAGE", 2,
                 kvtool.UsageError, "baseline")
    expect_error(lambda: kvtool.eval_decode([], "m.h5", llama2c=model), "USAGE", 2, kvtool.UsageError, "no artifact")
    expect_error(lambda: kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c=model, steps=-1), "USAGE", 2,
                 kvtool.UsageError, "steps")
    expect_error(lambda: kvtool.eval_decode("m.pq.kvi", "m.h5", llama2c="nope.bin"), "IO_ERROR", 3, what="model")
    expect_error(lambda: kvtool.eval_decode("m.pq.kvi", "d.h5", llama2c=model), "MODEL_MISMATCH", 1, what="dump")


def main():
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)
        cli("synth", "--layers", 2, "--kv-heads", 2, "--q-heads", 4, "--head-dim", 32, "--tokens", 300, "--seed", 4,
            "--query-count", 120, "-o", "d.h5", "-q")
        for t in (test_builds, test_inspect_verify, test_eval, test_eval_decode, test_query, test_errors,
                  test_gil_released):
            t0 = time.perf_counter()
            t()
            print(f"ok {t.__name__} ({time.perf_counter() - t0:.2f} s)")


if __name__ == "__main__":
    main()
