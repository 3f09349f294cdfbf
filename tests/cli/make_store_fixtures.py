#!/usr/bin/python3
"""Cache stores written byte for byte as vLLM, LMCache and SGLang lay them out on disk, for
tests/cli/test_cache_stores.sh (formats/cache-stores.md names each layout's source file and commit).

Run in an empty folder with Debian's /usr/bin/python3 (numpy). Writes:
  model/config.json              a Hugging Face config of the geometry below (2 layers, 4 kv heads, d 8, f16)
  vllm/                          a filesystem offload root: one namespace, 3 blocks of 12 tokens (rows padded to 4096)
  vllm_vector/                   the namespace of vLLM's own test vector (tests/v1/kv_offload/test_file_mapper.py)
  lmcache/                       local-disk chunks <key>.pt (KV_2LTD, 16 + 16 + 5 tokens)
  lmcache_fs/                    FS-connector chunks <key>.data with the 28-byte header
  sglang/                        HiCache pages <hash>_<model>_0_1.bin (layer_first, 4 tokens a page)
  sglang_tp2/                    the same pages split over 2 tensor-parallel ranks
  lmcache_old/, lmcache_layer/   LMCache keys with the engine format (bf16), and layerwise chunks
  truth.npz                      K and V [L, H, T, d] of the 37-token prompt every store holds a prefix of
With --from-dump DUMP MODEL SEED: vllm_p/ and sglang_p/, a real prompt's K/V under the block names
vLLM and SGLang compute for its tokens (from_dump below), and prompt_tokens.json.
"""
import hashlib
import json
import os
import struct

import numpy as np

L, H, D = 2, 4, 8
MODEL = "org/tiny"
T = 37
rng = np.random.default_rng(11)
K = rng.standard_normal((L, H, T, D)).astype(np.float16)
V = rng.standard_normal((L, H, T, D)).astype(np.float16)


def chain(n, salt):
    """n chained 32-byte hashes (names only: how each stack derives them is formats/cache-stores.md's)."""
    out, prev = [], b""
    for i in range(n):
        prev = hashlib.sha256(prev + salt + struct.pack("<I", i)).digest()
        out.append(prev)
    return out


