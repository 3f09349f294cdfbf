"""Reports and builds: ``inspect``, ``verify``, ``build``, ``eval`` and ``query``.

Each function runs the library call of the matching ``kvtool`` command and returns the same
object as its ``--json`` output, as a dict (so ``kvtool.verify(p)["ok"]`` reads what
``kvtool verify p --json`` prints). Failures raise :class:`kvtool.Error` with the command's reason
and exit code. The long calls (verify, build, eval, query) release the GIL: other Python threads
run meanwhile.
"""
import json
import math
import numbers
import os
import textwrap

import numpy as np

from . import _kvtool
from ._arrays import as_float32
from .errors import UsageError

__all__ = ["inspect", "verify", "build", "dump", "eval", "eval_decode", "query"]


def _usage(msg):
    return UsageError(msg, "USAGE", 2)


def _path(p, name):
    """A str or os.PathLike file path (UsageError otherwise)."""
    try:
        p = os.fspath(p)
    except TypeError:
        raise _usage(f"{name} must be a path (str or os.PathLike), got {type(p).__name__}") from None
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p or "\0" in p:
        raise _usage(f"{name} must be a non-empty path without NUL characters")
    return p


def _int(x, name, minimum=None):
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise _usage(f"{name} must be an integer, got {x!r}")
    x = int(x)
    if minimum is not None and x < minimum:
        raise _usage(f"{name} must be >= {minimum}, got {x}")
    if x >= 2**63:
        raise _usage(f"{name} is out of range: {x}")
    return x


def _setting_text(name, v):
    """One query/eval option value as the text the command line would carry."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        v = float(v)
        if not math.isfinite(v):
            raise _usage(f"{name} must be finite, got {v}")
        return repr(v)
    if isinstance(v, str):
        return v
    raise _usage(f"{name} must be a number, a bool or a string, got {type(v).__name__}")


def _settings(settings):
    """**settings of query/Pool queries -> {name: text} (None values dropped)."""
    return {k: _setting_text(k, v) for k, v in settings.items() if v is not None}


def _sweep_lists(sweep):
    """Swept query options (a value or a list of values each) -> name: [value text, ...]."""
    lists = {}
    for name, values in sweep.items():
        if values is None:
            continue
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            values = [values]
        lists[name] = [_setting_text(name, v) for v in values]
        if not lists[name]:
            raise _usage(f"{name}: an empty list of values to sweep")
    return lists


def _key_paths(keys, name="trusted_keys"):
    if isinstance(keys, (str, os.PathLike)):
        keys = [keys]
    try:
        return [_path(k, name) for k in keys]
    except TypeError:
        raise _usage(f"{name} must be a sequence of PEM paths or key directories") from None


def inspect(path, *, top_channels=3, unchecked=False):
    """What ``kvtool inspect PATH --json`` prints, as a dict.

    ``path`` is a dump (HDF5) or an artifact (.kvi), told apart by content. A dump: shapes, dtype,
    identity, frontier, byte ledger, per-(layer, head) health with ``top_channels`` outlier
    channels. An artifact: manifest, sections, signature, source binding, after the checks
    ``verify`` runs (``unchecked=True`` looks into one that fails them, as ``--unchecked``).
    """
    top = _int(top_channels, "top_channels", 0)
    return json.loads(_kvtool.inspect(_path(path, "path"), top, bool(unchecked)))


def verify(path, *, source=None, strict_snapshot=False, trusted_keys=(), require_signature=False):
    """What ``kvtool verify PATH --json`` prints, as a dict; raises kvtool.Error when it fails.

    For an artifact: structure, every digest, the signature, and with ``source`` (a dump path) the
    content binding to that dump (``strict_snapshot``: also its generations and frontier).
    ``trusted_keys``: PEM public key files or directories of ``*.pem`` (as ``--pubkey`` /
    ``--trusted-keys``); ``require_signature`` needs at least one.
    """
    src = "" if source is None else _path(source, "source")
    return json.loads(
        _kvtool.verify(_path(path, "path"), src, bool(strict_snapshot), _key_paths(trusted_keys), bool(require_signature))
    )


def _seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**64:
        raise _usage(f"seed must be an integer in [0, 2**64), got {seed!r}")
    return int(seed)


def _layer_range(layers):
    """layers= as (first, last): None (all), an int, "A-B", "A" or a (first, last) pair."""
    if layers is None:
        return 0, -1
    if isinstance(layers, str):
        parts = layers.split("-")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            nums = []
        if len(nums) not in (1, 2) or min(nums) < 0:
            raise _usage(f"layers must be 'A-B' (inclusive), 'A', an int or a (first, last) pair, got {layers!r}")
        return nums[0], nums[-1]
    if isinstance(layers, numbers.Integral) and not isinstance(layers, bool):
        return _int(layers, "layers", 0), int(layers)
    try:
        first, last = layers
    except (TypeError, ValueError):
        raise _usage(f"layers must be 'A-B', an int or a (first, last) pair, got {layers!r}") from None
    return _int(first, "layers[0]", 0), _int(last, "layers[1]", 0)


def _shard(shard):
    """shard= as (index, count): None, "I/N" or an (index, count) pair."""
    if shard is None:
        return 0, 1
    if isinstance(shard, str):
        try:
            i, n = (int(p) for p in shard.split("/"))
        except ValueError:
            raise _usage(f"shard must be 'I/N' or an (index, count) pair, got {shard!r}") from None
    else:
        try:
            i, n = shard
        except (TypeError, ValueError):
            raise _usage(f"shard must be 'I/N' or an (index, count) pair, got {shard!r}") from None
        i, n = _int(i, "shard index"), _int(n, "shard count")
    if not (n >= 1 and 0 <= i < n):
        raise _usage(f"shard must be I/N with 0 <= I < N, got {i}/{n}")
    return i, n


def _json_value(v):
    """A build parameter as JSON: numbers, strings, bools, lists of them (NumPy values too)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (tuple, list)):
        return [_json_value(x) for x in v]
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return v


