#!/usr/bin/python3
"""Writes the committed seed corpora under fuzz/corpus/ from a tiny synthetic dump and one small
artifact of every kind (fuzz/README.md). Usage: make_seeds.py KVTOOL_BINARY [CORPUS_DIR]."""

import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "adversarial"))
import kvi  # noqa: E402


def kind_names():
    """The kinds of the registration list, in its order (fuzz_kind's kind byte indexes it), so that a
    kind added there gets seeds too."""
    path = os.path.join(HERE, "..", "lib", "runtime", "include", "kvtool", "kinds.def")
    with open(path) as f:
        return [line[len("KVTOOL_KIND("):].split(",")[0].strip() for line in f if line.startswith("KVTOOL_KIND(")]


KINDS = kind_names()
# Small enough for a few KB per artifact, large enough that no part is dense; a kind not named here
# is built with its defaults.
BUILD = {
    "pq": ["-b", "4", "-m", "2", "--iters", "4", "--codebook-dtype", "f32"],  # the committed seeds' settings
    "clusterkv": ["--tokens-per-cluster", "16", "--iters", "4", "--centroid-dtype", "f32"],
    "lsh": ["-K", "4", "-L", "4"],
    "squeeze": ["--observation-window", "8", "--percent-clusters", "10", "--iters", "4"],
}


def run(*args):
    subprocess.run([str(a) for a in args], check=True, stdout=subprocess.DEVNULL)


