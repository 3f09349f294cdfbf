"""The runtime pool from Python: :class:`Pool` publishes signed artifacts under keys (each publish
is a new generation), :class:`Lease` pins one generation while it is queried.

The answers are those of the C++ pool (``kvtool load`` replays dumped queries through the same
code) and of ``kvtool query``: the same candidates and scores. Publishing, retiring and queries
release the GIL, so several Python threads can query one pool at once.

Example::

    pool = kvtool.Pool(host_budget=1 << 30)
    pool.publish("doc-1", "doc.pq.kvi")
    with pool.acquire("doc-1") as lease:
        r = lease.query(layer=0, q_head=3, q=q_vector, position=300, budget=0.1)
        r["candidates"], r["scores"]  # np.int64, np.float32
"""
import json
import operator
import threading
import weakref

from . import _kvtool
from ._arrays import as_float32
from .errors import Error, UsageError
from .reports import _int, _key_paths, _path, _receipt, _settings

__all__ = ["Pool", "Lease"]


def _usage(msg):
    return UsageError(msg, "USAGE", 2)


def _stream(stream):
    """A CUDA stream handle (cudaStream_t as an int) from None, an int or a torch.cuda.Stream."""
    if stream is None:
        return 0
    handle = getattr(stream, "cuda_stream", stream)
    try:
        value = None if isinstance(handle, bool) else operator.index(handle)
    except TypeError:
        value = None
    if value is None or not 0 <= value < 2**64:
        raise _usage(f"stream must be None, a CUDA stream (with .cuda_stream) or its handle as an int, got {stream!r}")
    return value


def _key(key):
    if not isinstance(key, str) or not key:
        raise _usage(f"key must be a non-empty string, got {key!r}")
    return key


def _keys_array(keys):
    """keys= for kinds whose receipts need the full key rows (lsh): None, [E, d] or [kv_heads, E, d]."""
    if keys is None:
        return None
    a = as_float32(keys, "keys")
    if a.ndim not in (2, 3):
        raise _usage(f"keys must be [E, d] or [kv_heads, E, d], got shape {tuple(a.shape)}")
    return a


class Lease:
    """A pin on one published generation of a pool key: while it is held, that generation is
    neither freed nor evicted, even after a newer one is published under the key or the key is
    retired, and every query through it answers from that generation.

    Get one from :meth:`Pool.acquire`; use it as a context manager (released on exit) or call
    :meth:`release`. ``generation`` is the pool generation, ``key`` the pool key.
    """

    def __init__(self, native, owner):
        self._native = native
        self._thread = threading.get_ident()
        owner._leases.add(self)

    @property
    def generation(self):
        """The pool generation this lease pins (increases with every publish of the pool)."""
        return self._native.generation

    @property
    def key(self):
        """The pool key it was acquired under."""
        return self._native.key

    @property
    def held(self):
        """False once released."""
        return self._native.held

    def release(self):
        """Lets the generation go (idempotent); queries through this lease then raise UsageError."""
        self._native.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def query(self, layer, q_head, q, position, keys=None, **settings):
        """The receipt (a dict, as ``kvtool query --json``, with np.int64 ``"candidates"`` and
        np.float32 ``"scores"``) of query vector ``q`` (d numbers: NumPy, torch CPU tensor or list)
        of query head ``q_head`` in ``layer``, sitting at row ``position`` (>= coverage end - 1,
        below 2^31, and at most 2^20 rows past the index's end: the rows past it are listed as
        always included; a position beyond is UsageError).

        ``settings``: the kind's query options (``budget=0.1``, ``min_collisions=2``,
        ``quantile=0.8``, ``flat=True``); a name the kind does not take raises UsageError.
        ``keys``: the full key rows for kinds whose receipts carry inclusion probabilities (lsh):
        [E, d] of the query's kv head, or [kv_heads, E, d]; without them lsh gives candidates only.
        """
        return _receipt(self._native.query(_int(layer, "layer"), _int(q_head, "q_head"), as_float32(q, "q", ndim=1),
                                           _int(position, "position"), _keys_array(keys), _settings(settings)))

    def query_batch(self, layer, q_heads, Q, position, keys=None, **settings):
        """One receipt per row of ``Q`` ([n, d]; row i is a query of head ``q_heads[i]``), all at
        ``position`` in ``layer``, from this lease's generation, in one call with the GIL released.
        Equal to n calls of :meth:`query`. ``keys``, ``settings``: as :meth:`query` (``keys``
        [kv_heads, E, d] serves heads of different kv heads; with them ``rerank`` applies, as in
        :meth:`query`, while :meth:`select` refuses it).
        """
        try:
            heads = [_int(h, "q_heads[i]") for h in q_heads]
        except TypeError:
            raise _usage("q_heads must be a sequence of query heads, one per row of Q") from None
        answers = self._native.query_batch(_int(layer, "layer"), heads, as_float32(Q, "Q", ndim=2),
                                           _int(position, "position"), _keys_array(keys), _settings(settings))
        return [_receipt(a) for a in answers]

    def select(self, layer, q_heads, Q, positions, *, capacity=None, threads=1, keys=None, stream=None, **settings):
        """The batched decode-time call: the candidates of every row of ``Q`` ([n, d]; row i is a
        query of head ``q_heads[i]`` at ``positions[i]``, or all at ``positions`` when it is one
        int) in ``layer``, without receipts, spread over ``threads`` threads with the GIL released.
        Returns ``(ids, scores, counts, inclusion)``: ``ids`` np.int64 [n, capacity] (row i: the
        candidates :meth:`query` gives, in its order, padded with -1), ``scores`` np.float32
        [n, capacity] (padded with 0), ``counts`` np.int64 [n] (how many row i has; above
        ``capacity`` the rest are cut), ``inclusion`` np.float64 [n, capacity] with ``keys``
        ([kv_heads, E, d], lsh), else None. ``capacity`` defaults to the artifact's covered rows
        (room for every candidate). ``stream``: the CUDA stream the device tier scores on (a
        ``torch.cuda.Stream``, anything with a ``cuda_stream`` handle, or the handle as an int;
        None: the device's default stream); the call still returns with the answers in place.
        """
        try:
            heads = [_int(h, "q_heads[i]") for h in q_heads]
        except TypeError:
            raise _usage("q_heads must be a sequence of query heads, one per row of Q") from None
        try:
            pos = [_int(p, "positions[i]") for p in positions]
        except TypeError:  # one position for every row
            pos = [_int(positions, "positions")] * len(heads)
        cap = -1 if capacity is None else _int(capacity, "capacity", 0)
        return self._native.select(_int(layer, "layer"), heads, as_float32(Q, "Q", ndim=2), pos, cap,
                                   _int(threads, "threads", 1), _keys_array(keys), _settings(settings),
                                   _stream(stream))


