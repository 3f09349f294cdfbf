"""Writing kvdump v1 files (formats/kvdump-v1.md) from Python: :class:`DumpWriter` layer by layer,
:func:`write_dump` in one call, :func:`from_cache` from a PyTorch / Hugging Face KV cache.

Every writer here streams: it converts and writes one layer at a time, so the memory it needs is
about one layer's float32 copy (none at all for float32 C-contiguous inputs, which go to the C++
writer without a copy). Files are written atomically: nothing exists at ``path`` until the dump is
committed, and a failed or aborted write leaves nothing behind.
"""
import hashlib
import json
import operator
import os

import numpy as np

from . import _kvtool
from ._arrays import as_float32, as_int64
from .errors import InvalidInputError, UsageError

__all__ = ["DumpWriter", "write_dump", "from_cache"]

_ZERO_SHA256 = "0" * 64

# Identity keys (the root attributes of formats/kvdump-v1.md a caller may set) and their kinds.
_STR_KEYS = ("model_artifact_sha256", "adapter_set_sha256", "position_contract", "rope_config",
             "tenant_namespace", "representation", "generator")
_INT_KEYS = ("checkpoint_generation", "namespace_generation", "request_generation", "cache_generation",
             "publication_generation", "committed_frontier", "synthetic")
_ALIASES = {"model_artifact_digest": "model_artifact_sha256", "adapter_set_digest": "adapter_set_sha256"}
IDENTITY_KEYS = tuple(sorted(_STR_KEYS + _INT_KEYS))

_IDENTITY_DOC = """
    ``identity`` (a dict, every key optional) sets the dump's root attributes
    (formats/kvdump-v1.md, "Root attributes"); they feed the digests that bind an artifact to its
    dump, so set at least the model digest for anything you keep:

    ========================== =====================================================================
    key                        default
    ========================== =====================================================================
    model_artifact_sha256      ``"0" * 64`` (unknown model); the SHA-256 of your checkpoint file.
                               ``model_artifact_digest`` is accepted as another name.
    checkpoint_generation      0
    adapter_set_sha256         SHA-256 of the empty adapter set (``kvtool.adapter-set.v1:[]``)
    position_contract          ``"post-rope-absolute-v1"`` (K and Q after RoPE, absolute positions)
    rope_config                ``{"theta": 10000.0, "scaling": "none", "pairing": "half",
                               "head_dim": d}`` (Hugging Face's rotate-half; llama2.c/Meta use
                               ``"pairing": "interleaved"``); a dict or a JSON object string
    tenant_namespace           ``"default"``
    namespace_generation,      0
    request_generation,
    cache_generation,
    publication_generation
    representation             ``"full-kv-fp16-post-rope-v1"`` (fp32 / bf16 after ``dtype``)
    committed_frontier         T (every row committed); rows at or beyond it may hold anything
    generator                  what wrote the file, e.g. ``"kvtool.from_cache (Python)"``
    synthetic                  0; 1 marks synthetic data (``kvtool inspect`` says so)
    ========================== =====================================================================

    An unknown key raises :class:`kvtool.UsageError` listing the known ones."""


def _usage(msg):
    return UsageError(msg, "USAGE", 2)


def _shape_error(msg):
    return InvalidInputError(msg, "SHAPE_MISMATCH", 1)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# formats/kvdump-v1.md bounds (lib/format/include/kvtool/identity.h kMaxDumpHeads): checked here only
# to word the default head map's error; the C++ writer checks every bound.
_MAX_HEADS = 4096


def _int(x, name, minimum=None):
    """``x`` as a Python int in int64 range (numpy integers and 0-d integer arrays are fine)."""
    if isinstance(x, (bool, np.bool_)):
        raise _usage(f"{name} must be an int, got a bool")
    try:
        n = operator.index(x)
    except TypeError:
        raise _usage(f"{name} must be an int, got {type(x).__name__}") from None
    if minimum is not None and n < minimum:
        raise _usage(f"{name} must be at least {minimum}, got {n}")
    if not _INT64_MIN <= n <= _INT64_MAX:  # the bindings take int64: anything wider is a TypeError there
        raise _usage(f"{name} = {n} does not fit in 64 bits")
    return n


def _bool(x, name):
    # A truthy string such as "no" must not mean overwrite=True.
    if not isinstance(x, (bool, np.bool_)):
        raise _usage(f"{name} must be True or False, got {type(x).__name__} {x!r:.40}")
    return bool(x)


def _path(path):
    try:
        p = os.fspath(path)
    except TypeError:
        raise _usage(f"path must be a str or os.PathLike, got {type(path).__name__}") from None
    p = os.fsdecode(p)
    if "\0" in p:  # open() would stop at the NUL and create another file
        raise _usage(f"path contains a NUL character: {p!r}")
    return p


def _dtype_name(dtype):
    """"f16" / "bf16" / "f32" (or float16, numpy and torch dtypes) as the name the C++ side parses."""
    if isinstance(dtype, str):
        return dtype
    if dtype is None:  # np.dtype(None) is float64: the message would name a dtype nobody passed
        raise _usage("dtype must be 'f16', 'bf16' or 'f32', got None")
    text = str(dtype)
    if text.startswith("torch."):
        return text[len("torch."):]
    try:
        return np.dtype(dtype).name
    except (TypeError, ValueError):
        raise _usage(f"dtype must be 'f16', 'bf16' or 'f32', got {dtype!r}") from None


