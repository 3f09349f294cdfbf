#!/usr/bin/python3
"""Random-weight GGUF models in the shapes of real architectures, for kvtool's GGUF forward pass
(tests/llamacpp/test_gguf_forward.sh): llama.cpp loads and runs them, kvtool dumps them, and the
two must agree.

Shapes (fewer layers than the real models; a 512-token SentencePiece-style vocabulary that
llama.cpp accepts, as llama2c_to_gguf.py's synth_tokenizer):
  smollm2  llama, SmolLM2-135M's layer: dim 576, 9 heads, 3 KV heads, head_dim 64, hidden 1536,
           theta 100000, tied output
  llama3   llama, GQA 4:1 (8/2 heads, head_dim 64), dim 512, hidden 1024, theta 500000, Llama 3
           RoPE scaling as rope_freqs.weight (convert_hf_to_gguf.py's factors), separate output
  qwen2    qwen2, Qwen2.5's attention: GQA 7:1 (14/2 heads, head_dim 64), Q/K/V biases, NEOX RoPE,
           theta 1000000, dim 896, hidden 1024, tied output
The cache variants of formats/llama-state.md (for llama.cpp to write their states,
tests/llamacpp/test_state_variants.sh; kvtool's forward refuses them), dim 256, 4 heads, 2 KV
heads, head_dim 64, hidden 256, tied output:
  gemma2   sliding window of 16 on layers il % 2 == 0 (gemma2's default pattern 2): llama.cpp keeps
           them in a second (iSWA) cache
  lfm2     attention + short-convolution recurrent layers: head_count_kv per layer, 0 on the odd
           (recurrent) layers; a hybrid memory
  qwen2vl  M-RoPE (rope.dimension_sections 16/8/8/0): 12 more bytes per cell

Weight types: f32, f16, bf16, q8_0 and q4_0 (quantized by llama.cpp's gguf-py, quants.py), q4_k
and q6_k (random blocks: every block is a valid one); a matrix whose rows do not divide into the
type's blocks falls back to q8_0, as llama-quantize falls back. 1-D tensors stay f32.
--vocab-gguf FILE: take the tokenizer (every tokenizer.* key) from another GGUF instead, e.g. the
BPE vocabularies llama.cpp ships for its tokenizer tests (models/ggml-vocab-gpt-2.gguf); the
embedding then has that vocabulary's size.
--twin OUT: also write the same model with every weight dequantized to f32 by gguf-py (the
reference kvtool's dequantization must reproduce exactly).

Usage: make_gguf_models.py --gguf-py DIR --shape S --wtype T [--layers N] [--vocab V | --vocab-gguf F] [--seed S]
                           -o OUT [--twin OUT]
Deterministic for its arguments.
"""
import argparse
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama2c_to_gguf import (ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, T_FLOAT32, T_INT32, T_STRING, gstr, kv_arr,  # noqa: E402
                             kv_f32, kv_str, kv_u32, pad, synth_tokenizer)

SHAPES = {
    "smollm2": dict(arch="llama", dim=576, heads=9, kv=3, hidden=1536, theta=100000.0, tied=True),
    "llama3": dict(arch="llama", dim=512, heads=8, kv=2, hidden=1024, theta=500000.0, tied=False, llama3=True),
    "qwen2": dict(arch="qwen2", dim=896, heads=14, kv=2, hidden=1024, theta=1000000.0, tied=True, bias=True),
    "gemma2": dict(arch="gemma2", dim=256, heads=4, kv=2, hidden=256, theta=10000.0, tied=True, variant=True),
    "lfm2": dict(arch="lfm2", dim=256, heads=4, kv=2, hidden=256, theta=1000000.0, tied=True, variant=True),
    "qwen2vl": dict(arch="qwen2vl", dim=256, heads=4, kv=2, hidden=256, theta=1000000.0, tied=True, bias=True,
                    variant=True),
}
TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "q4_k": 12, "q6_k": 14, "bf16": 30}
BLOCK = {0: 1, 1: 1, 30: 1, 2: 32, 8: 32, 12: 256, 14: 256}
VOCAB = 512  # --vocab: another size (SmolLM2's is 49152)


