"""An independent Python implementation of the kvi v1 digests (formats/kvi-v1.md §Digests) checked
against kvtool: for an artifact of every kind (zstd-compressed, so all three codecs are read), a
container-test artifact and the committed fixtures (fixtures/*.kvi, fixtures/pinned/*.kvi), it
recomputes with hashlib, numpy/h5py and the reference libzstd (no kvtool code) every section's
SHA-256, the manifest digest, params_digest and the source binding's payload, content, snapshot and
prefix-token digests from the dump, and compares them with what the file stores and what
`kvtool inspect --json` / `kvtool verify --json` report."""
import glob
import hashlib
import os
import struct
import sys

import h5py
import numpy as np

from common import BIN, KVTOOL, check, run, run_json, workdir

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "adversarial"))
import kvi  # noqa: E402  (kvi v1 parsing, canonical JSON and the libzstd binding; no kvtool code)

FIXTURES = os.environ.get("KVTOOL_FIXTURES", "fixtures")
BUILD = {
    "pq": ["-b", "4", "-m", "2", "--iters", "4"],
    "clusterkv": ["--tokens-per-cluster", "16", "--iters", "4"],
    "lsh": ["-K", "4", "-L", "4"],
    "squeeze": ["--observation-window", "8", "--percent-clusters", "10", "--iters", "4"],
}


def field(tag, type_, payload):
    """One field of the canonical typed encoding: u16 tag, u8 type, u64 length, bytes."""
    return struct.pack("<HBQ", tag, type_, len(payload)) + payload


def s_(tag, text):
    return field(tag, 1, text.encode("utf-8"))


def u64(tag, v):
    return field(tag, 2, struct.pack("<Q", v))


def i64(tag, v):
    return field(tag, 3, struct.pack("<q", v))


def identity(src):
    """Identity fields 1-12 from a manifest source binding."""
    return (s_(1, src["model_artifact_sha256"]) + i64(2, src["checkpoint_generation"]) +
            s_(3, src["adapter_set_sha256"]) + s_(4, src["position_contract"]) + s_(5, src["rope_config"]) +
            s_(6, src["representation"]) + s_(7, src["tenant_namespace"]) +
            field(8, 4, np.asarray(src["q_to_kv_head"], "<i4").tobytes()) + u64(9, src["layers"]) +
            u64(10, src["kv_heads"]) + u64(11, src["head_dim"]) + s_(12, src["dtype"]))


def payload_digest(dump, end):
    h = hashlib.sha256(b"kvtool.payload.v1\0" + struct.pack("<Q", end))
    with h5py.File(dump, "r") as f:
        k, v = f["kv/k"], f["kv/v"]
        for layer in range(k.shape[0]):
            for head in range(k.shape[1]):
                for x in (k, v):
                    rows = np.ascontiguousarray(x[layer, head, :end])
                    h.update(rows.astype(rows.dtype.newbyteorder("<")).tobytes())
    return h.digest()


def content_digest(src, dump, end):
    enc = s_(0, "kvtool.content.v1") + identity(src) + u64(13, end) + field(14, 5, payload_digest(dump, end))
    return hashlib.sha256(enc).digest()


def check_binding(name, src, dump):
    """The source binding's digests recomputed from the dump it names."""
    end, frontier = src["coverage_end"], src["committed_frontier"]
    check(payload_digest(dump, end).hex() == src["payload_sha256"], name + ": payload_sha256")
    check(content_digest(src, dump, end).hex() == src["content_digest"], name + ": content_digest")
    snap = (s_(0, "kvtool.snapshot.v1") + identity(src) + i64(20, src["namespace_generation"]) +
            i64(21, src["request_generation"]) + i64(22, src["cache_generation"]) +
            i64(23, src["publication_generation"]) + u64(24, src["tokens"]) + u64(25, frontier) +
            field(26, 5, content_digest(src, dump, frontier)))
    check(hashlib.sha256(snap).hexdigest() == src["snapshot_digest"], name + ": snapshot_digest")
    with h5py.File(dump, "r") as f:
        tokens = f["kv/tokens"][:end].astype("<i8").tobytes() if "tokens" in f["kv"] else None
    if tokens is None:
        check(src["prefix_tokens_sha256"] == "", name + ": prefix_tokens_sha256 without tokens")
    else:
        enc = s_(0, "kvtool.prefix-tokens.v1") + u64(1, end) + field(2, 5, hashlib.sha256(tokens).digest())
        check(hashlib.sha256(enc).hexdigest() == src["prefix_tokens_sha256"], name + ": prefix_tokens_sha256")
    verified = run_json(KVTOOL, "verify", dump, "--json")
    check(verified["snapshot_digest"] == src["snapshot_digest"], name + ": verify's snapshot digest of the dump")