def write(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def model_config():
    cfg = {"_name_or_path": MODEL, "num_hidden_layers": L, "num_attention_heads": H * 2, "num_key_value_heads": H,
           "hidden_size": H * 2 * D, "head_dim": D, "torch_dtype": "float16"}
    write("model/config.json", json.dumps(cfg, indent=2).encode())


def vllm_namespace(root, fields):
    """vllm/v1/kv_offload/file_mapper.py: <root>/<model '/'->'_'>_<sha256(compact sorted JSON)[:12]>;
    tiering/fs/manager.py writes config.json with indent=2, sort_keys=True."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    base = "%s/%s_%s" % (root, fields["model_name"].replace("/", "_"), hashlib.sha256(canonical.encode()).hexdigest()[:12])
    write(base + "/config.json", json.dumps(fields, indent=2, sort_keys=True).encode())
    return base


def vllm_store():
    bs = 12
    fields = {"model_name": MODEL, "tokens_per_hash": bs, "blocks_per_file": 1, "tp_size": 1, "pp_size": 1,
              "pcp_size": 1, "dcp_size": 1, "dtype": "float16", "inference_engine": "vllm",
              "kv_cache_groups": [{"tokens_per_block": bs,
                                   "layer_names": ["model.layers.%d.self_attn.attn" % l for l in range(L)]}]}
    base = vllm_namespace("vllm", fields)
    for b, h in enumerate(chain(T // bs, b"vllm")):
        # One CPU row: per layer (group order) the page of the block, NHD: token -> head -> [K | V];
        # the row is padded to a multiple of 4096 (cpu/shared_offload_region.py).
        row = b""
        for l in range(L):
            t = slice(b * bs, (b + 1) * bs)
            page = np.concatenate([K[l, :, t, :].transpose(1, 0, 2), V[l, :, t, :].transpose(1, 0, 2)], axis=2)
            row += page.tobytes()
        row += b"\0" * (-len(row) % 4096)
        x = h.hex()
        write("%s_r0/%s/%s_g0/%s.bin" % (base, x[:3], x[3:5], x), row)
    # vLLM's own test vector: these fields name the folder test-model_de3bba26cf36.
    vector = {"model_name": "test-model", "tokens_per_hash": 16, "blocks_per_file": 1, "tp_size": 1, "pp_size": 1,
              "pcp_size": 1, "dcp_size": 1, "dtype": "float16", "kv_cache_groups": [], "inference_engine": "vllm",
              "parallel_agnostic": False}
    assert vllm_namespace("vllm_vector", vector).endswith("/test-model_de3bba26cf36")


def lmcache_chunks(T0, chunk, ranks):
    """[2, L, T, hidden] of each worker's heads for each chunk (gpu_connector's KV_2LTD)."""
    hr = H // ranks
    for c in range(0, T0, chunk):
        t = slice(c, min(T0, c + chunk))
        for w in range(ranks):
            hs = slice(w * hr, (w + 1) * hr)
            kv = np.stack([K[:, hs, t, :], V[:, hs, t, :]])          # [2, L, hr, T, d]
            yield c // chunk, w, kv.transpose(0, 1, 3, 2, 4).copy()  # [2, L, T, hr, d]


def lmcache_stores():
    hashes = [-0x5d1b8de6da1b6d09, 0x1f3a, 0x7c0ffee123456789]
    for i, w, kv in lmcache_chunks(T, 16, 1):
        # utils.py CacheEngineKey.to_string: model@world_size@worker_id@{chunk_hash:x}@dtype.
        key = "%s@1@%d@%s@half" % (MODEL, w, format(hashes[i], "x"))
        write("lmcache/%s.pt" % key.replace("/", "-"), kv.tobytes())
        # fs_connector.py: <key with '/' -> '-SEP-'>.data; protocol.py: 7 native int32 then the bytes.
        head = struct.pack("iiiiiii", kv.nbytes, 1, 2, 2, L, kv.shape[2], H * D)
        write("lmcache_fs/%s.data" % key.replace("/", "-SEP-"), head + kv.tobytes())


def lmcache_variants():
    """Older and layerwise keys: lmcache_old/ the keys of LMCache before the engine format was dropped
    (fmt@model@world_size@worker_id@hash@dtype, utils.py after PR 1859); lmcache_layer/ layerwise FS
    chunks (LayerCacheEngineKey: ...@dtype@layer) in KV_T2D [T, 2, hidden] with their header (fmt 2)."""
    for i, w, kv in lmcache_chunks(T, 16, 1):
        key = "vllm@%s@1@%d@%x@bfloat16" % (MODEL, w, 0xabc + i)
        bf = (kv.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # bf16: the f32 bits truncated
        write("lmcache_old/%s.pt" % key.replace("/", "-"), bf.tobytes())
        for l in range(L):
            t2d = kv[:, l].transpose(1, 0, 2, 3).reshape(kv.shape[2], 2, H * D)  # [T, 2, hidden]
            lkey = "%s@1@%d@%x@half@%d" % (MODEL, w, 0xdef + i, l)
            # shape [T, 2, hidden, 0]: kvtool reads a layerwise header's length, format and dtype only
            head = struct.pack("iiiiiii", t2d.nbytes, 2, 2, t2d.shape[0], 2, H * D, 0)
            write("lmcache_layer/%s.data" % lkey.replace("/", "-SEP-"), head + t2d.tobytes())


def sglang_pages(root, ranks, page=4):
    """hicache_storage.py HiCacheFile: <hash>_<model '/'->'-'>_<tp_rank>_<tp_size>.bin; each page
    MHATokenToKVPoolHost.get_data_page(flat=True) in layer_first: [2, L, P, H, d]."""
    prev = b""
    hr = H // ranks
    for p in range(T // page):
        tokens = list(range(1000 + p * page, 1000 + (p + 1) * page))
        prev = hashlib.sha256(prev + b"".join(struct.pack("<I", t) for t in tokens)).digest()
        t = slice(p * page, (p + 1) * page)
        for r in range(ranks):
            hs = slice(r * hr, (r + 1) * hr)
            data = np.stack([K[:, hs, t, :], V[:, hs, t, :]]).transpose(0, 1, 3, 2, 4)  # [2, L, P, hr, d]
            write("%s/%s_%s_%d_%d.bin" % (root, prev.hex(), MODEL.replace("/", "-"), r, ranks), data.tobytes())


def vllm_hashes(tokens, block, seed):
    """vllm/v1/core/kv_cache_utils.py hash_block_tokens with the default sha256 hash
    (vllm/utils/hashing.py: sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))), chained from
    NONE_HASH = sha256(pickle of PYTHONHASHSEED): the names vLLM gives the prompt's blocks."""
    import pickle

    def h(obj):
        return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()

    parent, out = h(seed), []
    for i in range(0, len(tokens) - block + 1, block):
        parent = h((parent, tuple(tokens[i:i + block]), None))
        out.append(parent)
    return out