def llama3_freq_factors(head_dim, theta, factor=8.0, low=1.0, high=4.0, old_ctx=8192):
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors for rope_type llama3."""
    base = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for f in base:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def random_kquant(rng, qtype, rows, cols):
    """Random q4_K / q6_K blocks with small finite scales (ggml-common.h layouts)."""
    nb = rows * cols // 256
    if qtype == 12:  # d, dmin (f16), scales[12], qs[128]
        b = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
        b[:, 0:2] = np.frombuffer(rng.uniform(2e-5, 2e-4, nb).astype(np.float16).tobytes(), np.uint8).reshape(nb, 2)
        b[:, 2:4] = np.frombuffer(rng.uniform(1e-5, 1e-4, nb).astype(np.float16).tobytes(), np.uint8).reshape(nb, 2)
    else:  # ql[128], qh[64], scales[16] (int8), d (f16)
        b = rng.integers(0, 256, size=(nb, 210), dtype=np.uint8)
        b[:, 208:210] = np.frombuffer(rng.uniform(2e-5, 2e-4, nb).astype(np.float16).tobytes(), np.uint8).reshape(nb, 2)
    return b.tobytes()


def encode(quants, rng, a, qtype):
    """(type, bytes, f32 twin) of a row-major matrix a [rows, cols] (ggml ne = [cols, rows])."""
    rows, cols = a.shape if a.ndim == 2 else (1, a.shape[0])
    if a.ndim == 1 or cols % BLOCK[qtype]:
        qtype = 0 if a.ndim == 1 else 8
    if qtype == 0:
        return 0, a.astype("<f4").tobytes(), a.astype(np.float32)
    if qtype == 1:
        h = a.astype("<f2")
        return 1, h.tobytes(), h.astype(np.float32)
    if qtype in (12, 14):
        raw = random_kquant(rng, qtype, rows, cols)
    else:
        raw = quants.quantize(a.astype(np.float32), quants.GGMLQuantizationType(qtype)).tobytes()
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(rows, -1)
    twin = quants.dequantize(blocks, quants.GGMLQuantizationType(qtype)).reshape(rows, cols).astype(np.float32)
    return qtype, raw, twin


def model_tensors(shape, layers, rng):
    s = SHAPES[shape]
    D, H, KV, F, hd = s["dim"], s["heads"], s["kv"], s["hidden"], 64

    def w(*shape_, std=0.05):
        return rng.normal(0, std, size=shape_).astype(np.float32)

    def norm(n):
        return (1 + rng.normal(0, 0.1, size=n)).astype(np.float32)

    t = [("token_embd.weight", w(VOCAB, D, std=0.05))]  # as output.weight: tied models get spread logits
    for i in range(layers):
        b = f"blk.{i}."
        if s["arch"] == "lfm2" and i % 2:  # a short-convolution layer (llama_model_lfm2::load_arch_tensors)
            t += [(b + "attn_norm.weight", norm(D)), (b + "shortconv.conv.weight", w(D, 3)),
                  (b + "shortconv.in_proj.weight", w(3 * D, D)), (b + "shortconv.out_proj.weight", w(D, D)),
                  (b + "ffn_norm.weight", norm(D)), (b + "ffn_gate.weight", w(F, D)), (b + "ffn_up.weight", w(F, D)),
                  (b + "ffn_down.weight", w(D, F))]
            continue
        t += [(b + "attn_norm.weight", norm(D)), (b + "attn_q.weight", w(H * hd, D)), (b + "attn_k.weight", w(KV * hd, D)),
              (b + "attn_v.weight", w(KV * hd, D)), (b + "attn_output.weight", w(D, H * hd))]
        if s["arch"] == "lfm2":
            t += [(b + "attn_q_norm.weight", norm(hd)), (b + "attn_k_norm.weight", norm(hd))]
        if s["arch"] == "gemma2":
            t += [(b + "post_attention_norm.weight", norm(D)), (b + "post_ffw_norm.weight", norm(D))]
        if s.get("bias"):
            t += [(b + "attn_q.bias", w(H * hd, std=0.5)), (b + "attn_k.bias", w(KV * hd, std=0.5)),
                  (b + "attn_v.bias", w(KV * hd, std=0.5))]
        t += [(b + "ffn_norm.weight", norm(D)), (b + "ffn_gate.weight", w(F, D)), (b + "ffn_up.weight", w(F, D)),
              (b + "ffn_down.weight", w(D, F))]
    t.append(("token_embd_norm.weight" if s["arch"] == "lfm2" else "output_norm.weight", norm(D)))
    if not s["tied"]:
        t.append(("output.weight", w(VOCAB, D)))
    if s.get("llama3"):
        t.append(("rope_freqs.weight", llama3_freq_factors(hd, s["theta"])))
    return t


def raw_kvs(reader, keep):
    """The metadata pairs of a gguf-py GGUFReader whose key `keep` accepts, each as the bytes the
    file holds (the reader keeps every part of a field)."""
    return [b"".join(p.tobytes() for p in f.parts) for name, f in reader.fields.items() if keep(name)]


def vocab_from(path, gguf_reader):
    """(size, the tokenizer.* metadata pairs as the file holds them) of a GGUF vocabulary."""
    r = gguf_reader(path)
    return len(r.fields["tokenizer.ggml.tokens"].data), raw_kvs(r, lambda name: name.startswith("tokenizer."))


def metadata(shape, layers, wtype, vocab_kvs=None):
    s = SHAPES[shape]
    a = s["arch"]
    head = [
        kv_str("general.architecture", a),
        kv_str("general.name", f"kvtool-test-{shape}-{wtype}"),
        kv_u32("general.alignment", ALIGNMENT),
        kv_u32(f"{a}.context_length", 8192),
        kv_u32(f"{a}.embedding_length", s["dim"]),
        kv_u32(f"{a}.block_count", layers),
        kv_u32(f"{a}.feed_forward_length", s["hidden"]),
        kv_u32(f"{a}.attention.head_count", s["heads"]),
        kv_f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5 if a == "llama" else 1e-6),
        kv_f32(f"{a}.rope.freq_base", s["theta"]),
        kv_u32(f"{a}.rope.dimension_count", 64),
    ]
    if a == "lfm2":  # per layer: 0 KV heads on a recurrent layer
        head += [kv_arr(f"{a}.attention.head_count_kv", T_INT32, [0 if i % 2 else s["kv"] for i in range(layers)]),
                 kv_u32(f"{a}.shortconv.l_cache", 3)]
    else:
        head.append(kv_u32(f"{a}.attention.head_count_kv", s["kv"]))
    if a == "gemma2":
        head.append(kv_u32(f"{a}.attention.sliding_window", 16))
    if a == "qwen2vl":
        head.append(kv_arr(f"{a}.rope.dimension_sections", T_INT32, [16, 8, 8, 0]))
    if vocab_kvs:
        return head + vocab_kvs
    tokens, scores, types = synth_tokenizer(VOCAB)
    return head + [
        kv_str("tokenizer.ggml.model", "llama"),
        kv_arr("tokenizer.ggml.tokens", T_STRING, tokens),
        kv_arr("tokenizer.ggml.scores", T_FLOAT32, scores),
        kv_arr("tokenizer.ggml.token_type", T_INT32, types),
        kv_u32("tokenizer.ggml.bos_token_id", 1),
        kv_u32("tokenizer.ggml.eos_token_id", 2),
        kv_u32("tokenizer.ggml.unknown_token_id", 0),
    ]


def write(path, kvs, tens):
    """tens: (name, ne, ggml type, bytes)."""
    infos, offset = [], 0
    for name, ne, ty, raw in tens:
        infos.append(gstr(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ty, offset))
        offset += len(raw) + pad(len(raw))
    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tens), len(kvs)) + b"".join(kvs) + b"".join(infos)
    with open(path + ".tmp", "wb") as f:
        f.write(head + b"\0" * pad(len(head)))
        for _, _, _, raw in tens:
            f.write(raw + b"\0" * pad(len(raw)))
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--wtype", choices=sorted(TYPES), required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--vocab-gguf", help="take the tokenizer from this GGUF")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--twin")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    from gguf import quants  # noqa: E402  (llama.cpp's own reference quantization)
    from gguf import GGUFReader  # noqa: E402
    from gguf.constants import GGMLQuantizationType  # noqa: E402
    quants.GGMLQuantizationType = GGMLQuantizationType
    global VOCAB
    VOCAB, vocab_kvs = (args.vocab, None) if not args.vocab_gguf else vocab_from(args.vocab_gguf, GGUFReader)
    rng = np.random.default_rng(args.seed)
    out, twin = [], []
    for name, a in model_tensors(args.shape, args.layers, rng):
        ty, raw, f32 = encode(quants, rng, a, TYPES[args.wtype] if a.ndim == 2 else 0)
        ne = list(reversed(a.shape))
        out.append((name, ne, ty, raw))
        twin.append((name, ne, 0, f32.astype("<f4").tobytes()))
    kvs = metadata(args.shape, args.layers, args.wtype, vocab_kvs)
    write(args.output, kvs, out)
    if args.twin:
        write(args.twin, kvs, twin)


if __name__ == "__main__":
    main()
