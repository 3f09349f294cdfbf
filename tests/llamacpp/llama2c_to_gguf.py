#!/usr/bin/python3
"""Convert a llama2.c legacy checkpoint (+ optional llama2.c tokenizer) to a GGUF v3 file that
llama.cpp loads as architecture "llama", all tensors f32.

Used by tests/llamacpp/test_llamacpp_state.sh to run the shared llama2.c models
(../shared/models/README.md describes the checkpoint and tokenizer layouts) in real llama.cpp.
Keys and tensor names follow llama.cpp's gguf-py constants and its
examples/convert-llama2c-to-ggml at tag v0.4.0 (the build node-llama-cpp 3.21.1 bundles).

No Q/K permutation: llama2.c rotates adjacent pairs (i, i+1), which is llama.cpp's "norm" RoPE
for arch "llama" when the weights are stored in their original row order. The comparison test
checks this (the post-RoPE keys of llama.cpp equal kvtool's llama2.c dump).

Usage: llama2c_to_gguf.py CHECKPOINT.bin [--tokenizer TOK.bin] -o OUT.gguf
The output is deterministic (same input, same bytes).
"""
import argparse
import os
import re
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT

# GGUFValueType
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9
# llama.cpp TokenType
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_BYTE = 1, 2, 3, 6
GGML_TYPE_F32 = 0
BOS_ID, EOS_ID, UNK_ID = 1, 2, 0