def _json_scalar(x):
    # rope_config values computed with NumPy (np.float32(theta), np.int64(d)) are plain numbers.
    if isinstance(x, np.generic) and x.dtype.kind in "fiub":
        return x.item()
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def _identity(identity, dtype, head_dim, tokens, generator):
    """The complete identity dict for the C++ writer: the caller's keys over the defaults."""
    if identity is None:
        identity = {}
    if not hasattr(identity, "items"):
        raise _usage(f"identity must be a dict, got {type(identity).__name__}")
    given = {}
    for name, value in identity.items():
        key = _ALIASES.get(name, name)
        if key not in IDENTITY_KEYS:
            raise _usage(f"unknown identity key {key!r:.80}; known keys: {', '.join(IDENTITY_KEYS)}")
        if key in given:  # both a name and its alias: which one wins would depend on dict order
            raise _usage(f"identity sets {key!r} twice (as {key!r} and as its alias)")
        given[key] = value
    rep = {"float32": "fp32", "f32": "fp32", "float16": "fp16", "f16": "fp16"}.get(dtype, "bf16")
    out = {
        "model_artifact_sha256": _ZERO_SHA256,
        "adapter_set_sha256": hashlib.sha256(b"kvtool.adapter-set.v1:[]").hexdigest(),
        "position_contract": "post-rope-absolute-v1",
        "rope_config": {"theta": 10000.0, "scaling": "none", "pairing": "half", "head_dim": head_dim},
        "tenant_namespace": "default",
        "representation": f"full-kv-{rep}-post-rope-v1",
        "generator": f"{generator} (Python, kvtool {_kvtool.__version__})",
        "committed_frontier": tokens,
        "synthetic": 0,
    }
    out.update({k: 0 for k in _INT_KEYS if k not in out})
    out.update(given)
    if isinstance(out["rope_config"], dict):
        try:
            out["rope_config"] = json.dumps(out["rope_config"], sort_keys=True, allow_nan=False, default=_json_scalar)
        except (TypeError, ValueError) as e:
            raise _usage(f"identity['rope_config'] is not JSON: {e}") from None
    for k in _STR_KEYS:
        if not isinstance(out[k], str):
            raise _usage(f"identity[{k!r}] must be a str, got {type(out[k]).__name__}")
        try:
            out[k].encode("utf-8")
        except UnicodeEncodeError:
            raise _usage(f"identity[{k!r}] is not valid Unicode text") from None
        if "\0" in out[k]:  # HDF5 string attributes end at a NUL: the dump would hold less
            raise _usage(f"identity[{k!r}] contains a NUL character")
    for k in _INT_KEYS:
        out[k] = int(out[k]) if isinstance(out[k], (bool, np.bool_)) else _int(out[k], f"identity[{k!r}]")
    if out["synthetic"] not in (0, 1):  # stored as a flag: 2 or -1 would silently read back as 1
        raise _usage(f"identity['synthetic'] must be 0 or 1, got {out['synthetic']}")
    return out


