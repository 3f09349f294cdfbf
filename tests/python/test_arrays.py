"""kvtool._arrays: what reaches the bindings is C-contiguous float32/int64, without a copy when the
input already is float32 C-contiguous (NumPy or torch), and every bad input is a UsageError."""
import sys

import numpy as np

import kvtool
from kvtool._arrays import as_float32, as_int64

try:
    import torch
except ImportError:  # the torch checks need Debian's python3-torch; the NumPy ones run anyway
    torch = None


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def expect_usage(fn, *needles):
    try:
        fn()
    except kvtool.UsageError as e:
        check(e.reason == "USAGE" and e.exit_code == 2, f"reason {e.reason}/{e.exit_code}")
        for n in needles:
            check(n in str(e), f"message {str(e)!r} lacks {n!r}")
        return e
    sys.exit(f"FAIL: no UsageError (expected one mentioning {needles})")


class DLPackOnly:
    """A DLPack producer that is neither an ndarray nor a torch tensor (e.g. another framework)."""

    def __init__(self, a, device=1):
        self.a, self.device = a, device

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return (self.device, 0)


# --- NumPy: float32 C-contiguous passes through untouched ---------------------------------------
a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
check(as_float32(a, "k") is a, "float32 C-contiguous array was not returned as is")
ro = np.arange(8, dtype=np.float32)
ro.flags.writeable = False  # e.g. np.load(mmap_mode="r") or a frozen buffer: still no copy
check(as_float32(ro, "k") is ro, "read-only float32 array copied")
view = np.arange(48, dtype=np.float32).reshape(2, 2, 3, 4)[1]  # a contiguous view: no copy either
check(np.shares_memory(as_float32(view, "k"), view), "contiguous view copied")

# Everything else is converted once, to the same values, C-contiguous.
for x in (a.astype(np.float64), a.astype(np.float16), a.astype(np.int32), a.astype(">f4"),
          np.asfortranarray(a), a.transpose(0, 2, 1)):
    y = as_float32(x, "k")
    check(y.dtype == np.float32 and y.dtype.isnative and y.flags.c_contiguous, f"{x.dtype} not converted")
    check(np.array_equal(y, np.asarray(x, dtype=np.float32)), f"{x.dtype} values changed")
    check(not np.shares_memory(y, x), f"{x.dtype}/{x.strides} shared memory although converted")
buf = np.zeros(4 * 24 + 1, dtype=np.uint8)
misaligned = np.frombuffer(buf.data, dtype=np.float32, count=24, offset=1)
check(not misaligned.flags.aligned, "test setup: expected a misaligned array")
check(as_float32(misaligned, "k").flags.aligned, "misaligned float32 passed through")
check(np.array_equal(as_float32([[1, 2], [3, 4]], "k"), [[1, 2], [3, 4]]), "nested list")
dl = as_float32(DLPackOnly(a), "k")
check(np.shares_memory(dl, a), "a float32 DLPack producer on the CPU was copied")

# --- Bad inputs: UsageError naming the argument --------------------------------------------------
expect_usage(lambda: as_float32(a, "keys", ndim=4), "keys", "4 dimensions")
expect_usage(lambda: as_float32([[1, 2], [3]], "k"), "k")  # ragged
expect_usage(lambda: as_float32(np.ones(3, dtype=bool), "v"), "v", "bool")
expect_usage(lambda: as_float32(np.ones(3, dtype=np.complex64), "v"), "complex")
expect_usage(lambda: as_float32(["a", "b"], "q"), "q")
expect_usage(lambda: as_float32(np.array([object()]), "q"), "object")
expect_usage(lambda: as_float32(None, "k"), "k")
expect_usage(lambda: as_float32(DLPackOnly(a, device=2), "k"), "CPU")  # kDLCUDA

# --- as_int64 -----------------------------------------------------------------------------------
ids = np.arange(5, dtype=np.int64)
check(as_int64(ids, "tokens") is ids, "int64 array copied")
check(as_int64([3, 1, 2], "tokens").tolist() == [3, 1, 2], "list of ints")
check(as_int64(np.arange(4, dtype=np.int32), "t").dtype == np.int64, "int32 -> int64")
check(as_int64(np.array([1.0, 2.0]), "t").tolist() == [1, 2], "whole floats")
check(as_int64([], "t").shape == (0,), "empty list")
expect_usage(lambda: as_int64([1.5], "positions"), "positions", "whole")
expect_usage(lambda: as_int64([np.nan], "positions"), "whole")
expect_usage(lambda: as_int64([[1, 2]], "tokens"), "tokens", "1 dimensions")
expect_usage(lambda: as_int64(np.array([2**64 - 1], dtype=np.uint64), "t"), "int64")
expect_usage(lambda: as_int64([1e30], "t"), "int64")
expect_usage(lambda: as_int64("abc", "t"), "t")

# --- torch CPU tensors ----------------------------------------------------------------------------
if torch is None:
    print("torch checks skipped: python3-torch is not installed")
else:
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    y = as_float32(t, "k")
    check(np.shares_memory(y, t.numpy()), "float32 contiguous tensor was copied")
    g = torch.ones(2, 3, requires_grad=True)
    check(np.shares_memory(as_float32(g, "k"), g.detach().numpy()), "requires_grad tensor copied")
    big = torch.randn(2, 3, 5, 4)
    check(np.shares_memory(as_float32(big[1], "k"), big.numpy()), "batch-row view of a tensor copied")
    for dt in (torch.float16, torch.bfloat16, torch.float64, torch.int64):
        x = big.to(dt)
        y = as_float32(x, "k")
        check(y.dtype == np.float32 and y.flags.c_contiguous, f"{dt} not float32")
        check(np.array_equal(y, x.float().numpy()), f"{dt} values differ from torch's own widening")
    tr = big.transpose(1, 2)  # non-contiguous
    check(np.array_equal(as_float32(tr, "k"), tr.contiguous().numpy()), "transposed tensor")
    check(np.array_equal(as_float32(-big, "k"), (-big).numpy()), "negated view")
    check(as_int64(torch.tensor([5, 6, 7]), "tokens").tolist() == [5, 6, 7], "int tensor ids")
    expect_usage(lambda: as_float32(torch.ones(3, device="meta"), "k"), "k", "CPU")
    expect_usage(lambda: as_float32(torch.ones(3, dtype=torch.bool), "k"), "bool")
    expect_usage(lambda: as_float32(torch.ones(3, dtype=torch.complex64), "k"), "complex")
    expect_usage(lambda: as_float32(torch.ones(2, 2).to_sparse(), "k"), "sparse")

print("ok: test_arrays")