def sglang_keys(tokens, page):
    """get_hash_str (python/sglang/srt/mem_cache/utils.py) chained over the pages."""
    out, prev = [], None
    for i in range(0, len(tokens) - page + 1, page):
        hasher = hashlib.sha256()
        if prev:
            hasher.update(prev)
        for t in tokens[i:i + page]:
            hasher.update(t.to_bytes(4, byteorder="little", signed=False))
        prev = hasher.digest()
        out.append(prev)
    return out


def from_dump(dump, model, seed, block=16, page=8):
    """Stores of a real prompt's K/V (a dump's f16 rows) under the names the stacks give its tokens:
    vllm_p/ (vLLM, blocks of BLOCK tokens, PYTHONHASHSEED=SEED) and sglang_p/ (SGLang, pages of PAGE
    tokens over 2 tensor-parallel ranks)."""
    import h5py
    global K, V
    f = h5py.File(dump, "r")
    K, V = f["kv/k"][:].astype(np.float16), f["kv/v"][:].astype(np.float16)
    tokens = [int(t) for t in f["kv/tokens"]]
    layers, heads, _, d = K.shape
    fields = {"model_name": model, "tokens_per_hash": block, "blocks_per_file": 1, "tp_size": 1, "pp_size": 1,
              "pcp_size": 1, "dcp_size": 1, "dtype": "float16", "inference_engine": "vllm",
              "kv_cache_groups": [{"tokens_per_block": block,
                                   "layer_names": ["model.layers.%d.self_attn.attn" % l for l in range(layers)]}]}
    base = vllm_namespace("vllm_p", fields)
    for b, h in enumerate(vllm_hashes(tokens, block, seed)):
        t = slice(b * block, (b + 1) * block)
        row = b"".join(np.concatenate([K[l, :, t].transpose(1, 0, 2), V[l, :, t].transpose(1, 0, 2)], axis=2).tobytes()
                       for l in range(layers))
        row += b"\0" * (-len(row) % 4096)
        x = h.hex()
        write("%s_r0/%s/%s_g0/%s.bin" % (base, x[:3], x[3:5], x), row)
    hr = heads // 2
    for p, key in enumerate(sglang_keys(tokens, page)):
        t = slice(p * page, (p + 1) * page)
        for r in range(2):
            hs = slice(r * hr, (r + 1) * hr)
            data = np.stack([K[:, hs, t], V[:, hs, t]]).transpose(0, 1, 3, 2, 4)  # [2, L, P, hr, d]
            write("sglang_p/%s_%s_%d_2.bin" % (key.hex(), model.replace("/", "-"), r), data.tobytes())
    json.dump(tokens, open("prompt_tokens.json", "w"))


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 5 and sys.argv[1] == "--from-dump":
        from_dump(sys.argv[2], sys.argv[3], sys.argv[4])
        sys.exit(0)
    model_config()
    vllm_store()
    lmcache_stores()
    sglang_pages("sglang", 1)
    sglang_pages("sglang_tp2", 2)
    lmcache_variants()
    np.savez("truth.npz", k=K.astype(np.float32), v=V.astype(np.float32))