def _head_map(kv_heads, q_heads, q_to_kv_head):
    if q_to_kv_head is not None:
        m = as_int64(q_to_kv_head, "q_to_kv_head")
        if len(m) > _MAX_HEADS:  # before a Python int per entry is made of a huge array
            raise InvalidInputError(f"q_to_kv_head has {len(m)} query heads; expected 1 to {_MAX_HEADS}",
                                    "BAD_HEAD_MAP", 1)
        if q_heads is not None and q_heads != len(m):
            raise _usage(f"q_heads={q_heads} but q_to_kv_head has {len(m)} entries")
        return [int(h) for h in m]
    if kv_heads > _MAX_HEADS:
        raise _usage(f"kv_heads={kv_heads} is outside [1, {_MAX_HEADS}]")
    q_heads = kv_heads if q_heads is None else q_heads
    if kv_heads < 1 or q_heads < 1 or q_heads > 4096 or q_heads % kv_heads:
        raise _usage(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads}) in [1, 4096]")
    group = q_heads // kv_heads
    return [h // group for h in range(q_heads)]


class DumpWriter:
    """Writes a kvdump v1 file one layer at a time, atomically.

    ``DumpWriter(path, *, layers, kv_heads, head_dim, tokens, q_heads=None, q_to_kv_head=None,
    q_tokens=0, dtype="f16", identity=None, overwrite=False)``

    Only one layer's data is held at a time: :meth:`add_layer` converts it (no copy for
    C-contiguous float32), checks it and writes it to a temporary file next to ``path``;
    :meth:`commit` renames that file onto ``path``. Nothing exists at ``path`` before commit, and
    :meth:`abort` (or an exception inside a ``with`` block, or a writer garbage-collected without
    commit) removes the temporary.

    Geometry: ``layers`` (L), ``kv_heads`` (H), ``head_dim`` (d), ``tokens`` (T, the rows of the
    cache). ``q_tokens`` (T_q > 0) adds post-RoPE queries ``/kv/q`` of ``q_heads`` query heads
    (default ``kv_heads``); every layer must then get its ``q``. ``q_to_kv_head`` maps each query
    head to its KV head (GQA); default ``h -> h // (q_heads // kv_heads)``.
    ``dtype``: ``"f16"`` (default), ``"bf16"`` or ``"f32"`` (also ``float16`` ...; numpy or torch
    dtypes) is the stored type; inputs are converted to it. ``overwrite=False`` (a bool) refuses a
    ``path`` that exists, even as a dangling symlink (``OUTPUT_EXISTS``), both when the writer is
    created and again at :meth:`commit`; ``overwrite=True`` replaces the file (a symlink itself is
    replaced, not the file it points to).

    {identity}

    Errors are :class:`kvtool.Error` with a reason: ``SHAPE_MISMATCH`` (a layer's K/V/Q shape
    differs from the geometry), ``NON_FINITE`` (NaN/Inf in a committed row or in a query, or a
    value too large for f16/bf16), ``USAGE`` (layer out of range or added twice, ``q`` without
    ``q_tokens``, missing layers at commit, unknown dtype), ``BAD_HEAD_MAP``, ``BAD_ATTRIBUTE``,
    ``FRONTIER_BEYOND_T``, ``OUTPUT_EXISTS``, ``IO_ERROR``. The writer checks everything
    ``kvtool verify`` checks, so a committed dump verifies. Python argument errors (a wrong type,
    an int beyond 64 bits, a NUL in the path or an identity string) are ``USAGE``.

    In a ``with`` block the writer commits on normal exit; if that commit fails, or the block
    raises anything (``KeyboardInterrupt`` included), the temporary is removed and the exception
    propagates. A writer cannot be pickled or copied.

    Example::

        with kvtool.DumpWriter("run.h5", layers=L, kv_heads=H, head_dim=d, tokens=T,
                               identity={"model_artifact_sha256": sha}) as w:
            for l in range(L):
                w.add_layer(l, k[l], v[l])          # [H, T, d] each, numpy or torch
            w.set_tokens(input_ids)
        # committed here; an exception in the block would have left no file
    """

    def __init__(self, path, *, layers, kv_heads, head_dim, tokens, q_heads=None, q_to_kv_head=None,
                 q_tokens=0, dtype="f16", identity=None, overwrite=False):
        self._setup(path, layers, kv_heads, head_dim, tokens, q_heads, q_to_kv_head, q_tokens, dtype, identity,
                    overwrite, "kvtool.DumpWriter")

    @classmethod
    def _open(cls, *args):
        """A writer whose ``generator`` attribute names the caller (write_dump, from_cache)."""
        w = cls.__new__(cls)
        w._setup(*args)
        return w

    def _setup(self, path, layers, kv_heads, head_dim, tokens, q_heads, q_to_kv_head, q_tokens, dtype, identity,
               overwrite, generator):
        path = _path(path)
        layers = _int(layers, "layers", 1)
        kv_heads = _int(kv_heads, "kv_heads", 1)
        head_dim = _int(head_dim, "head_dim", 1)
        tokens = _int(tokens, "tokens", 1)
        q_tokens = _int(q_tokens, "q_tokens", 0)
        q_heads = None if q_heads is None else _int(q_heads, "q_heads", 1)
        dtype = _dtype_name(dtype)
        head_map = _head_map(kv_heads, q_heads, q_to_kv_head)
        ident = _identity(identity, dtype, head_dim, tokens, generator)
        overwrite = _bool(overwrite, "overwrite")
        self._path = path
        # bytes: a path that is not valid UTF-8 (os.fsdecode's surrogate escapes) still reaches open()
        self._w = _kvtool._DumpWriter(os.fsencode(path), layers, kv_heads, head_dim, tokens, q_tokens, dtype, ident,
                                      head_map, overwrite)
        self.layers, self.kv_heads, self.head_dim, self.tokens = layers, kv_heads, head_dim, tokens
        self.q_heads, self.q_tokens, self.q_to_kv_head = len(head_map), q_tokens, head_map

    def add_layer(self, layer, k, v, q=None):
        """Writes layer ``layer``: ``k``, ``v`` ``[kv_heads, tokens, head_dim]`` (a leading batch
        axis of 1 is accepted), ``q`` ``[q_heads, q_tokens, head_dim]`` post-RoPE queries (needed
        on every layer when the writer has ``q_tokens > 0``). NumPy arrays, torch CPU tensors or
        nested lists; float32 C-contiguous inputs are written without a copy. Each layer once."""
        layer = _int(layer, "layer")
        if not 0 <= layer < self.layers:  # here too: a layer beyond int64 never reaches the bindings
            raise _usage(f"layer {layer} is not in [0, {self.layers})")
        k = self._layer_array(k, "k")
        v = self._layer_array(v, "v")
        if q is not None:
            q = self._layer_array(q, "q")
        self._w.add_layer(layer, k, v, q)

    @staticmethod
    def _layer_array(x, name):
        a = as_float32(x, name)
        if a.ndim == 4:
            if a.shape[0] != 1:
                raise _shape_error(f"{name} has a batch axis of {a.shape[0]}; pass one sequence ({name}[i])")
            a = a[0]  # a view, still C-contiguous
        if a.ndim != 3:
            raise _usage(f"{name} must be [heads, tokens, head_dim] (3-D), got shape {tuple(a.shape)}")
        return a

    def set_tokens(self, ids):
        """Token id of each of the ``tokens`` rows (``/kv/tokens``, int32 on disk)."""
        self._w.set_tokens(as_int64(ids, "tokens"))

    def set_positions(self, positions):
        """Original logical position of each row, strictly increasing (``/kv/positions``; default
        ``0..T-1``, i.e. not written)."""
        self._w.set_positions(as_int64(positions, "positions"))

    def set_q_positions(self, positions):
        """Row of each of the ``q_tokens`` dumped queries (``/kv/q_positions``), each in ``[0, T)``.
        Default: the last ``q_tokens`` rows, ``range(T - q_tokens, T)``; required when
        ``q_tokens > tokens``. Repeated rows are allowed."""
        self._w.set_q_positions(as_int64(positions, "q_positions"))

    def commit(self):
        """Checks that every layer was added, writes tokens/positions and renames the file onto
        ``path`` (fsync'd). Returns ``path``. A commit refused for missing layers or queries, for
        ``q_tokens > tokens`` without :meth:`set_q_positions` (``USAGE``), or because ``path``
        appeared meanwhile with ``overwrite=False`` (``OUTPUT_EXISTS``) leaves the writer open: fix
        that and commit again. A commit that fails while writing removes the temporary (state
        ``"failed"``); ``path`` is then left as it was."""
        self._w.commit()
        return self._path

    def abort(self):
        """Drops the temporary file; ``path`` is left as it was. No-op after :meth:`commit`."""
        self._w.abort()

    @property
    def path(self):
        """The output path."""
        return self._path

    @property
    def state(self):
        """``"open"``, ``"committed"``, ``"aborted"`` or ``"failed"``."""
        return self._w.state

    @property
    def missing_layers(self):
        """Layers not yet added (a list of ints)."""
        return self._w.missing_layers()

    def __enter__(self):
        return self

    def __reduce_ex__(self, protocol):
        # The default would fail with a TypeError about _DumpWriter, and copy.copy would share one
        # temporary file between two writers.
        raise _usage("a DumpWriter cannot be pickled or copied; write the layers through this one")

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
            return False
        if self.state == "open":
            try:
                self.commit()
            except BaseException:
                self.abort()
                raise
        return False

    def __repr__(self):
        return (f"<kvtool.DumpWriter {self.path!r} L={self.layers} H={self.kv_heads} T={self.tokens} "
                f"d={self.head_dim} {self.state}>")


if DumpWriter.__doc__:  # None under python -OO
    DumpWriter.__doc__ = DumpWriter.__doc__.replace("{identity}", _IDENTITY_DOC.strip())


def _shape(x, name):
    s = getattr(x, "shape", None)
    if s is None:
        try:
            s = np.shape(x)
        except (TypeError, ValueError) as e:
            raise _usage(f"cannot read the shape of {name} (a {type(x).__name__}): {e}") from None
    try:
        return tuple(operator.index(n) for n in s)
    except TypeError:  # an object whose .shape is not a tuple of ints
        raise _usage(f"{name} (a {type(x).__name__}) has no usable shape: {s!r:.60}") from None


def _check_layer_sequence(x, name):
    """``x`` must be an array/tensor (anything with ``ndim`` and ``shape``, also an h5py dataset:
    indexed one layer at a time) of 4 dimensions, or a list/tuple of per-layer arrays."""
    if isinstance(x, (list, tuple)):
        return
    if hasattr(x, "ndim") and hasattr(x, "shape"):
        s = _shape(x, name)
        if len(s) != 4:
            raise _usage(f"{name} must be [L, heads, T, d] or a list of per-layer [heads, T, d], got shape {s}")
        return
    raise _usage(f"{name} must be an [L, heads, T, d] array or tensor or a list of per-layer [heads, T, d] arrays, "
                 f"got {type(x).__name__}")


def _write_layers(path, k, v, q, *, q_positions, tokens, positions, dtype, identity, q_to_kv_head,
                  overwrite, generator, names=("k", "v", "q")):
    """Shared by write_dump and from_cache: k, v, q are sequences of per-layer [H, T, d] items,
    indexed lazily so that only the layer being written is converted. ``names``: what the caller
    called k, v and q, for the messages."""
    nk, nv, nq = names
    L = len(k)
    if L < 1:
        raise _usage("the cache has no layers")
    if len(v) != L:
        raise _shape_error(f"{nk} has {L} layers but {nv} has {len(v)}")
    H, T, d = _layer_shape(k[0], f"{nk}[0]")
    if min(H, T, d) < 1:  # else the message would name the writer's arguments, which nobody passed here
        raise _usage(f"{nk}[0] has shape [{H}, {T}, {d}] (heads, tokens, head_dim): nothing to dump")
    q_heads, q_tokens = None, 0
    if q is not None:
        if len(q) != L:
            raise _shape_error(f"{nk} has {L} layers but {nq} has {len(q)}")
        q_heads, q_tokens, _ = _layer_shape(q[0], f"{nq}[0]")
        if min(q_heads, q_tokens) < 1:
            raise _usage(f"{nq}[0] has shape [{q_heads}, {q_tokens}, ...]: no queries")
        if q_tokens > T and q_positions is None:  # the default, the last T_q rows, does not exist
            raise _usage(f"{nq} hold T_q={q_tokens} queries per head but the cache has T={T} rows: pass "
                         "q_positions (the row of each query)")
    elif q_positions is not None:
        raise _usage("q_positions given without queries")
    with DumpWriter._open(path, L, H, d, T, q_heads, q_to_kv_head, q_tokens, dtype, identity, overwrite,
                          generator) as w:
        for layer in range(L):
            w.add_layer(layer, k[layer], v[layer], None if q is None else q[layer])
        if tokens is not None:
            w.set_tokens(tokens)
        if positions is not None:
            w.set_positions(positions)
        if q_positions is not None:
            w.set_q_positions(q_positions)
    return w.path


def _layer_shape(x, name):
    s = _shape(x, name)
    if len(s) == 4 and s[0] == 1:
        s = s[1:]
    if len(s) != 3:
        raise _usage(f"{name} must be [heads, tokens, head_dim], got shape {s}")
    return s


def write_dump(path, k, v, *, q=None, q_positions=None, tokens=None, positions=None, dtype="f16",
               identity=None, q_to_kv_head=None, overwrite=False):
    """Writes a kvdump v1 file from whole arrays and returns ``path``.

    ``k``, ``v``: ``[L, kv_heads, T, d]`` arrays (NumPy or torch CPU) or a list of per-layer
    ``[kv_heads, T, d]`` arrays; post-RoPE keys and values of one sequence. ``q``: optional
    post-RoPE queries, ``[L, q_heads, T_q, d]`` or a per-layer list; ``q_positions`` the row of
    each query (default: the last T_q rows; required when T_q > T). ``tokens``: token ids
    ``[T]``; ``positions``: logical positions ``[T]`` (strictly increasing; default ``0..T-1``).
    ``q_to_kv_head``: query head -> KV head map (default grouped). ``dtype``: stored type,
    ``"f16"``, ``"bf16"`` or ``"f32"``. ``overwrite=False`` (a bool) refuses an existing file.
    Layers are converted and written one at a time (see :class:`DumpWriter` for the identity keys
    and the errors); nothing is left at ``path`` if anything fails.

    Example::

        k = np.random.randn(2, 4, 128, 64).astype(np.float32)   # [L, H, T, d]
        kvtool.write_dump("x.h5", k, k, dtype="f32", identity={"tenant_namespace": "me"})
    """
    for name, x in (("k", k), ("v", v), ("q", q)):
        if x is not None or name != "q":
            _check_layer_sequence(x, name)
    return _write_layers(_path(path), k, v, q, q_positions=q_positions, tokens=tokens, positions=positions,
                         dtype=dtype, identity=identity, q_to_kv_head=q_to_kv_head, overwrite=overwrite,
                         generator="kvtool.write_dump")


class _BatchView:
    """Lazy per-layer view ``seq[l][b, :, :rows]`` of a per-layer list of [batch, ...] tensors;
    fp8 tensors are dequantized with ``scale`` (value = fp8 * scale)."""

    def __init__(self, seq, b, name, rows=None, scale=None):
        self._seq, self._b, self._name, self._rows, self._scale = seq, b, name, rows, scale

    def __len__(self):
        return len(self._seq)

    def __getitem__(self, layer):
        x = self._seq[layer]
        if x is None:
            raise _usage(f"layer {layer} of the cache has no {self._name} (an empty cache layer)")
        s = _shape(x, f"{self._name} of layer {layer}")
        if len(s) != 4:
            raise _usage(f"{self._name} of layer {layer} must be [batch, heads, T, d], got shape {s}")
        if not 0 <= self._b < s[0]:
            raise _usage(f"batch_index {self._b} is outside the batch of {s[0]} ({self._name} of layer {layer})")
        x = x[self._b]  # a view for numpy and torch: only this sequence is ever converted
        if self._rows is not None and self._rows != s[2]:
            x = x[:, :self._rows]  # the filled rows of a static or sliding-window layer
        return _dequantize_fp8(x, self._scale, layer, self._name)


def _is_fp8(x):
    return "float8" in str(getattr(x, "dtype", ""))


def _scale_of(scale, layer, name):
    """A per-tensor scale: one number for every layer, or a per-layer sequence."""
    s = scale
    if isinstance(s, (list, tuple)) or len(_shape(s, name)) == 1:
        if not 0 <= layer < len(s):
            raise _usage(f"{name} has {len(s)} per-layer scales; layer {layer} has none")
        s = s[layer]
    try:
        f = float(s.item() if hasattr(s, "item") else s)
    except (TypeError, ValueError):
        raise _usage(f"{name} must be a number or a per-layer list of numbers, got {type(s).__name__}") from None
    if not np.isfinite(f) or f <= 0:
        raise _usage(f"{name} for layer {layer} must be finite and positive, got {f}")
    return f


def _dequantize_fp8(x, scale, layer, name):
    scale_name = {"keys": "k_scale", "values": "v_scale"}.get(name, "scale")
    if not _is_fp8(x):
        if scale is not None:  # scaling float values would silently change them
            raise _usage(f"{scale_name} given but the {name} of layer {layer} are {getattr(x, 'dtype', '?')}, "
                         "not fp8")
        return x
    if scale is None:  # fp8 codes alone are not the values (formats/kvdump-v1.md stores values)
        raise _unsupported(f"the {name} of layer {layer} are {x.dtype} without a scale: pass {scale_name}= "
                           "(value = fp8 * scale)")
    return x.float() * _scale_of(scale, layer, scale_name)


def _as_list(x, name):
    try:
        return list(x)
    except TypeError:
        raise _usage(f"past_key_values.{name} must be a per-layer list, got {type(x).__name__}") from None


def _cache_layers(cache):
    """(keys, values, layer objects or None): per-layer lists of the cache's [batch, kv_heads, T, d]
    tensors (references)."""
    if isinstance(cache, (str, bytes, os.PathLike)):
        raise _usage(f"past_key_values is a path ({cache!r:.80}), not a cache: the call is "
                     "from_cache(past_key_values, path, ...)")
    layers = getattr(cache, "layers", None)
    if layers is not None and not isinstance(cache, (list, tuple)):
        layers = _as_list(layers, "layers")
        if not layers:
            raise _usage("the cache has no layers (past_key_values.layers is empty)")
        if all(hasattr(x, "keys") and not callable(x.keys) for x in layers):
            return [x.keys for x in layers], [x.values for x in layers], layers
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):
        return _as_list(cache.key_cache, "key_cache"), _as_list(cache.value_cache, "value_cache"), None
    if isinstance(cache, (list, tuple)):
        keys, values = [], []
        for i, entry in enumerate(cache):
            if not isinstance(entry, (list, tuple)) or len(entry) < 2:
                raise _usage(f"past_key_values[{i}] must be a (k, v) pair, got {type(entry).__name__}")
            keys.append(entry[0])
            values.append(entry[1])
        return keys, values, None
    raise _usage(f"past_key_values of type {type(cache).__name__} is not a supported cache: expected a "
                 "tuple of per-layer (k, v), an object with key_cache/value_cache lists (HF DynamicCache) "
                 "or one with layers[i].keys/.values")