def put(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def kind_seed(kind_index, manifest, sections):
    """The fuzz_kind input format (fuzz/fuzz_kind.cpp)."""
    core = {k: manifest[k] for k in ("params", "source", "kind_data")}
    text = kvi.canonical(core).encode()
    out = bytearray([kind_index]) + struct.pack("<I", len(text)) + text
    for entry, raw in sections:
        head = kvi.canonical({k: entry[k] for k in ("name", "dtype", "shape", "layer", "kv_head")}).encode()
        out += struct.pack("<I", len(head)) + head + raw
    return bytes(out)


def import_seeds(corpus):
    """fuzz_import: one small file of every format kvtool import reads (fuzz/fuzz_import.cpp)."""
    import io
    import numpy as np
    x = (np.arange(24, dtype=np.float32) * 0.5 - 3).reshape(2, 3, 4)
    for name, arr in (("f32.npy", x), ("f16.npy", x.astype(np.float16)), ("i64.npy", np.arange(8))):
        b = io.BytesIO()
        np.save(b, arr)
        put(os.path.join(corpus, "import", name), b.getvalue())
    for name, save in (("stored.npz", np.savez), ("deflated.npz", np.savez_compressed)):
        b = io.BytesIO()
        save(b, k=x, v=x.astype(np.float16))
        put(os.path.join(corpus, "import", name), b.getvalue())
    bf16 = (x.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = {"__metadata__": {"format": "pt"},
              "k": {"dtype": "F32", "shape": [2, 3, 4], "data_offsets": [0, 96]},
              "v": {"dtype": "BF16", "shape": [2, 3, 4], "data_offsets": [96, 144]}}
    text = json.dumps(header).encode()
    put(os.path.join(corpus, "import", "kv.safetensors"), struct.pack("<Q", len(text)) + text + x.tobytes() + bf16)


def structured_seeds(corpus):
    """fuzz_import_layout and fuzz_dump_struct: control bytes, then payload (their .cpp says how)."""
    f32 = struct.pack("<64f", *[0.25 * i - 4 for i in range(64)])
    # npz, L,H,T,d f32, L=H=2, T=d=4: k and v of 256 bytes each.
    put(os.path.join(corpus, "import_layout", "npz-lhtd"), bytes([0, 0, 0, 1, 1, 3, 3]) + (bytes([16]) + f32) * 2)
    # safetensors with q and tokens, L,2,T,Hd f16 with --kv-heads 2: L=1, T=4, Hd=8.
    f16 = struct.pack("<64e", *[0.5 * i - 8 for i in range(64)])
    put(os.path.join(corpus, "import_layout", "st-vllm"),
        bytes([4, 15, 1, 1, 0, 3, 7, 8]) + f16[:128] + bytes([4]) + f16[:64] + bytes([1, 4]) + struct.pack("<4q", 1, 2, 3, 4))
    # T,H,d,L with a 2^40 axis and no payload.
    put(os.path.join(corpus, "import_layout", "huge-axis"), bytes([2, 0, 0, 10, 1, 1, 1, 0, 0]))
    # A dump of L=2, H=1, Hq=2, T=4, d=4 with queries, f32; then none, one attribute, one dataset edit.
    base = bytes([1, 0, 1, 3, 3, 1, 0]) + f32  # 64 floats: K and V of both layers
    put(os.path.join(corpus, "dump_struct", "plain"), base + bytes([0]))
    put(os.path.join(corpus, "dump_struct", "attribute"), base + bytes([1, 1, 3, 1]) + struct.pack(">q", 99))
    put(os.path.join(corpus, "dump_struct", "dataset"), base + bytes([1, 0, 4, 1, 0, 5, 2]) + bytes(40))


def store_entry(path, data):
    """One entry of fuzz_cache_store's input: the path, a newline, a 2-byte length, the bytes."""
    return path.encode() + b"\n" + struct.pack("<H", len(data)) + data


def cache_store_seeds(corpus):
    """fuzz_cache_store: one small store of each kind in the target's geometry (2 layers, 2 kv heads,
    head_dim 4, f16, 4 tokens a block; formats/cache-stores.md), and a seal."""
    import hashlib
    fields = {"model_name": "m", "tokens_per_hash": 4, "blocks_per_file": 1, "tp_size": 1, "pp_size": 1,
              "pcp_size": 1, "dcp_size": 1, "dtype": "float16", "inference_engine": "vllm",
              "kv_cache_groups": [{"tokens_per_block": 4, "layer_names": ["l0", "l1"]}]}
    ns = "m_" + hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    h = hashlib.sha256(b"block").hexdigest()
    row = bytes(range(256)) + bytes(4096 - 256)
    vllm = store_entry(ns + "/config.json", json.dumps(fields, indent=2, sort_keys=True).encode())
    vllm += store_entry("%s_r0/%s/%s_g0/%s.bin" % (ns, h[:3], h[3:5], h), row)
    put(os.path.join(corpus, "cache_store", "vllm"), bytes([1, 0]) + vllm)
    chunk = bytes(2 * 2 * 3 * 8 * 2)
    put(os.path.join(corpus, "cache_store", "lmcache"),
        bytes([2, 0]) + store_entry("m@1@0@-1f@half.pt", chunk) +
        store_entry("m@1@0@2e@half.data", struct.pack("iiiiiii", len(chunk), 1, 2, 2, 2, 3, 8) + chunk))
    put(os.path.join(corpus, "cache_store", "sglang"),
        bytes([3, 5]) + store_entry(h + "_m_0_1.bin", bytes(256)) + store_entry(h + ".swa_m_0_1.bin", bytes(64)))
    seal = {"kvtool_seal": 1, "kind": "directory", "name": "s", "shard": {"index": 0, "count": 1},
            "files": [{"path": "a", "size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}]}
    put(os.path.join(corpus, "cache_store", "seal.json"), json.dumps(seal).encode())


def main():
    kvtool, corpus = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "corpus")
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "tiny.h5")
        run(kvtool, "synth", "--layers", 2, "--kv-heads", 1, "--q-heads", 2, "--head-dim", 8, "--tokens", 160,
            "--seed", 1, "--query-count", 8, "-o", dump, "-q")
        small = os.path.join(tmp, "small.h5")
        run(kvtool, "synth", "--layers", 1, "--kv-heads", 1, "--q-heads", 2, "--head-dim", 4, "--tokens", 8,
            "--seed", 2, "--query-count", 2, "--dtype", "f32", "-o", small, "-q")
        put(os.path.join(corpus, "dump", "small-f32.h5"), open(small, "rb").read())
        import_seeds(corpus)
        structured_seeds(corpus)
        cache_store_seeds(corpus)
        for i, kind in enumerate(KINDS):
            art = os.path.join(tmp, kind + ".kvi")
            run(kvtool, "build", kind, dump, "-o", art, "-q", "--zstd-level", 0, "--threads", 1, "--sink", 4,
                "--local", 8, *BUILD.get(kind, []))
            data = open(art, "rb").read()
            put(os.path.join(corpus, "container", kind + ".kvi"), data)
            manifest, sections = kvi.read(art)
            m_off, m_size = struct.unpack_from("<2Q", data, len(data) - 80)
            put(os.path.join(corpus, "manifest", kind + ".json"), data[m_off : m_off + m_size])
            put(os.path.join(corpus, "kind", kind + ".bin"), kind_seed(i, manifest, sections))
            if kind == "lsh":  # compressed: the container's zstd and zstd-delta decoders get a seed
                packed = os.path.join(tmp, "lsh-zstd.kvi")
                run(kvtool, "build", kind, dump, "-o", packed, "-q", "--zstd-level", 3, "--threads", 1, "--sink", 4,
                    "--local", 8, *BUILD.get(kind, []))
                put(os.path.join(corpus, "container", "lsh-zstd.kvi"), open(packed, "rb").read())
            if kind == "clusterkv":  # i8 centroids (the default dtype) and their exponent sections
                i8 = os.path.join(tmp, "clusterkv-i8.kvi")
                run(kvtool, "build", kind, dump, "-o", i8, "-q", "--zstd-level", 0, "--threads", 1, "--sink", 4,
                    "--local", 8, *BUILD[kind][:-1], "i8")
                manifest, sections = kvi.read(i8)
                put(os.path.join(corpus, "kind", "clusterkv-i8.bin"), kind_seed(i, manifest, sections))
            if kind == "pq":
                store = os.path.join(tmp, "store")
                run(kvtool, "store", "put", "--store", store, art)
                refs = os.path.join(store, "refs")
                ref = open(os.path.join(refs, os.listdir(refs)[0]), "rb").read()
                put(os.path.join(corpus, "store_ref", "pq.json"), ref)
                key = json.loads(ref)["key"]
                parts = [key[k] for k in ("tenant", "model", "adapter", "prefix_hash", "kind", "params_digest",
                                          "position_contract")]
                put(os.path.join(corpus, "store_key", "pq"), b"\x01" + "\n".join(parts).encode())
                put(os.path.join(corpus, "store_key", "short"), b"\x00a\nb\nc\nd\ne")


if __name__ == "__main__":
    main()
