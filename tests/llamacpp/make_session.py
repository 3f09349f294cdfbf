#!/usr/bin/python3
"""Compose a llama.cpp whole-context session file ("ggsn", version 10) from sequence state files
("ggsq", version 3) that node-llama-cpp saved from ONE context with several sequences.

node-llama-cpp exposes only llama_state_seq_save_file, so the test cannot make llama.cpp write a
session file itself; this script writes the bytes llama_state_save_file would have written for
that context, following llama.cpp tag v0.4.0 (the build in node-llama-cpp 3.21.1):

  llama-context.cpp  state_save_file: u32 magic 0x6767736e, u32 version 10, u32 n_token,
                     i32 token[n_token], then state_write_data: u32 len + arch name ("llama"),
                     then the memory's state_write(io) with seq_id = -1.
  llama-kv-cache.cpp state_write: u32 n_stream; per stream u32 cell_count (0: nothing more for
                     that stream), state_write_meta (per cell i32 pos, u32 n_seq_id, i32 seq ids:
                     with seq_id = -1 ALL the cell's sequences), state_write_data (u32 v_trans,
                     u32 n_layer, K per layer, V per layer).

How it is composed, and why that is exact: a context created with n_seq_max = S and the default
kv_unified = false has S streams, and sequence s lives only in stream s (llama-kv-cache.cpp
seq_to_stream). A ggsq file of sequence s therefore holds n_stream = S, cell_count 0 for every
other stream, and for stream s exactly the cells and data that the whole-context save writes for
that stream: every cell of stream s belongs to sequence s alone, so its seq id list is [s] either
way, and state_write_data copies the same cell ranges. The session file is the header, then each
stream's block taken from the one ggsq file in which it is not empty. (A unified cache, where one
cell can carry several sequences, cannot be composed this way; the script refuses inputs whose
non-empty streams overlap.) The token list is that of the ggsq file named by --tokens-from, as a
single-sequence tool (llama-cli's prompt cache) would pass its prompt.

Usage: make_session.py SEQ0.ggsq SEQ1.ggsq ... [--tokens-from I] [--arch llama] -o OUT.ggsn
Cell extensions (M-RoPE / per-layer-embedding models) are not supported: arch llama has none.
"""
import argparse
import os
import struct
import sys

GGSQ_MAGIC, GGSQ_VERSION = 0x67677371, 3
GGSN_MAGIC, GGSN_VERSION = 0x6767736E, 10
# ggml type -> (block bytes, elements per block) for the cache types llama.cpp writes here.
GGML_TYPES = {0: (4, 1), 1: (2, 1), 30: (2, 1), 8: (34, 32)}


class Reader:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.b = f.read()
        self.o, self.path = 0, path

    def take(self, n):
        if n < 0 or self.o + n > len(self.b):
            sys.exit(f"{self.path}: truncated at byte {self.o}")
        v = self.b[self.o:self.o + n]
        self.o += n
        return v

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]


def stream_block(r, cell_count):
    """Skip one non-empty stream after its cell_count; return its bytes (cells + data)."""
    start = r.o
    for _ in range(cell_count):
        r.take(4)  # pos
        r.take(4 * r.u32())  # n_seq_id, seq ids
    v_trans, n_layer = r.u32(), r.u32()
    if v_trans > 1:
        sys.exit(f"{r.path}: v_trans {v_trans}")
    for _ in range(n_layer):  # K: i32 type, u64 row bytes, cell_count rows
        r.take(4)
        r.take(r.u64() * cell_count)
    for _ in range(n_layer):
        t = struct.unpack("<i", r.take(4))[0]
        if v_trans == 0:
            r.take(r.u64() * cell_count)
        else:  # i32 type, u32 element bytes, u32 n_embd_v_gqa, then the transposed values
            el, n_embd = r.u32(), r.u32()
            if t not in GGML_TYPES or GGML_TYPES[t] != (el, 1):
                sys.exit(f"{r.path}: transposed V of type {t} with {el}-byte elements")
            r.take(el * n_embd * cell_count)
    return r.b[start:r.o]


def read_ggsq(path):
    r = Reader(path)
    magic, version = r.u32(), r.u32()
    if (magic, version) != (GGSQ_MAGIC, GGSQ_VERSION):
        sys.exit(f"{path}: not a ggsq v3 file (magic {magic:#x}, version {version})")
    n_token = r.u32()
    tokens = r.take(4 * n_token)
    n_stream = r.u32()
    if n_stream == 0 or n_stream > 4096:
        sys.exit(f"{path}: implausible n_stream {n_stream}")
    streams = []
    for _ in range(n_stream):
        cc = r.u32()
        streams.append((cc, stream_block(r, cc) if cc else b""))
    if r.o != len(r.b):
        sys.exit(f"{path}: {len(r.b) - r.o} bytes after the state")
    return n_token, tokens, streams


def compose(inputs, tokens_from, arch):
    n_streams = {len(s) for _, _, s in inputs}
    if len(n_streams) != 1:
        sys.exit(f"inputs disagree on n_stream: {sorted(n_streams)}")
    n_stream = n_streams.pop()
    out = [struct.pack("<III", GGSN_MAGIC, GGSN_VERSION, inputs[tokens_from][0]), inputs[tokens_from][1]]
    a = arch.encode()
    out.append(struct.pack("<I", len(a)) + a)
    out.append(struct.pack("<I", n_stream))
    for s in range(n_stream):
        full = [(cc, blk) for _, _, streams in inputs for cc, blk in [streams[s]] if cc]
        if len(full) > 1:
            sys.exit(f"stream {s} is not empty in {len(full)} inputs (a unified cache cannot be composed)")
        cc, blk = full[0] if full else (0, b"")
        out.append(struct.pack("<I", cc) + blk)
    return b"".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokens-from", type=int, default=0)
    ap.add_argument("--arch", default="llama")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    inputs = [read_ggsq(p) for p in args.inputs]
    if not 0 <= args.tokens_from < len(inputs):
        sys.exit("--tokens-from out of range")
    data = compose(inputs, args.tokens_from, args.arch)
    tmp = args.output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