def _unsupported(msg):
    return InvalidInputError(msg, "UNSUPPORTED_CACHE", 1)


def _kind_name(x):
    return type(x).__name__


def _refuse_undecodable(cache, layer, i):
    """Refuses what is not per-head K and V stored as floats: quantized layers (whose float
    ``keys`` are only the recent residual) and MLA latents (one latent per token, not K and V)."""
    where = f"layer {i} ({_kind_name(layer)})" if layer is not None else _kind_name(cache)
    for obj in (cache, layer):
        if obj is None:
            continue
        name = _kind_name(obj)
        if "Quantized" in name or any(hasattr(obj, a) for a in ("_quantized_keys", "_quantized_key_cache")):
            raise _unsupported(f"{where} is a quantized cache: its float keys/values are only the recent "
                               "residual and the older rows are quanto/HQQ codes kvtool does not decode; "
                               "dequantize the cache into a DynamicCache first")
        if "MLA" in name or "Latent" in name or hasattr(obj, "kv_lora_rank"):
            raise _unsupported(f"{where} caches MLA latents (one latent per token), not per-head K and V: "
                               "K and V exist only after the model's up-projections")


def _int_attr(obj, name):
    x = getattr(obj, name, None)
    if x is None:
        return None
    try:
        n = operator.index(x.item() if hasattr(x, "item") else x)
    except (TypeError, ValueError):
        raise _unsupported(f"{_kind_name(obj)}.{name} is not an integer: {x!r:.40}") from None
    return n