class Pool:
    """A runtime pool of index artifacts (the C++ ``kvtool::Pool``; ``man -l man/libkvtool.3``).

    ``host_budget``: bytes the host tier may hold (publishing past it evicts unleased generations
    in LRU order, else raises kvtool.Error HOST_BUDGET_EXCEEDED). ``device=True`` adds the CUDA
    device tier (``device_budget`` bytes); it raises DEVICE_UNAVAILABLE where there is no usable
    GPU or this module was built without CUDA. ``device_batch_queries``: queries of one part the
    device's batch buffers are sized for at publish (:meth:`Lease.select` sends each part's queries
    to the device together; more go in several batches; 0: one by one).
    """

    def __init__(self, host_budget=4 << 30, device=False, *, device_budget=4 << 30, device_batch_queries=64):
        self._native = _kvtool.Pool(_int(host_budget, "host_budget", 1), _int(device_budget, "device_budget", 0),
                                    bool(device), _int(device_batch_queries, "device_batch_queries", 0))
        self._leases = weakref.WeakSet()

    @property
    def device_available(self):
        """Whether this pool has a device tier."""
        return self._native.device_available

    def publish(self, key, artifact, *, expected_content_digest=None, tenant=None, trusted_keys=(),
                require_signature=False, device=False):
        """Publish ``artifact`` (a .kvi path) as the next generation of ``key``; returns the publish
        receipt (pool ``generation``, kind, digests, bytes per tier, timings, evicted keys) as a dict.

        The copied bytes are checked as ``kvtool verify`` checks the file; ``expected_content_digest``
        (the dump range the runtime serves) and ``tenant`` must match the artifact's source when
        given; ``trusted_keys`` (PEM files or directories) and ``require_signature`` are the trust
        policy. The previous generation stays alive for its leases, then is freed.
        """
        text = self._native.publish(_key(key), _path(artifact, "artifact"), expected_content_digest or "",
                                    tenant or "", _key_paths(trusted_keys), bool(require_signature), bool(device))
        return json.loads(text)

    def acquire(self, key):
        """A :class:`Lease` on the generation visible under ``key`` (kvtool.Error NOT_PUBLISHED when none)."""
        return Lease(self._native.acquire(_key(key)), self)

    def query(self, key, layer, q_head, q, position, keys=None, **settings):
        """One query under a lease held for the call: :meth:`Lease.query` of :meth:`acquire` (key)."""
        with self.acquire(key) as lease:
            return lease.query(layer, q_head, q, position, keys=keys, **settings)

    def retire(self, key, wait=True):
        """Hide ``key``'s generation; with ``wait``, block until its leases are released and its
        memory returned. Returns False when nothing was published under ``key``.

        Waiting while this thread itself holds a lease on that generation would never return: that
        raises UsageError instead (release the lease first, or pass ``wait=False``).
        """
        key = _key(key)
        if wait:
            self._refuse_self_wait(key)
        return self._native.retire(key, bool(wait))

    def _refuse_self_wait(self, key):
        try:
            probe = self._native.acquire(key)
        except Error:
            return  # nothing visible: retire answers False without waiting
        generation = probe.generation
        probe.release()
        me = threading.get_ident()
        for lease in list(self._leases):
            if lease._thread == me and lease.held and lease.key == key and lease.generation == generation:
                raise _usage(f"retire('{key}', wait=True) while this thread holds a lease on generation "
                             f"{generation} would wait forever; release the lease first or pass wait=False")

    def stats(self):
        """Bytes used and budgets per tier (``device.batch_buffers``: the device backend's batch buffers,
        outside its budget), published / retiring generations, in-flight copies (dict)."""
        return json.loads(self._native.stats())

    def keys(self):
        """The keys with a visible generation."""
        return list(self._native.keys())

    def __repr__(self):
        s = self.stats()
        return f"<kvtool.Pool {len(self.keys())} keys, host {s.get('host_used')}/{s.get('host_budget')} bytes>"

