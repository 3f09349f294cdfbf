#!/usr/bin/python3
"""The adversarial corpus of issue 14: digest-correct but structurally invalid artifacts of every
kind, resource bombs and lying dumps (formats/kvi-v1.md, formats/kinds-v1.md, formats/kvdump-v1.md).

Usage: generate.py KVTOOL OUTDIR. Builds a small synthetic dump and one artifact of every kind with
KVTOOL, then writes OUTDIR/good/ (the dump and the artifacts) and OUTDIR/cases/ (one file per case)
and OUTDIR/cases.json: [{"name", "file", "type": "artifact" | "dump", "finding", "what",
"exits"}]. "exits" lists the accepted exit codes (1 unless the case says otherwise).
"""

import copy
import hashlib
import json
import os
import struct
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvi  # noqa: E402

KINDS = ["pq", "clusterkv", "lsh", "squeeze"]
# Small enough to build in a second, large enough that no part is dense (fuzz/make_seeds.py).
BUILD = {
    "pq": ["-b", "4", "-m", "2", "--iters", "4"],
    "clusterkv": ["--tokens-per-cluster", "16", "--iters", "4"],
    "lsh": ["-K", "4", "-L", "4"],
    "squeeze": ["--observation-window", "8", "--percent-clusters", "10", "--iters", "4"],
}
# Queries at rows 136-159; the artifacts cover [0, 150), so eval has queries beyond the coverage
# and squeeze calibrates on the 8 before it.
DUMP = dict(layers=2, kv_heads=1, q_heads=2, head_dim=8, tokens=160, query_count=24)
PREFIX = 150


def run(*args):
    subprocess.run([str(a) for a in args], check=True, stdout=subprocess.DEVNULL)


def build_good(kvtool, good):
    os.makedirs(good, exist_ok=True)
    dump = os.path.join(good, "dump.h5")
    d = DUMP
    run(kvtool, "synth", "--layers", d["layers"], "--kv-heads", d["kv_heads"], "--q-heads", d["q_heads"],
        "--head-dim", d["head_dim"], "--tokens", d["tokens"], "--seed", 1, "--query-count", d["query_count"],
        "-o", dump, "-q")
    arts = {}
    for kind in KINDS:
        arts[kind] = os.path.join(good, kind + ".kvi")
        run(kvtool, "build", kind, dump, "-o", arts[kind], "-q", "--zstd-level", 0, "--threads", 1, "--sink", 4,
            "--local", 8, "--prefix", PREFIX, *BUILD[kind])
    return dump, arts


class Corpus:
    def __init__(self, out):
        self.dir = os.path.join(out, "cases")
        os.makedirs(self.dir, exist_ok=True)
        self.cases = []

    def add(self, name, type_, finding, what, exits=(1,), inspect_exits=None):
        path = os.path.join(self.dir, name + (".kvi" if type_ == "artifact" else ".h5"))
        self.cases.append(dict(name=name, file=path, type=type_, finding=finding, what=what, exits=list(exits),
                               inspect_exits=list(inspect_exits or exits)))
        return path


# ---------------------------------------------------------------- artifacts: re-packed structure


def sec(sections, name, layer=0, kv_head=0):
    for s in sections:
        if s[0]["name"] == name and s[0]["layer"] == layer and s[0]["kv_head"] == kv_head:
            return s
    raise KeyError(name)


def u32(values):
    return np.asarray(values, dtype="<u4").tobytes()


def as_u32(raw):
    return np.frombuffer(raw, dtype="<u4").copy()


def repack(corpus, arts, kind, name, finding, what, edit, exits=(1,)):
    """Reads the good artifact of `kind`, lets `edit(manifest, sections)` change it, re-packs."""
    manifest, sections = kvi.read(arts[kind])
    manifest = copy.deepcopy(manifest)
    edit(manifest, sections)
    kvi.write(corpus.add(name, "artifact", finding, what, exits), manifest, sections)


