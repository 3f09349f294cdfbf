#!/usr/bin/python3
"""Chunk and page files of LMCache and SGLang HiCache, byte for byte as those stacks write them, for
tests/cli/test_import_chunks.sh (formats/lmcache.md, formats/sglang-hicache.md name the versions).

Run in an empty folder with Debian's /usr/bin/python3 (numpy, torch). Writes, per case, a folder of
input files whose sorted names are the token order, and truth_<case>.npz with the K and V the
import must reproduce, [L, H, T, d] float32 (the values are drawn in the source dtype, so f16 and
bf16 are exact by construction). Then hostile variants (bad_*).
"""
import json
import os
import struct

import numpy as np
import torch

L, H, D = 3, 2, 8
CHUNK = 16  # --chunk-tokens of the LMCache cases
T_LMC = 37  # 16 + 16 + 5: a partial last chunk
PAGE = 4  # --page-size of the SGLang cases
T_SGL = 12  # 3 full pages
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
gen = torch.Generator().manual_seed(7)


def truth(name, T, dtype):
    """K, V [L, H, T, d] in `dtype` (post-RoPE keys as a model computes them), saved as float32."""
    k = torch.randn(L, H, T, D, generator=gen).to(dtype)
    v = torch.randn(L, H, T, D, generator=gen).to(dtype)
    np.savez("truth_%s.npz" % name, k=k.float().numpy(), v=v.float().numpy())
    return k, v


def raw_bytes(t):
    # memory_obj.byte_array / tensor.view(torch.uint8): the tensor's bytes in C order, host order.
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def folder(name):
    os.makedirs(name, exist_ok=True)
    return name


# ---- LMCache v1 (lmcache/v1/memory_management.py MemoryFormat; gpu_connector.py shapes) --------
def lmcache_v1_objects(k, v, fmt, chunk=CHUNK):
    """The memory objects the GPU connector fills for each chunk: KV_2LTD [2, L, T, hidden] with all
    layers; KV_T2D [T, 2, hidden] and KV_2TD [2, T, hidden] one per layer (layerwise connectors).
    Yields (chunk index, layer or None, tensor)."""
    T = k.shape[2]
    kv = torch.stack([k, v]).permute(0, 1, 3, 2, 4).reshape(2, L, T, H * D)  # [2, L, T, hidden]
    for c, start in enumerate(range(0, T, chunk)):
        end = min(start + chunk, T)
        if fmt == "KV_2LTD":
            yield c, None, kv[:, :, start:end]
        for layer in range(L):
            if fmt == "KV_T2D":
                yield c, layer, kv[:, layer, start:end].permute(1, 0, 2)
            elif fmt == "KV_2TD":
                yield c, layer, kv[:, layer, start:end]


def write_lmcache_raw(name, dtype, fmt, chunk=CHUNK):
    # LocalDiskBackend.async_save_bytes_to_disk: write_file(memory_obj.byte_array, path), path
    # _key_to_path(key) = key.to_string().replace("/", "-") + ".pt"; no header (shape, dtype and
    # format stay in the in-memory index, DiskCacheMetadata).
    k, v = truth(name, T_LMC, dtype)
    d = folder(name)
    for c, layer, t in lmcache_v1_objects(k, v, fmt, chunk):
        tag = "c%03d" % c + ("" if layer is None else "_l%02d" % layer)
        with open(os.path.join(d, tag + ".pt"), "wb") as f:
            f.write(raw_bytes(t))


DTYPE_TO_INT = {torch.float16: 2, torch.bfloat16: 3, torch.float32: 4}  # lmcache/v1/protocol.py
KV_2LTD = 1  # MemoryFormat.KV_2LTD.value


def fs_header(length, fmt, dtype_code, shape):
    # RemoteMetadata.serialize(): struct.pack("iiiiiii", length, fmt.value, DTYPE_TO_INT[dtype],
    # shape[0], shape[1], shape[2], shape[3]) -- native order and size ('@'): 28 bytes.
    return struct.pack("iiiiiii", length, fmt, dtype_code, *shape)


def write_lmcache_fs(name, dtype):
    # FSConnector.put (save_chunk_meta): metadata.serialize() then memory_obj.byte_array, into
    # key.to_string().replace("/", "-") + ".data".
    k, v = truth(name, T_LMC, dtype)
    d = folder(name)
    for c, _, t in lmcache_v1_objects(k, v, "KV_2LTD"):
        body = raw_bytes(t)
        with open(os.path.join(d, "c%03d.data" % c), "wb") as f:
            f.write(fs_header(len(body), KV_2LTD, DTYPE_TO_INT[dtype], list(t.shape)) + body)


