"""Paged K/V caches (vLLM, FlashInfer, SGLang) gathered into token order, for :func:`write_dump`.

The same layouts and refusals as ``kvtool import`` (man/kvtool-import.1, "Paged caches"): a cache
tensor holds blocks in allocation order, so a request's rows are read through its block table
(token t at slot ``block_table[t // S] * S + t % S``) or its slot mapping (one slot per token).
Only the request's rows are copied: the cache itself is indexed, never converted as a whole.
"""
import numpy as np

from . import _kvtool
from ._arrays import _to_ndarray
from .errors import InvalidInputError, UsageError

__all__ = ["gather_paged", "decode_fp8"]

def _usage(msg):
    return UsageError(msg, "USAGE", 2)


def _invalid(msg, reason):
    return InvalidInputError(msg, reason, 1)


def _fp8_table(kind):
    """The 256 float32 values of OCP fp8 codes, from the library (kvtool import's decoder)."""
    if kind not in _FP8:
        _FP8[kind] = np.asarray(_kvtool.fp8_table(kind))
    return _FP8[kind]


_FP8 = {}


def decode_fp8(codes, kind):
    """uint8 fp8 codes as float32 values (``kind``: ``"e4m3"`` or ``"e5m2"``), unscaled."""
    if kind not in ("e4m3", "e5m2"):
        raise _usage(f"fp8 must be 'e4m3' or 'e5m2', got {kind!r}")
    a = _to_ndarray(codes, "codes")
    if a.dtype != np.uint8:
        raise _usage(f"fp8 codes must be uint8, got {a.dtype}")
    return _fp8_table(kind)[a]


def _parse_layout(layout):
    """The layout's axes as ``kvtool import --layout`` parses them (the library's parser), limited
    to what gather_paged reads: a paged token axis (N,S or X) and heads as H and d."""
    if not isinstance(layout, str):
        raise _usage(f"layout must be a string such as '2,N,S,H,d', got {type(layout).__name__}")
    axes = list(_kvtool.parse_cache_layout(layout))
    if "T" in axes or "Hd" in axes:
        raise _usage(f"layout {layout!r}: gather_paged reads paged caches, whose axes are N and S (blocks and "
                     "slots in a block) or X (flat slots), with H and d (a token-ordered tensor needs no gather)")
    return axes


def _table_row(table, name, batch_index):
    """The request's row of a block table or slot mapping, and its length."""
    a = _to_ndarray(table, name)
    if a.dtype.kind not in "iu":
        raise _invalid(f"{name} has dtype {a.dtype}; block ids and slots are integers", "UNSUPPORTED_DTYPE")
    if a.ndim == 2:
        if not 0 <= batch_index < a.shape[0]:
            raise _usage(f"batch_index {batch_index} is outside the {a.shape[0]} rows of {name}")
        a = a[batch_index]
    elif a.ndim != 1:
        raise _invalid(f"{name} has shape {tuple(a.shape)}; expected [n] or [requests, n]", "SHAPE_MISMATCH")
    return a


def _slots(axes, shape, num_tokens, block_table, slot_mapping, batch_index):
    """The slot of every token, planned and checked by the library (kvtool/paged_layout.h)."""
    if (block_table is None) == (slot_mapping is None):
        raise _usage("a paged cache needs block_table or slot_mapping (one of them): it holds blocks in "
                     "allocation order, not token order")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, (int, np.integer)) or num_tokens <= 0:
        raise _usage(f"num_tokens must be a positive integer (the request's tokens), got {num_tokens!r}")
    blocks = "N" in axes
    per = shape[axes.index("S")] if blocks else 1
    units = shape[axes.index("N" if blocks else "X")]
    by_block = block_table is not None
    name = "block_table" if by_block else "slot_mapping"
    need = _kvtool.paged_entries_needed(blocks, per, units, by_block, int(num_tokens))
    row = _table_row(block_table if by_block else slot_mapping, name, batch_index)
    entries = np.asarray(row[:need]).astype(np.int64)  # entries past the tokens are padding and never read
    slots = _kvtool.paged_token_slots(blocks, per, units, by_block, entries, row.shape[0], int(num_tokens), name)
    return np.asarray(slots), per