def structure_cases(corpus, arts):
    # Controls: re-packed without a change, every command must accept them (exit 0), so a case
    # below fails for its own defect and not for a re-packer the reader disagrees with.
    for kind in KINDS:
        repack(corpus, arts, kind, kind + "-repacked-unchanged", "-", "control: re-packed, nothing changed",
               lambda m, s: None, exits=(0,))

    def drop(name):
        def edit(m, s):
            s.remove(sec(s, name))
        return edit

    def pq_codes_255(m, s):
        x = sec(s, "pq_codes")
        x[1] = bytes([255]) * len(x[1])

    def pq_short(name):
        def edit(m, s):
            x = sec(s, name)
            if name == "pq_codes":  # [n, m] u8: drop the last row, shape left claiming n rows -> relabel
                x[0]["shape"] = [x[0]["shape"][0] - 1, x[0]["shape"][1]]
                x[1] = x[1][: -x[0]["shape"][1]]
            else:  # [m, k, dsub] f32: one centroid fewer per subspace
                mm, k, dsub = x[0]["shape"]
                arr = np.frombuffer(x[1], "<f4").reshape(mm, k, dsub)[:, : k - 1, :]
                x[0]["shape"] = [mm, k - 1, dsub]
                x[1] = arr.tobytes()
        return edit

    repack(corpus, arts, "pq", "pq-no-codes", 1, "pq part (0,0) without its pq_codes section", drop("pq_codes"))
    repack(corpus, arts, "pq", "pq-no-centroids", 1, "pq part (0,0) without pq_centroids", drop("pq_centroids"))
    repack(corpus, arts, "pq", "pq-codes-255", 1, "pq codes 255 with 4 bits", pq_codes_255)
    repack(corpus, arts, "pq", "pq-short-codes", 1, "pq_codes one row short", pq_short("pq_codes"))
    repack(corpus, arts, "pq", "pq-short-centroids", 1, "pq_centroids one centroid short", pq_short("pq_centroids"))

    def lsh_sink(m, s):
        m["params"]["sink"] = 100  # indexed rows [100, 152) no longer what the tables hold

    def lsh_offsets(m, s):
        x = sec(s, "lsh_offsets")
        off = as_u32(x[1])
        off[1] = 0xFFFFFFF0
        x[1] = off.tobytes()

    def lsh_offsets_last(m, s):
        x = sec(s, "lsh_offsets")
        off = as_u32(x[1])
        off[-1] = off[-1] + 1000
        x[1] = off.tobytes()

    repack(corpus, arts, "lsh", "lsh-bad-sink", 1, "lsh params.sink 100 (tables index other rows)", lsh_sink)
    repack(corpus, arts, "lsh", "lsh-offsets-huge", 1, "lsh bucket offset 0xFFFFFFF0", lsh_offsets)
    repack(corpus, arts, "lsh", "lsh-offsets-end", 1, "lsh last offset past the ids", lsh_offsets_last)
    repack(corpus, arts, "lsh", "lsh-no-ids", 1, "lsh part without lsh_ids", drop("lsh_ids"))

    def ckv_members(value=None, dup=False):
        def edit(m, s):
            x = sec(s, "ckv_members")
            mem = as_u32(x[1])
            if dup:
                mem[1] = mem[0]
            else:
                mem[0] = value
            x[1] = mem.tobytes()
        return edit

    repack(corpus, arts, "clusterkv", "clusterkv-member-out-of-range", 1, "clusterkv member id 10^9",
           ckv_members(10**9))
    repack(corpus, arts, "clusterkv", "clusterkv-member-duplicate", 1, "clusterkv member listed twice",
           ckv_members(dup=True))
    repack(corpus, arts, "clusterkv", "clusterkv-no-members", 1, "clusterkv part without members",
           drop("ckv_members"))

    def sq_members(m, s):
        x = sec(s, "sq_fine_members")
        mem = as_u32(x[1])
        mem[1] = mem[0]
        x[1] = mem.tobytes()

    def sq_labels(m, s):
        x = sec(s, "sq_labels")
        lab = as_u32(x[1])
        lab[:] = 0xFFFFFFFF
        x[1] = lab.tobytes()

    def sq_calibration(m, s):
        del m["kind_data"]["parts"][0]["calibration_scores"]

    repack(corpus, arts, "squeeze", "squeeze-members-not-partition", 1, "squeeze fine member listed twice",
           sq_members)
    repack(corpus, arts, "squeeze", "squeeze-labels-out-of-range", 1, "squeeze labels 2^32-1", sq_labels)
    repack(corpus, arts, "squeeze", "squeeze-no-calibration-field", 12,
           "squeeze part without calibration_scores", sq_calibration)