# ---- LMCache v0 (tag v0.1.2-alpha: lmcache/cache_engine.py, storage_backend/local_backend.py) -----
ST_DTYPE = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32"}


def save_file(tensors, path):
    """safetensors.torch.save_file: u64 little-endian header length, the JSON header (tensors sorted
    by dtype alignment then name; padded with spaces to a multiple of 8), the raw bytes."""
    header, blob = {}, b""
    for name, t in tensors.items():
        raw = raw_bytes(t)
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)


def write_lmcache_v0(name, dtype, fmt):
    k, v = truth(name, T_LMC, dtype)
    d = folder(name)
    # The engine's input: per layer (k, v), vllm [T, H, d] or huggingface [H, T, d].
    if fmt == "vllm":
        kv_tensors_raw = [(k[l].permute(1, 0, 2), v[l].permute(1, 0, 2)) for l in range(L)]
    else:
        kv_tensors_raw = [(k[l], v[l]) for l in range(L)]
    # _tuple_kv_to_blob: stack K of every layer and V of every layer, stack those, permute
    # [1, 0, 2, 3, 4] -> [num_layer, 2, ...].
    blob = torch.stack((torch.stack([x[0] for x in kv_tensors_raw]), torch.stack([x[1] for x in kv_tensors_raw])))
    blob = blob.permute([1, 0, 2, 3, 4])
    # _slice_kv_at(0, ...): torch.split along the token axis (2 for vllm, 3 for huggingface), each
    # chunk .contiguous(); LMCLocalDiskBackend.put_blocking: save_file({"kv_chunk": kv_chunk}, path).
    dim = 2 if fmt == "vllm" else 3
    for c, chunk in enumerate(torch.split(blob, CHUNK, dim=dim)):
        save_file({"kv_chunk": chunk.contiguous()}, os.path.join(d, "c%03d.pt" % c))


# ---- SGLang HiCache (memory_pool_host.py MHATokenToKVPoolHost; hicache_storage.py HiCacheFile) -----
def write_sglang(name, dtype, layout):
    k, v = truth(name, T_SGL, dtype)
    d = folder(name)
    size = 8 * PAGE  # host pool slots
    page_num = size // PAGE
    # init_kv_buffer()
    if layout == "layer_first":
        kv_buffer = torch.zeros((2, L, size, H, D), dtype=dtype)
    elif layout == "page_first":
        kv_buffer = torch.zeros((2, size, L, H, D), dtype=dtype)
    else:
        kv_buffer = torch.zeros((2, page_num, L, PAGE, H, D), dtype=dtype)
    # The request's pages sit at host pages 5, 1 and 6 (alloc() hands out free slots in any order).
    host_pages = [5, 1, 6]
    for p, hp in enumerate(host_pages):
        for j in range(PAGE):
            t, slot = p * PAGE + j, hp * PAGE + j
            for kvi, x in enumerate((k, v)):
                row = x[:, :, t]  # [L, H, d]
                if layout == "layer_first":
                    kv_buffer[kvi, :, slot] = row
                elif layout == "page_first":
                    kv_buffer[kvi, slot] = row
                else:
                    kv_buffer[kvi, hp, :, j] = row
    for p, hp in enumerate(host_pages):
        index = hp * PAGE  # get_data_page(index): index is the page's first host slot
        if layout == "layer_first":
            data_page = kv_buffer[:, :, index:index + PAGE, :, :]
        elif layout == "page_first":
            data_page = kv_buffer[:, index:index + PAGE, :, :, :]
        else:
            real_index = index // PAGE
            data_page = kv_buffer[:, real_index:real_index + 1, :, :, :, :]
        data_page = data_page.flatten()
        # HiCacheFile.set: value.contiguous().view(dtype=torch.uint8).numpy().tofile(tmp_path), then
        # os.replace(tmp_path, <key><suffix>.bin).
        data_page.contiguous().view(dtype=torch.uint8).numpy().tofile(os.path.join(d, "p%03d.bin" % p))