def _dumps(obj, what):
    try:
        return json.dumps(obj, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _usage(f"{what}: {e}") from None


def build(kind, dump, out, *, prefix=None, sink=None, local=None, layers=None, seed=0, threads=0, sign_key=None,
          shard=None, **params):
    """Build an index of ``kind`` ("pq", "clusterkv", "lsh", "squeeze") over ``dump`` into the
    artifact ``out``; returns what ``kvtool build KIND ... --json`` prints (its ``manifest_sha256``,
    ``content_digest``, parts, coverage) as a dict.

    The common options are those of every ``kvtool build``: ``prefix`` (coverage end; default the
    dump's committed frontier), ``sink``/``local`` (default: per kind), ``layers`` ("A-B", an int or
    a (first, last) pair), ``seed``, ``threads`` (0: every CPU; the artifact does not depend on
    it), ``sign_key`` (Ed25519 PEM), ``shard`` ("I/N" or (I, N)) and ``zstd_level`` (0..19,
    default 3). ``params`` are the kind's options with ``_`` for ``-``, listed below with their
    type, default, accepted values, option and help (from each kind's parameter table,
    lib/kinds/include/kvtool/kinds/KIND_params.def); clusterkv and squeeze also take ``kmeans``
    ("flat" | "tree" | "auto"), ``kmeans_branching`` and ``kmeans_leaf_clusters``. A name the kind
    does not take raises UsageError. The same options and seed give the artifact the command line
    gives, byte for byte; nothing is left at ``out`` when the build fails.

    {params}
    """
    if not isinstance(kind, str):
        raise _usage(f"kind must be a string, got {type(kind).__name__}")
    first, last = _layer_range(layers)
    index, count = _shard(shard)
    zstd = params.pop("zstd_level", 3)
    options = {
        "output": _path(out, "out"),
        "prefix": -1 if prefix is None else _int(prefix, "prefix", 0),
        "sink": -1 if sink is None else _int(sink, "sink", 0),
        "local": -1 if local is None else _int(local, "local", 0),
        "layer_first": first,
        "layer_last": last,
        "seed": _seed(seed),
        "threads": _int(threads, "threads", 0),
        "shard_index": index,
        "shard_count": count,
        "sign_key": "" if sign_key is None else _path(sign_key, "sign_key"),
        "zstd_level": _int(zstd, "zstd_level", 0),
    }
    if options["threads"] >= 2**31:
        raise _usage(f"threads is out of range: {threads}")
    kind_params = {k: _json_value(v) for k, v in params.items() if v is not None}
    text = _kvtool.build(kind, _path(dump, "dump"), _dumps(options, "build options"),
                         _dumps(kind_params, f"{kind} parameters"))
    return json.loads(text)



def _params_doc():
    """Each kind's build parameters as docstring text, from the tables _kvtool.kind_params() reads."""
    lines = []
    for kind, rows in _kvtool.kind_params():
        lines.append(f"{kind}:")
        for r in rows:
            default = json.dumps(r["default"]) if r["default"] is not None else "none"
            head = f"``{r['name']}`` ({r['type']}, default {default}; {r['bounds']}; {r['flag']}): "
            lines.extend(textwrap.wrap(head + r["help"], 96, initial_indent="  ", subsequent_indent="      "))
    return "\n    ".join(lines)


if build.__doc__:  # None under python -OO
    build.__doc__ = build.__doc__.replace("{params}", _params_doc())

def eval(artifact, dump, *, records=False, positions="all", positions_seed=0, share_kv_head=False,  # noqa: A001
         **sweep):
    """Evaluate ``artifact`` against dense attention over ``dump``'s recorded queries; returns what
    ``kvtool eval ART --source DUMP --json`` prints, as a dict (one entry of ``"budgets"`` per
    setting: retained mass, oracle, recall, output error, selected fraction, bytes).

    ``sweep``: the kind's query options, each a value or a list of values to sweep (every
    combination is one setting), e.g. ``budget=[0.05, 0.1]`` (pq, clusterkv),
    ``min_collisions=[1, 2]`` (lsh), ``quantile=0.8, flat=True`` (squeeze). Options not named take
    the kind's defaults, as on the command line; a name the kind does not take raises UsageError.
    With ``records=True``, ``result["records"]`` is a list of dicts, one per (setting, layer, query
    head, position) with the columns of ``eval --csv`` (``pandas.DataFrame(result["records"])``).
    ``positions``: ``"all"`` (default), ``"every:K"`` or ``"random:N"`` (drawn with
    ``positions_seed``) of the dumped query positions, as ``--positions``; ``result["position_sample"]``
    lists those evaluated. ``share_kv_head=True``: one selection per KV head from the mean of its query
    heads' queries, as ``--share-kv-head``.
    """
    lists = _sweep_lists(sweep)
    if not isinstance(positions, str):
        raise _usage(f"positions: 'all', 'every:K' or 'random:N', not {positions!r}")
    text, recs = _kvtool.eval(_path(artifact, "artifact"), _path(dump, "dump"), lists, bool(records), positions,
                              int(positions_seed), _flag(share_kv_head, "share_kv_head"))
    result = json.loads(text)
    if records:
        result["records"] = recs
    return result


def dump(out, *, gguf, prompt=None, token_ids=None, tokens=0, queries=False, dtype="f32", activations="exact",
         threads=0, overwrite=False):
    """``kvtool dump --gguf``: runs the GGUF model ``gguf`` (llama, qwen2; docs/models.md) over a
    prompt — ``prompt`` (text, through the GGUF's own tokenizer, BOS as the GGUF says) or
    ``token_ids`` (a sequence of ids), one of them — prefilled in one batch, then greedy decoding up
    to ``tokens`` positions (0: the prompt's length); writes the dump ``out`` (post-RoPE K, V, with
    ``queries=True`` Q) and returns what ``--json`` prints, as a dict. ``activations``: "exact" or
    "llama.cpp" (each product's input rounded as llama.cpp's CPU kernels do). ``threads``: 0 is
    the CPUs this process may use.
    """
    if (prompt is None) == (token_ids is None):
        raise _usage("give the prompt as prompt= (text) or token_ids= (ids), one of them")
    if prompt is not None and not isinstance(prompt, str):
        raise _usage(f"prompt: text, not {type(prompt).__name__}")
    ids = []
    if token_ids is not None:
        if isinstance(token_ids, (str, bytes)):
            raise _usage("token_ids: a sequence of integers, not text")
        try:
            ids = [_int(t, "token_ids[i]", 0) for t in token_ids]
        except TypeError:
            raise _usage("token_ids: a sequence of integers") from None
        if not ids:
            raise _usage("token_ids: at least one token")
    if activations not in ("exact", "llama.cpp"):
        raise _usage(f"activations: 'exact' or 'llama.cpp', not {activations!r}")
    text = _kvtool.dump_gguf(_path(gguf, "gguf"), _path(out, "out"), prompt or "", prompt is not None, ids,
                             _int(tokens, "tokens", 0), _flag(queries, "queries"), str(dtype),
                             activations == "llama.cpp", min(_int(threads, "threads", 0) or os.cpu_count() or 1, 1024),
                             _flag(overwrite, "overwrite"))
    return json.loads(text)


def eval_decode(artifacts, source, *, llama2c=None, gguf=None, steps=0, baselines=(), window_sinks=4,
                share_kv_head=False, tokenizer=None, answer=None, estimated_zone=False, **sweep):
    """Decode ``source``'s tokens with the model that produced the dump — the llama2.c checkpoint
    ``llama2c`` or the GGUF model ``gguf`` (llama, qwen2; ``kvtool dump --gguf``), one of them —
    densely and with each artifact's sparse attention through a runtime pool; returns what
    ``kvtool eval-decode ART... --llama2c M --source DUMP --json`` prints, as a dict (one entry
    of ``"results"`` per artifact and setting: selected fraction and its union per KV head, mean
    and max KL(dense || sparse), top-1 agreement, perplexities, first greedy divergence or None).

    ``artifacts``: a path or a list of paths. ``steps``: decode steps (0: up to 64 the dump holds).
    ``baselines``: any of ``"window"``, ``"topk"`` and ``"heavy"``, each a row per setting with its
    row count. ``share_kv_head=True``: one selection per KV head, as ``--share-kv-head``.
    ``tokenizer`` (with ``llama2c``): the model's llama2.c tokenizer; each result then has ``"diverge_text"`` (the
    greedy text both runs produced, then dense's and sparse's next token), as ``--tokenizer``.
    ``answer=(start, end)``: a task's answer, the dump's tokens at positions [start, end), as
    ``--answer START:END``; each result then has ``"answer"``: how many of them dense and sparse
    decoding predict under teacher forcing, and whether all. ``estimated_zone=True``: cluster kinds
    also decode each setting with the rows they leave out estimated per cluster, as
    ``--estimated-zone`` (results with ``" +est"`` settings).
    ``sweep``: the kinds' query options as for :func:`eval` (``budget=[0.05, 0.1]``,
    ``quantile=0.8``, ``min_collisions=2``); kinds ignore the names they do not take, and a name
    no kind takes raises UsageError.
    """
    if isinstance(artifacts, (str, bytes, os.PathLike)):
        artifacts = [artifacts]
    paths = [_path(a, "artifact") for a in artifacts]
    if not paths:
        raise _usage("artifacts: give at least one artifact")
    if isinstance(baselines, str):
        baselines = [baselines]
    for b in baselines:
        if b not in ("window", "topk", "heavy"):
            raise _usage(f"baselines: 'window', 'topk' or 'heavy', not {b!r}")
    for name, v in (("steps", steps), ("window_sinks", window_sinks)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 2**31:
            raise _usage(f"{name}: an integer in 0..2^31, not {v!r}")
    if (llama2c is None) == (gguf is None):
        raise _usage("give the model that produced the dump: llama2c= or gguf=, one of them")
    if gguf is not None and tokenizer is not None:
        raise _usage("tokenizer= is a llama2.c tokenizer; it goes with llama2c=")
    model = _path(llama2c, "llama2c") if gguf is None else _path(gguf, "gguf")
    span = (-1, -1)
    if answer is not None:
        if (not isinstance(answer, (tuple, list)) or len(answer) != 2 or
                any(isinstance(v, bool) or not isinstance(v, int) for v in answer) or
                not 0 <= answer[0] < answer[1] <= 2**31):
            raise _usage(f"answer: (start, end) with 0 <= start < end, token positions, not {answer!r}")
        span = (answer[0], answer[1])
    lists = _sweep_lists(sweep)
    text = _kvtool.eval_decode(paths, _path(source, "source"), model, steps, lists,
                               list(baselines), window_sinks, _flag(share_kv_head, "share_kv_head"),
                               "" if tokenizer is None else _path(tokenizer, "tokenizer"), span[0], span[1],
                               _flag(estimated_zone, "estimated_zone"))
    return json.loads(text)


def _flag(value, name):
    """A bool argument, strictly (an int or a string is a UsageError, not truthiness)."""
    if not isinstance(value, bool):
        raise _usage(f"{name}: True or False, not {value!r}")
    return value


def _receipt(answer):
    """(JSON text, candidates, scores) from the bindings -> the receipt dict with arrays."""
    text, ids, scores = answer
    r = json.loads(text)
    r["candidates"] = ids
    r["scores"] = scores
    return r


def query(artifact, source, *, layer, q_head, position=None, vector=None, **settings):
    """The candidate receipt of one query, as ``kvtool query ART --source DUMP --json`` prints it,
    with ``"candidates"`` (np.int64 row ids) and ``"scores"`` (np.float32) as arrays.

    The query is ``vector`` (d numbers: NumPy array, torch CPU tensor or list; ``position``
    defaults to the coverage end - 1) or the dumped query of (``layer``, ``q_head``) at
    ``position``. ``settings`` are the kind's query options, e.g. ``budget=0.1`` or ``budget=64``
    (pq, clusterkv), ``min_collisions=2`` (lsh), ``quantile=0.8, flat=True`` (squeeze); a name the
    kind does not take raises UsageError.
    """
    layer = _int(layer, "layer")
    q_head = _int(q_head, "q_head")
    pos = None if position is None else _int(position, "position")
    vec = None if vector is None else as_float32(vector, "vector", ndim=1)
    return _receipt(_kvtool.query(_path(artifact, "artifact"), _path(source, "source"), layer, q_head, pos, vec,
                                  _settings(settings)))