def binding_cases(corpus, arts):
    def src(field, value):
        def edit(m, s):
            m["source"][field] = value
        return edit

    for kind in KINDS:
        repack(corpus, arts, kind, kind + "-q-heads-500", 2, "source.q_heads 500 with a 2-entry head map",
               src("q_heads", 500))
    repack(corpus, arts, "pq", "head-map-99", 14, "q_to_kv_head entry 99", src("q_to_kv_head", [0, 99]))
    repack(corpus, arts, "pq", "head-map-minus-5", 14, "q_to_kv_head entry -5", src("q_to_kv_head", [0, -5]))
    repack(corpus, arts, "pq", "layers-2-62", 14, "source.layers 2^62", src("layers", 2**62))
    repack(corpus, arts, "pq", "tenant-empty", 14, 'tenant ""', src("tenant_namespace", ""))
    repack(corpus, arts, "pq", "tenant-dotdot", 14, 'tenant ".."', src("tenant_namespace", ".."))

    def relabel(m, s):
        m["kind"] = "container-test"

    def part_layer_string(m, s):
        m["kind_data"]["parts"][0]["layer"] = "0"

    def params_layers_strings(m, s):
        m["params"]["layers"] = ["0", "1"]

    repack(corpus, arts, "pq", "pq-as-container-test", 14, "pq artifact relabelled container-test", relabel)
    repack(corpus, arts, "pq", "part-layer-string", 12, "kind_data part layer as a string", part_layer_string)
    for kind in KINDS:
        repack(corpus, arts, kind, kind + "-params-layers-strings", 12, "params.layers as strings",
               params_layers_strings)


# ---------------------------------------------------------------- artifacts: resource bombs


def zstd_frame(content_size, blocks):
    """A zstd frame (RFC 8878): 8-byte content size, 128 KiB window, then `blocks` as
    (type, size, payload) with type 0 raw / 1 RLE; the last block is flagged."""
    out = struct.pack("<IBB", 0xFD2FB528, 0xC0, 7 << 3) + struct.pack("<Q", content_size)
    for i, (btype, size, payload) in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        header = last | (btype << 1) | (size << 3)
        out += struct.pack("<I", header)[:3] + payload
    return out


def zeros_sha256(n):
    h, mib = hashlib.sha256(), bytes(1 << 20)
    for _ in range(n >> 20):
        h.update(mib)
    return h.hexdigest()