def _layer(x, axes, fixed, slots, per, scale, fp8):
    """[H, T, d] float32 of one cache array: ``fixed`` axes indexed, the token rows gathered."""
    index = tuple(fixed.get(a, slice(None)) for a in axes)
    a = x[index]
    rest = [ax for ax in axes if ax not in fixed]
    if "N" in rest:
        a = np.transpose(a, [rest.index(ax) for ax in ("N", "S", "H", "d")])
        rows = a[slots // per, slots % per]  # [T, H, d]: only the request's rows are copied
    else:
        rows = np.transpose(a, [rest.index(ax) for ax in ("X", "H", "d")])[slots]
    if fp8 is not None:
        if rows.dtype != np.uint8:
            raise _usage(f"fp8={fp8!r} reads uint8 codes; the cache has dtype {rows.dtype}")
        rows = _fp8_table(fp8)[rows] * np.float32(scale)
    elif rows.dtype.kind != "f":
        raise _invalid(f"the cache has dtype {rows.dtype}; K and V are floats (uint8 fp8 codes need fp8=)",
                       "UNSUPPORTED_DTYPE")
    out = np.ascontiguousarray(np.transpose(rows, (1, 0, 2)), dtype=np.float32)
    if not np.isfinite(out).all():
        raise _invalid("the gathered rows hold NaN/Inf (an fp8 NaN or inf code?)", "NON_FINITE")
    return out


def _scales(scale, name, layers, fp8):
    if fp8 is None:
        if scale is not None:
            raise _usage(f"{name} applies to fp8 caches only (pass fp8='e4m3' or 'e5m2' for uint8 codes)")
        return [1.0] * layers
    if scale is None:
        raise _invalid(f"an fp8 cache's values are code x scale: give k_scale and v_scale ({name} is missing)",
                       "UNSUPPORTED_CACHE")
    s = np.asarray(_to_ndarray(scale, name), dtype=np.float64).reshape(-1)
    if s.size == 1:
        s = np.repeat(s, layers)
    if s.size != layers:
        raise _invalid(f"{name} has {s.size} values; expected one or one per layer ({layers})", "SHAPE_MISMATCH")
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise _invalid(f"{name} must be positive and finite, got {s.tolist()}", "BAD_ATTRIBUTE")
    return [float(np.float32(v)) for v in s]


def _per_layer(x, name, has_l):
    """The layers of a cache argument: per-layer views of one array with an L axis, or a list."""
    if has_l:
        return None, _to_ndarray(x, name)
    if not isinstance(x, (list, tuple)):
        x = [x]
    return [_to_ndarray(a, f"{name}[{i}]") for i, a in enumerate(x)], None


def gather_paged(*, layout, num_tokens, kv=None, k=None, v=None, block_table=None, slot_mapping=None,
                 batch_index=0, fp8=None, k_scale=None, v_scale=None):
    """One request's K and V from a paged cache, in token order: ``(k, v)``, each a list of
    per-layer float32 ``[H, T, d]`` arrays that :func:`write_dump` takes.

    ``layout`` names the cache's axes in storage order, as ``kvtool import --layout``: ``N`` blocks,
    ``S`` the slot in a block, or ``X`` flat slots; ``H`` KV heads, ``d`` head dim; ``2`` K/V stacked
    (pass ``kv=``; otherwise ``k=`` and ``v=``); ``L`` layers (without it, pass a list of per-layer
    tensors); ``B`` batch (``batch_index``). vLLM FlashAttention per layer: ``"2,N,S,H,d"``;
    FlashInfer: ``"N,2,S,H,d"``; the HND cache layout: ``"N,2,H,S,d"``; SGLang's pool:
    ``"X,H,d"``. ``block_table``: the request's block ids ``[n]`` or ``[requests, n]`` (row
    ``batch_index``); ``slot_mapping``: one slot per token (vLLM's slot_mapping, a row of SGLang's
    ``req_to_token``). ``num_tokens``: T (required: a table does not say how full its last block
    is). Entries past the tokens are padding and ignored. ``fp8`` (``"e4m3"``/``"e5m2"``) reads
    uint8 codes, value = decoded code x ``k_scale``/``v_scale`` (a number or one per layer); say so
    in the dump, e.g. ``identity={"representation": "fp8-e4m3-dequantized-kv-float32-post-rope-v1"}``
    as ``kvtool import`` does.

    Raises :class:`kvtool.InvalidInputError` with reason ``BAD_BLOCK_TABLE`` for an id or slot
    outside the cache, negative, used twice, or a table too short; ``UNSUPPORTED_CACHE`` for a
    layout without heads or K and V that are one tensor (MLA latents) and fp8 without scales;
    :class:`kvtool.UsageError` for a missing table, num_tokens or a bad layout.

    Example (vLLM FlashAttention, a list of per-layer ``kv_caches``)::

        k, v = kvtool.gather_paged(kv=kv_caches, layout="2,N,S,H,d", block_table=table, num_tokens=T)
        kvtool.write_dump("x.h5", k, v)
    """
    axes = _parse_layout(layout)
    stacked, has_l = "2" in axes, "L" in axes
    if stacked and (kv is None or k is not None or v is not None):
        raise _usage("a layout with a 2 axis (K and V stacked) takes kv=, not k= and v=")
    if not stacked and (kv is not None or k is None or v is None):
        raise _usage("a layout without a 2 axis takes k= and v= (kv= is for K and V stacked on a 2 axis)")
    if not stacked and k is v:
        raise _invalid("k and v are the same tensor: a cache without separate K and V (an MLA latent) is not "
                       "per-head K and V", "UNSUPPORTED_CACHE")
    if isinstance(batch_index, bool) or not isinstance(batch_index, (int, np.integer)) or batch_index < 0:
        raise _usage(f"batch_index must be a non-negative integer, got {batch_index!r}")
    sides = [(kv, 0), (kv, 1)] if stacked else [(k, None), (v, None)]
    arrays = [_per_layer(x, name, has_l) for (x, _), name in zip(sides, ("k", "v") if not stacked else ("kv", "kv"))]
    layer_axes = axes if has_l else [a for a in axes if a != "L"]
    first = arrays[0][1] if has_l else arrays[0][0][0]
    layers = first.shape[axes.index("L")] if has_l else len(arrays[0][0])
    for lists, whole in arrays:
        for a in ([whole] if has_l else lists):
            if a.ndim != len(layer_axes) or a.shape != first.shape:
                raise _invalid(f"a cache tensor has shape {tuple(a.shape)}; layout {layout!r} and the first have "
                               f"{tuple(first.shape)}", "SHAPE_MISMATCH")
        if not has_l and len(lists) != layers:
            raise _invalid(f"k has {layers} layers but v has {len(lists)}", "SHAPE_MISMATCH")
    if "B" in axes and batch_index >= first.shape[layer_axes.index("B")]:
        raise _usage(f"batch_index {batch_index} is outside the B axis of the cache")
    slots, per = _slots(layer_axes, first.shape, num_tokens, block_table, slot_mapping, batch_index)
    out = []
    for (lists, whole), (_, kv_index), scale, name in zip(arrays, sides, (k_scale, v_scale), ("k_scale", "v_scale")):
        scales = _scales(scale, name, layers, fp8)
        result = []
        for layer in range(layers):
            fixed = {"B": batch_index}
            if kv_index is not None:
                fixed["2"] = kv_index
            if has_l:
                fixed["L"] = layer
            x = whole if has_l else lists[layer]
            result.append(_layer(x, layer_axes, {a: i for a, i in fixed.items() if a in layer_axes}, slots, per,
                                 scales[layer], fp8))
        out.append(result)
    return out[0], out[1]