def _layer_span(layer, i, rows, filled):
    """(rows_used, first_position) of one layer, from the layer's own bookkeeping (transformers'
    cache_utils.py: StaticLayer, StaticSlidingWindowLayer, DynamicSlidingWindowLayer). ``rows``:
    the layer's row count; ``filled``: the caller's filled length for static caches (or None)."""
    name = _kind_name(layer)
    sliding = bool(getattr(layer, "is_sliding", False)) or hasattr(layer, "sliding_window")
    static = "Static" in name or (hasattr(layer, "max_cache_len") and not sliding)
    seen = _int_attr(layer, "cumulative_length")
    if sliding:
        if seen is None:  # without the count of tokens seen, the rows' positions are unknown
            raise _unsupported(f"layer {i} ({name}) is a sliding-window layer without cumulative_length: the "
                               "positions of its rows cannot be known")
        if seen < 0:
            raise _unsupported(f"layer {i} ({name}): cumulative_length {seen} is negative")
        # A static window holds min(seen, window) rows at the front, in position order (it rolls
        # left when full); a dynamic one holds its last keys.shape[-2] rows.
        used = min(seen, rows) if static else rows
        if used > seen:
            raise _unsupported(f"layer {i} ({name}) holds {rows} rows but has seen only {seen} tokens")
        return used, seen - used
    if static:
        n = seen if seen is not None else filled
        if n is None:  # never inferred from zero rows: a zero key row is a valid key
            raise _unsupported(f"layer {i} ({name}) is a static cache preallocated to {rows} rows and does not "
                               "record how many are filled: pass seq_length= (or tokens=) with the filled length")
        if not 0 < n <= rows:
            raise _unsupported(f"layer {i} ({name}): filled length {n} is outside [1, {rows}]")
        return n, 0
    return rows, 0