def bomb_cases(corpus, arts):
    gib = 1 << 30

    def bomb(name, what, stored, raw_size):
        manifest, sections = kvi.read(arts["pq"])
        entry = dict(name="bomb", dtype="u8", shape=[raw_size], layer=0, kv_head=0, codec="zstd",
                     stored_size=len(stored), raw_size=raw_size, sha256="0" * 64)
        kvi.write(corpus.add(name, "artifact", 4, what), manifest, sections, raw_section=(entry, stored))

    # 11 KB: a frame header claiming 1 GiB, then one raw block of 10 KiB and nothing else.
    bomb("zstd-fake-1gib", "zstd frame header claiming 1 GiB in an 11 KB file", zstd_frame(gib, [(0, 10240, bytes(10240))]),
         gib)
    # A real frame: 8192 RLE blocks of 128 KiB = 1 GiB of zeros in 32 KB.
    block = 128 << 10
    rle = zstd_frame(gib, [(1, block, b"\0")] * (gib // block))
    manifest, sections = kvi.read(arts["pq"])
    entry = dict(name="bomb", dtype="u8", shape=[gib], layer=0, kv_head=0, codec="zstd", stored_size=len(rle),
                 raw_size=gib, sha256=zeros_sha256(gib))
    kvi.write(corpus.add("zstd-rle-1gib", "artifact", 4, "a real 1 GiB RLE zstd frame (section digest right)"),
              manifest, sections, raw_section=(entry, rle))

    # A manifest nesting 100,000 arrays (canonical, digest right).
    manifest, sections = kvi.read(arts["pq"])
    manifest = copy.deepcopy(manifest)
    manifest["kind_data"]["deep"] = kvi.RawNumber("[" * 100000 + "]" * 100000)
    kvi.write(corpus.add("manifest-nested-100000", "artifact", 3, "manifest nesting 100,000 arrays"), manifest,
              sections)


# ---------------------------------------------------------------- dumps


def good_dump_arrays(dump):
    with h5py.File(dump, "r") as f:
        arrays = {k: f["kv"][k][()] for k in f["kv"]}
        attrs = {k: f.attrs[k] for k in f.attrs}
    return arrays, attrs


def write_dump(path, arrays, attrs, chunks=None, shapes=None):
    with h5py.File(path, "w") as f:
        g = f.create_group("kv")
        for name, x in arrays.items():
            if shapes and name in shapes:  # a claimed shape with no data written (chunks unallocated)
                g.create_dataset(name, shape=shapes[name], dtype=x.dtype, chunks=(1, 1) + tuple(shapes[name][2:]))
                continue
            c = chunks if (chunks and x.ndim == 4) else (True if x.ndim == 4 else None)
            g.create_dataset(name, data=x, chunks=c)
        for k, v in attrs.items():
            f.attrs[k] = v


def dump_cases(corpus, dump):
    arrays, attrs = good_dump_arrays(dump)

    def lie(name, finding, what, arrays_=None, attrs_=None, exits=(1,), inspect_exits=None, **kw):
        a = dict(arrays)
        a.update(arrays_ or {})
        t = dict(attrs)
        t.update(attrs_ or {})
        write_dump(corpus.add(name, "dump", finding, what, exits, inspect_exits), a, t, **kw)

    k = arrays["k"]
    L, H, T, d = k.shape
    lie("dump-2-20-layers", 13, "/kv/k, /kv/v and /kv/q claim 2^20 layers (no data stored)",
        shapes={"k": (1 << 20, H, T, d), "v": (1 << 20, H, T, d), "q": (1 << 20,) + arrays["q"].shape[1:]})
    q = arrays["q"].copy()
    q[0, 0, 0, 0] = np.nan
    # inspect is a health report of values (it counts NaN/Inf, formats/kvdump-v1.md): it refuses a
    # dump's structure lies, not its values; verify, queries and builds refuse the NaN.
    lie("dump-nan-in-q", 13, "NaN in /kv/q", arrays_={"q": q}, inspect_exits=(0,))
    qp = arrays["q_positions"].copy()
    qp[0] = -3
    lie("dump-q-position-negative", 13, "q_positions entry -3", arrays_={"q_positions": qp})
    qp = arrays["q_positions"].copy()
    qp[-1] = T + 5
    lie("dump-q-position-beyond-t", 13, "q_positions entry T+5", arrays_={"q_positions": qp})
    lie("dump-tenant-nul", 13, 'tenant "a\\0b"', attrs_={"tenant_namespace": np.bytes_(b"a\0b")})
    lie("dump-tenant-path", 13, 'tenant "../../etc/passwd"', attrs_={"tenant_namespace": "../../etc/passwd"})
    lie("dump-tenant-empty", 13, 'tenant ""', attrs_={"tenant_namespace": ""})
    lie("dump-model-short", 13, "model SHA of 10 hex digits", attrs_={"model_artifact_sha256": "abcdef0123"})
    lie("dump-model-not-hex", 13, "model SHA of 64 non-hex characters", attrs_={"model_artifact_sha256": "z" * 64})
    pos = np.arange(T, dtype=np.int64)
    pos[10] = pos[9]
    lie("dump-positions-not-increasing", 13, "/kv/positions repeats a value", arrays_={"positions": pos})
    # Found by fuzz_dump (fuzz/crashes/README.md): one byte of a global-heap object length changed;
    # libhdf5 overruns a heap buffer reading a variable-length string attribute.
    crash = os.path.join(HERE, "..", "..", "fuzz", "crashes", "dump-hdf5-global-heap-vlen-attr.h5")
    with open(crash, "rb") as src, open(corpus.add("dump-hdf5-heap-overrun", "dump", "fuzz",
                                                   "fuzz_dump reproducer: corrupt global heap object length"),
                                        "wb") as dst:
        dst.write(src.read())
    # Tiny chunks: 256 KB of keys in [1,1,1,1] chunks (the data are valid; memory must stay bounded).
    big = np.random.default_rng(0).standard_normal((2, 1, 4096, 16)).astype(np.float16)
    qb = np.random.default_rng(1).standard_normal((2, 2, 24, 16)).astype(np.float16)
    rope = json.loads(attrs["rope_config"])
    rope["head_dim"] = 16
    lie("dump-tiny-chunks", 13, "/kv/k, /kv/v in [1,1,1,1] chunks (valid data, bounded memory)",
        arrays_={"k": big, "v": big, "q": qb, "q_positions": np.arange(4072, 4096, dtype=np.int64),
                 **({"tokens": np.zeros(4096, np.int64)} if "tokens" in arrays else {})},
        attrs_={"committed_frontier": 4096, "rope_config": json.dumps(rope)}, exits=(0, 1), chunks=(1, 1, 1, 1))


def main():
    kvtool, out = sys.argv[1], sys.argv[2]
    dump, arts = build_good(kvtool, os.path.join(out, "good"))
    corpus = Corpus(out)
    structure_cases(corpus, arts)
    binding_cases(corpus, arts)
    bomb_cases(corpus, arts)
    dump_cases(corpus, dump)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(dict(dump=dump, artifacts=arts, cases=corpus.cases), f, indent=1)
    print("%d cases in %s" % (len(corpus.cases), corpus.dir))


if __name__ == "__main__":
    main()
