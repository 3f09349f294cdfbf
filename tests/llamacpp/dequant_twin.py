#!/usr/bin/python3
"""The f32 twin of a GGUF file: the same metadata, every tensor dequantized to float32 by llama.cpp's
gguf-py (quants.py, its reference of ggml's dequantize_row_*). kvtool's dump of a quantized model
must equal, bit for bit, its dump of the twin (tests/llamacpp/test_gguf_forward.sh); used on the
files llama.cpp's own quantizer wrote.

Usage: dequant_twin.py --gguf-py DIR IN.gguf OUT.gguf [--types]   (--types: print the tensor types)
"""
import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama2c_to_gguf import ALIGNMENT  # noqa: E402
from make_gguf_models import raw_kvs, write  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--types", action="store_true", help="print how many tensors have each ggml type")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    from gguf import GGUFReader, quants  # noqa: E402
    r = GGUFReader(args.input)
    kvs = raw_kvs(r, lambda name: not name.startswith("GGUF."))  # every pair but the reader's own header fields
    assert int(r.alignment) == ALIGNMENT, r.alignment
    out, counts = [], collections.Counter()
    for t in r.tensors:
        counts[t.tensor_type.name.lower()] += 1
        ne = [int(n) for n in t.shape]
        f32 = quants.dequantize(t.data, t.tensor_type).astype("<f4")
        assert f32.size == int(np.prod(ne)), (t.name, f32.shape, ne)
        out.append((t.name, ne, 0, f32.tobytes()))
    write(args.output, kvs, out)
    if args.types:
        print(" ".join("%s:%d" % kv for kv in sorted(counts.items())))


if __name__ == "__main__":
    main()