class Checkpoint:
    """The llama2.c legacy layout: 7 int32, then f32 arrays (models/README.md)."""

    def __init__(self, path):
        raw = np.fromfile(path, dtype="<u1")
        if raw.size < 28:
            sys.exit(f"{path}: too short for a llama2.c header")
        hdr = np.frombuffer(raw[:28].tobytes(), dtype="<i4")
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = (int(x) for x in hdr)
        self.shared = vocab > 0
        vocab = abs(vocab)
        if min(dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len) <= 0 or dim % n_heads or n_heads % n_kv:
            sys.exit(f"{path}: implausible header {hdr.tolist()}")
        self.dim, self.hidden, self.n_layers = dim, hidden, n_layers
        self.n_heads, self.n_kv, self.vocab, self.seq_len = n_heads, n_kv, vocab, seq_len
        head_dim = dim // n_heads
        kv_dim = n_kv * head_dim
        floats = np.frombuffer(raw[28:].tobytes(), dtype="<f4")
        self._f, self._o = floats, 0
        L = n_layers
        self.tok = self._take(vocab, dim)
        self.rms_att = self._take(L, dim)
        self.wq = self._take(L, dim, dim)
        self.wk = self._take(L, kv_dim, dim)
        self.wv = self._take(L, kv_dim, dim)
        self.wo = self._take(L, dim, dim)
        self.rms_ffn = self._take(L, dim)
        self.w1 = self._take(L, hidden, dim)
        self.w2 = self._take(L, dim, hidden)
        self.w3 = self._take(L, hidden, dim)
        self.rms_final = self._take(dim)
        self._take(seq_len, head_dim // 2)  # freq_cis_real (unused: llama.cpp computes RoPE)
        self._take(seq_len, head_dim // 2)  # freq_cis_imag
        self.wcls = None if self.shared else self._take(vocab, dim)

    def _take(self, *shape):
        n = int(np.prod(shape))
        if self._o + n > self._f.size:
            sys.exit("checkpoint is truncated")
        a = self._f[self._o:self._o + n].reshape(shape)
        self._o += n
        return a


def read_tokenizer(path, vocab):
    """llama2.c tokenizer: int32 max_token_length, then per token f32 score, int32 len, bytes."""
    with open(path, "rb") as f:
        data = f.read()
    off = 4
    tokens, scores, types = [], [], []
    for i in range(vocab):
        if off + 8 > len(data):
            sys.exit(f"{path}: truncated at token {i}")
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        if n < 0 or off + n > len(data):
            sys.exit(f"{path}: bad length at token {i}")
        text = data[off:off + n]
        off += n
        tokens.append(text)
        scores.append(score)
    for i, text in enumerate(tokens):
        # Same classification as llama.cpp's examples/convert-llama2c-to-ggml.
        if i == UNK_ID:
            tokens[i], t = b"<unk>", TOK_UNKNOWN
        elif i == BOS_ID:
            tokens[i], t = b"<s>", TOK_CONTROL
        elif i == EOS_ID:
            tokens[i], t = b"</s>", TOK_CONTROL
        elif not text:
            t = TOK_CONTROL
        elif re.fullmatch(rb"<0x[0-9A-F]{2}>", text):
            t = TOK_BYTE
        else:
            t = TOK_NORMAL
            # SentencePiece stores spaces as U+2581 (llama_escape_whitespaces).
            tokens[i] = text.replace(b" ", "\u2581".encode())
        types.append(t)
    return tokens, scores, types


def synth_tokenizer(vocab):
    """A vocabulary for checkpoints without a tokenizer file (babyllama361): unk, BOS, EOS, the
    256 byte tokens <0x00>..<0xFF> where they fit (llama.cpp's SentencePiece vocabulary looks
    bytes up, e.g. the newline, and aborts on a missing one), then one distinct placeholder per
    remaining id. Enough for llama.cpp to load the model and run token ids."""
    tokens = [b"<unk>", b"<s>", b"</s>"]
    types = [TOK_UNKNOWN, TOK_CONTROL, TOK_CONTROL]
    if vocab >= 3 + 256:
        tokens += [b"<0x%02X>" % i for i in range(256)]
        types += [TOK_BYTE] * 256
    tokens += [b"<t%d>" % i for i in range(len(tokens), vocab)]
    types += [TOK_NORMAL] * (vocab - len(types))
    return tokens[:vocab], [0.0] * vocab, types[:vocab]


def gstr(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def kv_u32(key, v):
    return gstr(key) + struct.pack("<II", T_UINT32, v)


def kv_f32(key, v):
    return gstr(key) + struct.pack("<If", T_FLOAT32, v)


def kv_str(key, v):
    return gstr(key) + struct.pack("<I", T_STRING) + gstr(v)


def kv_arr(key, elem_type, items):
    out = gstr(key) + struct.pack("<IIQ", T_ARRAY, elem_type, len(items))
    if elem_type == T_STRING:
        return out + b"".join(gstr(x) for x in items)
    fmt = {T_FLOAT32: "<f", T_INT32: "<i"}[elem_type]
    return out + np.asarray(items, dtype=fmt).tobytes()


def metadata(ck, tok):
    tokens, scores, types = tok
    head_dim = ck.dim // ck.n_heads
    return [
        kv_str("general.architecture", "llama"),
        kv_str("general.name", "llama2c"),
        kv_u32("general.alignment", ALIGNMENT),
        kv_u32("llama.context_length", ck.seq_len),
        kv_u32("llama.embedding_length", ck.dim),
        kv_u32("llama.block_count", ck.n_layers),
        kv_u32("llama.feed_forward_length", ck.hidden),
        kv_u32("llama.attention.head_count", ck.n_heads),
        kv_u32("llama.attention.head_count_kv", ck.n_kv),
        kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
        kv_f32("llama.rope.freq_base", 10000.0),
        kv_u32("llama.rope.dimension_count", head_dim),
        kv_str("tokenizer.ggml.model", "llama"),
        kv_arr("tokenizer.ggml.tokens", T_STRING, tokens),
        kv_arr("tokenizer.ggml.scores", T_FLOAT32, scores),
        kv_arr("tokenizer.ggml.token_type", T_INT32, types),
        kv_u32("tokenizer.ggml.bos_token_id", BOS_ID),
        kv_u32("tokenizer.ggml.eos_token_id", EOS_ID),
        kv_u32("tokenizer.ggml.unknown_token_id", UNK_ID),
    ]


def tensors(ck):
    """(name, row-major array). A llama2.c matrix [out, in] is ggml ne = [in, out]: same bytes."""
    out = [("token_embd.weight", ck.tok)]
    for i in range(ck.n_layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", ck.rms_att[i]), (b + "attn_q.weight", ck.wq[i]),
                (b + "attn_k.weight", ck.wk[i]), (b + "attn_v.weight", ck.wv[i]),
                (b + "attn_output.weight", ck.wo[i]), (b + "ffn_norm.weight", ck.rms_ffn[i]),
                (b + "ffn_gate.weight", ck.w1[i]), (b + "ffn_down.weight", ck.w2[i]),
                (b + "ffn_up.weight", ck.w3[i])]
    out.append(("output_norm.weight", ck.rms_final))
    if ck.wcls is not None:
        out.append(("output.weight", ck.wcls))
    return out


def pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def write_gguf(path, kvs, tens):
    infos, offset = [], 0
    for name, a in tens:
        ne = list(reversed(a.shape))
        infos.append(gstr(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) +
                     struct.pack("<IQ", GGML_TYPE_F32, offset))
        offset += a.nbytes + pad(a.nbytes)
    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tens), len(kvs)) + b"".join(kvs) + b"".join(infos)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head + b"\0" * pad(len(head)))
        for _, a in tens:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
            f.write(b"\0" * pad(a.nbytes))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--tokenizer")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    ck = Checkpoint(args.checkpoint)
    tok = read_tokenizer(args.tokenizer, ck.vocab) if args.tokenizer else synth_tokenizer(ck.vocab)
    write_gguf(args.output, metadata(ck, tok), tensors(ck))


if __name__ == "__main__":
    main()