def hostile():
    """Variants of good files that lie or break the rules; the test names the reason for each."""
    os.makedirs("bad", exist_ok=True)
    def rd(p):
        return open(p, "rb").read()
    def wr(p, b):
        open(os.path.join("bad", p), "wb").write(b)
    c0 = rd("fs_f16/c000.data")
    length, fmt, dt, s0, s1, s2, s3 = struct.unpack("iiiiiii", c0[:28])
    body = c0[28:]
    wr("fs_short_header.data", c0[:10])
    wr("fs_trailing.data", c0 + b"\0\0")
    wr("fs_truncated.data", c0[:-2])
    # The header claims more tokens than the file holds (length consistent with the claim).
    big = 2 * s1 * 4096 * s3 * 2
    wr("fs_claims_more.data", fs_header(big, fmt, dt, [s0, s1, 4096, s3]) + body)
    wr("fs_length_lie.data", fs_header(length + 2, fmt, dt, [s0, s1, s2, s3]) + body)
    wr("fs_huge.data", fs_header(2**31 - 1, fmt, dt, [2, 2**31 - 1, 2**31 - 1, 2**31 - 1]) + body)
    wr("fs_fmt9.data", fs_header(length, 9, dt, [s0, s1, s2, s3]) + body)
    wr("fs_mla.data", fs_header(length, 6, dt, [s0, s1, s2, s3]) + body)
    wr("fs_fp8.data", fs_header(length // 2, fmt, 7, [s0, s1, s2, s3]) + body[: length // 2])
    wr("fs_dtype0.data", fs_header(length, fmt, 0, [s0, s1, s2, s3]) + body)
    wr("fs_shape0.data", fs_header(length, fmt, dt, [3, s1, s2, s3]) + body)
    # Raw chunks: not a whole number of tokens; a middle chunk one token short.
    r1 = rd("raw2ltd_bf16/c001.pt")
    wr("raw_odd.pt", r1[:-2])
    kv = np.frombuffer(r1, np.uint16).reshape(2, L, CHUNK, H * D)
    wr("raw_short.pt", np.ascontiguousarray(kv[:, :, : CHUNK - 1]).tobytes())
    # v0: another tensor name, a wrong rank, an integer dtype, two tensors.
    t = torch.zeros(L, 2, 4, H, D)
    save_file({"kv": t}, "bad/v0_name.pt")
    save_file({"kv_chunk": t[0]}, "bad/v0_rank.pt")
    save_file({"kv_chunk": t, "extra": t}, "bad/v0_two.pt")
    save_file({"kv_chunk": torch.zeros(L, 2, 4, H + 1, D)}, "bad/v0_heads.pt")
    st = bytearray(rd("v0_vllm_f32/c000.pt"))
    st[st.index(b'"F32"') + 1:st.index(b'"F32"') + 4] = b"I32"
    wr("v0_int.pt", bytes(st))
    np.save("bad/v0.npy", np.zeros((L, 2, 4, H, D), np.float32))
    # SGLang pages: short and long by one element, and empty.
    p0 = rd("sgl_layer_first_f16/p000.bin")
    wr("sgl_short.bin", p0[:-2])
    wr("sgl_long.bin", p0 + b"\0\0")
    wr("sgl_empty.bin", b"")
    # A raw f32 chunk whose values do not fit float16 (refused for an f16 dump, not saturated).
    np.full((2, L, 4, H * D), 1e6, np.float32).tofile("bad/raw_big.pt")
    # NaN in a value (f16 0x7e00), inside an otherwise good page.
    wr("sgl_nan.bin", p0[:10] + b"\x00\x7e" + p0[12:])


def main():
    write_lmcache_raw("raw2ltd_bf16", torch.bfloat16, "KV_2LTD")
    write_lmcache_raw("raw2ltd_f32", torch.float32, "KV_2LTD")
    write_lmcache_raw("rawt2d_f16", torch.float16, "KV_T2D")
    write_lmcache_raw("raw2td_f32", torch.float32, "KV_2TD")
    write_lmcache_raw("rawt2d_many_f16", torch.float16, "KV_T2D", chunk=1)  # 37 x 3 files
    write_lmcache_fs("fs_f16", torch.float16)
    write_lmcache_fs("fs_bf16", torch.bfloat16)
    write_lmcache_v0("v0_vllm_f32", torch.float32, "vllm")
    write_lmcache_v0("v0_hf_bf16", torch.bfloat16, "huggingface")
    write_sglang("sgl_layer_first_f16", torch.float16, "layer_first")
    write_sglang("sgl_page_first_bf16", torch.bfloat16, "page_first")
    write_sglang("sgl_page_first_direct_f32", torch.float32, "page_first_direct")
    hostile()
    json.dump({"model_artifact_sha256": "cd" * 32, "rope_config": {"theta": 10000.0, "pairing": "half"},
               "tenant_namespace": "team-c"}, open("meta.json", "w"))


if __name__ == "__main__":
    main()