def check_artifact(name, art, dump):
    data = open(art, "rb").read()
    m_off, m_size, _, _, stored_digest = kvi.footer(data)
    text = data[m_off : m_off + m_size]
    info = run_json(KVTOOL, "inspect", art, "--json")
    digest = hashlib.sha256(text).hexdigest()
    check(digest == stored_digest.hex(), name + ": manifest SHA-256 differs from the footer's")
    check(digest == info["manifest_sha256"], name + ": manifest SHA-256 differs from inspect's")
    manifest = kvi.parse_json(text.decode("utf-8"))
    check(kvi.canonical(manifest).encode("utf-8") == text, name + ": manifest is not in canonical form")
    params = hashlib.sha256(kvi.canonical(manifest["params"]).encode("utf-8")).hexdigest()
    check(params == manifest["params_digest"], name + ": params_digest")
    reported = {(s["name"], s["layer"], s["kv_head"]): s["sha256"] for s in info["sections"]}
    check(len(reported) == len(manifest["sections"]), name + ": inspect lists another number of sections")
    codecs = set()
    for e in manifest["sections"]:
        stored = data[e["offset"] : e["offset"] + e["stored_size"]]
        raw = kvi.decode(e, stored)
        where = "%s: section %s (%d, %d)" % (name, e["name"], e["layer"], e["kv_head"])
        check(raw is not None and len(raw) == e["raw_size"], where + " does not decode to raw_size")
        check(e["raw_size"] == int(np.prod(e["shape"], dtype=np.int64)) * kvi.DTYPE_SIZE[e["dtype"]], where + " size")
        got = hashlib.sha256(raw).hexdigest()
        check(got == e["sha256"], where + ": SHA-256 differs from the manifest's")
        check(got == reported[(e["name"], e["layer"], e["kv_head"])], where + ": SHA-256 differs from inspect's")
        codecs.add(e["codec"])
    check_binding(name, manifest["source"], dump)
    return codecs


with workdir() as w:
    dump = os.path.join(w, "d.h5")
    run(KVTOOL, "synth", "--layers", 2, "--kv-heads", 1, "--q-heads", 2, "--head-dim", 8, "--tokens", 160, "--seed", 1,
        "--query-count", 24, "-o", dump, "-q")
    cases = []
    for kind, opts in BUILD.items():
        art = os.path.join(w, kind + ".kvi")
        run(KVTOOL, "build", kind, dump, "-o", art, "-q", "--zstd-level", 3, "--threads", 1, "--sink", 4, "--local", 8,
            "--prefix", 150, *opts)
        cases.append((kind, art, dump))
    ct = os.path.join(w, "ct.kvi")
    run(os.path.join(BIN, "kvtool-testgen"), dump, "-o", ct, "--coverage", 120)
    cases.append(("container-test", ct, dump))
    cases.append(("fixtures/container-test.kvi", os.path.join(FIXTURES, "container-test.kvi"),
                  os.path.join(FIXTURES, "small-f16.h5")))
    cases.append(("fixtures/container-test-signed.kvi", os.path.join(FIXTURES, "container-test-signed.kvi"),
                  os.path.join(FIXTURES, "small-f16.h5")))
    for art in sorted(glob.glob(os.path.join(FIXTURES, "pinned", "*.kvi"))):
        cases.append(("fixtures/pinned/" + os.path.basename(art), art, os.path.join(FIXTURES, "stories-f32.h5")))
    codecs = set()
    for name, art, d in cases:
        codecs |= check_artifact(name, art, d)
    check(codecs == {"none", "zstd", "zstd-delta"}, "the artifacts exercised codecs %s, not all three" % sorted(codecs))
    print("ok: %d artifacts" % len(cases))
