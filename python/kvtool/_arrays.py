"""Conversion of user arrays (NumPy arrays, PyTorch CPU tensors, DLPack producers, nested lists)
into the C-contiguous float32 / int64 NumPy arrays the bindings take.

No copy is made when the input already is C-contiguous, aligned, native-order float32 (a NumPy
array, or a torch tensor, whose memory NumPy then shares); anything else is converted once. torch
is never imported here: tensors are recognised by their methods, so ``import kvtool`` stays cheap.
"""
import numpy as np

from .errors import UsageError

__all__ = ["as_float32", "as_int64"]

# DLPack device types that are host memory (kDLCPU, kDLCUDAHost pinned, kDLROCMHost).
_HOST_DLPACK_DEVICES = (1, 3, 11)
# dtype kinds accepted as numbers: floats, signed and unsigned integers (not bool, complex, objects).
_NUMERIC_KINDS = "fiu"


def _usage(msg):
    return UsageError(msg, "USAGE", 2)


def _is_torch_tensor(x):
    # torch.Tensor without importing torch: the class lives in module "torch" and has these methods.
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "numpy")


def _from_torch(x, name):
    if x.device.type != "cpu":
        raise _usage(f"{name} is a torch tensor on {x.device}; move it to the CPU first ({name}.cpu())")
    t = x.detach()  # a tensor that requires grad refuses .numpy(); detach() shares the memory
    if str(t.layout) != "torch.strided":
        raise _usage(f"{name} is a sparse torch tensor; pass a dense one ({name}.to_dense())")
    if t.is_complex() or not (t.is_floating_point() or str(t.dtype).startswith(("torch.int", "torch.uint"))):
        raise _usage(f"{name} has dtype {t.dtype}; expected a floating-point or integer tensor")
    if str(t.dtype) == "torch.bfloat16":  # NumPy has no bfloat16: widen in torch (exact)
        t = t.float()
    if hasattr(t, "resolve_conj"):  # lazily negated/conjugated views cannot be shared
        t = t.resolve_conj().resolve_neg()
    return t.numpy()  # shares the tensor's memory


def _to_ndarray(x, name):
    """Any supported input as an np.ndarray, sharing memory wherever possible."""
    if isinstance(x, np.ndarray):
        return x
    if _is_torch_tensor(x):
        return _from_torch(x, name)
    if hasattr(x, "__dlpack_device__") and hasattr(x, "__dlpack__"):
        dev = x.__dlpack_device__()[0]
        if int(dev) not in _HOST_DLPACK_DEVICES:
            raise _usage(f"{name} lives on a device (DLPack device type {int(dev)}); move it to the CPU first")
        try:
            return np.from_dlpack(x)
        except (TypeError, ValueError, RuntimeError, BufferError):
            pass  # e.g. a dtype NumPy's DLPack import lacks: fall back to the array protocols
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise _usage(f"{name} cannot be read as an array ({type(x).__name__}): {e}") from None
    if a.dtype == object:  # NumPy wraps anything it cannot read (None, a dict, a generator) as one object
        if not isinstance(x, (list, tuple)):
            raise _usage(f"{name} must be a NumPy array, a torch tensor or a nested list of numbers, "
                         f"got {type(x).__name__}")
        raise _usage(f"{name} holds items that are not numbers (None, strings, objects or integers beyond "
                     "64 bits)")
    return a


def _check_numeric(a, name, expected="floating-point numbers"):
    if a.dtype.kind not in _NUMERIC_KINDS:
        raise _usage(f"{name} has dtype {a.dtype}; expected {expected}")


def _check_ndim(a, name, ndim):
    if ndim is not None and a.ndim != ndim:
        raise _usage(f"{name} must have {ndim} dimensions, got shape {tuple(a.shape)}")


def as_float32(x, name, ndim=None):
    """``x`` as a C-contiguous, aligned, native-order float32 ``np.ndarray``.

    Accepts NumPy arrays, PyTorch CPU tensors (also with ``requires_grad``; bfloat16, float16 and
    float64 are converted), other DLPack producers on the CPU and nested lists. Returns ``x``'s own
    memory (no copy) when it already is C-contiguous float32. Raises ``kvtool.UsageError`` naming
    ``name`` for a wrong number of dimensions (``ndim``), a non-numeric dtype (bool, complex,
    strings, objects, ragged lists) or a tensor on a GPU ("move it to the CPU first").
    """
    a = _to_ndarray(x, name)
    _check_numeric(a, name)
    _check_ndim(a, name, ndim)
    if a.dtype == np.float32 and a.dtype.isnative and a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.require(a, dtype=np.float32, requirements=["C", "A"])  # copies: contiguous, aligned, native


def as_int64(x, name):
    """``x`` as a 1-D C-contiguous int64 ``np.ndarray`` (token ids, positions).

    Accepts what :func:`as_float32` accepts, with integer values: an integer dtype, or floats that
    are all whole numbers; an empty sequence is an empty array. Raises ``kvtool.UsageError`` naming
    ``name`` otherwise (wrong dimensions, fractions, NaN, values beyond int64).
    """
    a = _to_ndarray(x, name)
    if a.size == 0 and a.dtype.kind in _NUMERIC_KINDS + "b":  # [] is float64 in NumPy
        _check_ndim(a, name, 1)
        return np.zeros(0, dtype=np.int64)
    _check_numeric(a, name, "integers")
    _check_ndim(a, name, 1)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.floor(a)):
            raise _usage(f"{name} must hold whole numbers (got non-integer floats)")
        if np.any(np.abs(a) >= 2.0**63):
            raise _usage(f"{name} has values beyond int64")
    elif a.dtype == np.uint64 and np.any(a > np.iinfo(np.int64).max):
        raise _usage(f"{name} has values beyond int64")
    if a.dtype == np.int64 and a.dtype.isnative and a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.require(a, dtype=np.int64, requirements=["C", "A"])