def _old_static(cache):
    """Cache-level static caches of older transformers (StaticCache / SlidingWindowCache /
    HybridCache with key_cache lists and max_cache_len): per-layer spans are not recorded."""
    name = _kind_name(cache)
    if hasattr(cache, "sliding_window") or "Sliding" in name or "Hybrid" in name:
        raise _unsupported(f"{name} keeps sliding-window layers without a count of tokens seen: the positions of "
                           "their rows cannot be known")
    return "Static" in name or hasattr(cache, "max_cache_len")


def _static_filled(layer_objs, filled):
    """The filled length of static layers: the tokens seen by the sliding-window layers of the same
    cache (updated by the same forward calls), else the caller's ``filled``."""
    seen = {_int_attr(x, "cumulative_length") for x in layer_objs or ()
            if getattr(x, "is_sliding", False) or hasattr(x, "sliding_window")}
    seen.discard(None)
    if len(seen) > 1:
        raise _unsupported(f"the sliding-window layers disagree on the tokens seen: {sorted(seen)[:4]}")
    if seen and filled is not None and filled != min(seen):
        raise _unsupported(f"the cache has seen {min(seen)} tokens but seq_length/tokens say {filled}")
    return min(seen) if seen else filled


def _spans(cache, keys, values, layer_objs, filled):
    """One (rows, first_position) for the whole cache; layers that disagree are refused."""
    _refuse_undecodable(cache, None, None)
    old_static = layer_objs is None and not isinstance(cache, (list, tuple)) and _old_static(cache)
    filled = _static_filled(layer_objs, filled)
    spans = []
    for i, (k, v) in enumerate(zip(keys, values)):
        layer = None if layer_objs is None else layer_objs[i]
        if layer is not None:
            _refuse_undecodable(cache, layer, i)
        if k is not None and k is v:
            raise _unsupported(f"layer {i}: keys and values are the same tensor (an MLA latent cache?); kvtool "
                               "needs per-head K and V")
        s = None if k is None else _shape(k, f"keys of layer {i}")
        rows = s[-2] if s is not None and len(s) == 4 else None
        if rows is None:
            span = None  # an empty or malformed layer: _BatchView names the problem
        elif layer is not None:
            span = _layer_span(layer, i, rows, filled)
        elif old_static:
            span = _layer_span(type("StaticLayer", (), {"max_cache_len": rows})(), i, rows, filled)
        else:
            span = (rows, 0)
        spans.append((span, rows))
    if all(s is None or s == (r, 0) for s, r in spans):
        return None  # every layer whole from position 0: the writer checks that their shapes agree
    known = {s for s, _ in spans if s is not None}
    if len(known) > 1:
        raise _unsupported("the cache mixes layers with different rows/positions (e.g. full and sliding-window "
                           f"layers: {sorted(known)[:4]} as (rows, first position)); a dump has one row set for "
                           "all layers")
    return known.pop() if known else None


def from_cache(past_key_values, path, *, queries=None, q_positions=None, tokens=None, positions=None,
               batch_index=0, dtype="f16", identity=None, q_to_kv_head=None, overwrite=False, seq_length=None,
               k_scale=None, v_scale=None):
    """Writes the KV cache of a PyTorch / Hugging Face forward pass as a kvdump v1 file; returns ``path``.

    ``past_key_values`` is any of:

    * a tuple/list of per-layer ``(k, v)`` with ``k``, ``v`` ``[batch, kv_heads, T, d]``
      (HF's legacy ``past_key_values``; extra entries after ``(k, v)`` are ignored);
    * an object with ``key_cache`` / ``value_cache`` lists (HF ``DynamicCache``);
    * an object with ``layers[i].keys`` / ``layers[i].values`` (newer HF caches).

    Tensors may be torch CPU tensors (any float dtype, ``requires_grad`` is fine) or NumPy arrays.
    Only sequence ``batch_index`` of the batch is written, through a view; layers are converted and
    written one at a time, so the extra memory is about one layer of one sequence in float32 (none
    for float32 tensors). HF stores keys after RoPE, as the dump format wants.

    ``queries``: ``None`` or a per-layer list of ``[batch, q_heads, T_q, d]`` post-RoPE queries
    (what a forward hook on the attention records); ``q_positions`` the row of each query
    (default: the last T_q rows, ``range(T - T_q, T)``; required when T_q > T). ``tokens``: the
    ``[T]`` token ids (HF's ``[batch, T]`` ``input_ids`` also: row ``batch_index`` is used);
    ``positions``: ``[T]`` (or ``[batch, T]``) logical positions if not ``0..T-1``.
    ``q_to_kv_head``: query head -> KV head map; default grouped from the queries' head count
    (without queries it defaults to one query head per KV head: pass it for GQA models).
    ``dtype``: stored type, ``"f16"`` (default), ``"bf16"`` or ``"f32"``. ``identity``: the dump's
    identity attributes (keys and defaults in ``help(kvtool.DumpWriter)``; set
    ``model_artifact_sha256`` and ``rope_config`` to describe your model). ``overwrite=False`` (a
    bool) refuses an existing ``path`` (``OUTPUT_EXISTS``). Errors are those of
    :class:`kvtool.DumpWriter`; nothing is left at ``path`` if anything fails.

    Cache kinds (layer classes as transformers' ``cache_utils.py`` defines them, 4.56-4.57 layer
    API; ``is_sliding``, ``cumulative_length``, ``max_cache_len``) — only rows the cache says are
    filled are written, never rows guessed from their values:

    * static layers (``StaticLayer``, ``StaticCache``) are preallocated and record no filled
      length: it comes from ``seq_length=``, else from ``tokens``' length, else from the
      ``cumulative_length`` of sliding layers in the same cache; without any, ``UNSUPPORTED_CACHE``
      (zero rows are never taken to mean "empty": a zero key is a valid key);
    * sliding-window layers (``StaticSlidingWindowLayer``, ``DynamicSlidingWindowLayer``) keep the
      last rows in position order; after ``n`` tokens seen (``cumulative_length``) their ``r``
      rows are positions ``n - r .. n - 1``, written as ``/kv/positions`` (``tokens`` of the whole
      sequence are cut to the window). A sliding layer without ``cumulative_length`` (older
      ``SlidingWindowCache`` / ``HybridCache``) is ``UNSUPPORTED_CACHE``;
    * a cache whose layers differ in rows or positions (full and sliding layers of a hybrid model
      once the window has slid) is ``UNSUPPORTED_CACHE``: a dump has one row set for all layers;
    * quantized caches (``QuantizedLayer``, ``QuantoQuantizedCache``, ``HQQQuantizedCache``) hold
      their older rows as backend codes and only the recent residual as floats: refused
      (``UNSUPPORTED_CACHE``), never written as the residual alone;
    * MLA latent caches (one latent per token; a class or layer with ``kv_lora_rank``, or keys and
      values that are the same tensor) are ``UNSUPPORTED_CACHE``;
    * fp8 tensors (``torch.float8_*``) need ``k_scale=`` and ``v_scale=`` (a number, or one per
      layer): values are ``fp8 * scale``; without them ``UNSUPPORTED_CACHE``. A scale given for a
      non-fp8 cache is ``USAGE``.

    Example::

        out = model(input_ids, use_cache=True)
        kvtool.from_cache(out.past_key_values, "prompt.h5", tokens=input_ids,
                          identity={"model_artifact_sha256": sha256_of_checkpoint})
    """
    keys, values, layer_objs = _cache_layers(past_key_values)
    b = _int(batch_index, "batch_index", 0)
    q = None
    if queries is not None:
        if not isinstance(queries, (list, tuple)):
            raise _usage(f"queries must be a per-layer list of [batch, q_heads, T_q, d], got {type(queries).__name__}")
        q = _BatchView(list(queries), b, "queries")
    tokens, positions = _batch_row(tokens, b, "tokens"), _batch_row(positions, b, "positions")
    filled = None if seq_length is None else _int(seq_length, "seq_length", 1)
    if filled is None and tokens is not None:
        filled = _shape(tokens, "tokens")[0] if len(_shape(tokens, "tokens")) == 1 else None
    span = _spans(past_key_values, keys, values, layer_objs, filled)
    rows, tokens, positions = _apply_span(span, tokens, positions)
    return _write_layers(_path(path), _BatchView(keys, b, "keys", rows, k_scale),
                         _BatchView(values, b, "values", rows, v_scale), q, q_positions=q_positions, tokens=tokens,
                         positions=positions, dtype=dtype, identity=identity, q_to_kv_head=q_to_kv_head,
                         overwrite=overwrite, generator="kvtool.from_cache", names=("keys", "values", "queries"))


def _apply_span(span, tokens, positions):
    """Rows to keep, and the tokens/positions of those rows: a window starting at position p > 0
    gets /kv/positions p..p+rows-1 (strictly increasing, formats/kvdump-v1.md); tokens of the
    whole sequence are cut to the window's."""
    if span is None:
        return None, tokens, positions
    rows, first = span
    if first == 0:
        return rows, tokens, positions
    true = np.arange(first, first + rows, dtype=np.int64)
    if positions is not None and not np.array_equal(as_int64(positions, "positions"), true):
        raise _usage(f"positions do not match the sliding window's rows, which hold positions {first}.."
                     f"{first + rows - 1}")
    if tokens is not None and len(_shape(tokens, "tokens")) == 1 and _shape(tokens, "tokens")[0] == first + rows:
        tokens = tokens[first:]
    return rows, tokens, true


def _batch_row(x, b, name):
    """HF's input_ids / position_ids are [batch, T]: the row of the sequence the cache is cut to."""
    if x is None:
        return None
    s = _shape(x, name)
    if len(s) != 2:
        return x
    if b >= s[0]:
        raise _usage(f"{name} is [batch={s[0]}, T={s[1]}] but batch_index is {b}")
    return x[b]
