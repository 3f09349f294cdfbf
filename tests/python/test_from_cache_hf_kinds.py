"""kvtool.from_cache on the Hugging Face cache kinds that are not a plain dynamic cache: static,
sliding-window (static and dynamic), hybrid, quantized, MLA and fp8.

transformers is not installed here, so the caches are stand-ins that follow transformers'
src/transformers/cache_utils.py (layer API of 4.56/4.57, commit 004999d9 of the repository):
class names, attributes (``keys``, ``values``, ``is_sliding``, ``max_cache_len``,
``cumulative_length``, ``sliding_window``, ``_quantized_keys``) and the update rules (a static
layer is zero-filled and written at ``cache_position``; a static sliding layer holds
min(seen, window) rows in position order and rolls left when full; a dynamic sliding layer keeps
its last ``sliding_window - 1`` rows). Each cache is fed a known sequence of K/V rows, prefill then
decode steps, so the rows and positions a dump must hold are known exactly.

Checks: accepted kinds write exactly the filled rows, the true /kv/positions and the right values
(and verify); every refusal is UNSUPPORTED_CACHE (or USAGE) with its message and leaves no file.
"""
import os
import sys
import tempfile

try:
    import torch
except ImportError as e:
    print(f"SKIP: PyTorch is not importable ({e}); install Debian's python3-torch")
    sys.exit(77)

import h5py
import numpy as np

import kvtool

B, H, D, N = 2, 2, 8, 40  # batch, kv heads, head_dim, tokens fed
REF_K = torch.randn(B, H, N, D, generator=torch.Generator().manual_seed(1))
REF_V = torch.randn(B, H, N, D, generator=torch.Generator().manual_seed(2))
REF_K[:, :, 3] = 0.0  # a zero key row inside the filled part: a valid row, never "unfilled"
IDS = torch.arange(100, 100 + N).repeat(B, 1)


def fail(msg):
    sys.exit("FAIL: " + msg)


# ---- stand-ins for transformers' cache_utils.py layers and caches ----------------------------------
class StaticLayer:
    is_sliding = False

    def __init__(self, max_cache_len):
        self.max_cache_len, self.keys, self.values = max_cache_len, None, None

    def update(self, k, v, cache_position):
        if self.keys is None:
            self.keys = torch.zeros(B, H, self.max_cache_len, D)
            self.values = torch.zeros(B, H, self.max_cache_len, D)
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)


class StaticSlidingWindowLayer(StaticLayer):
    is_sliding = True

    def __init__(self, max_cache_len, sliding_window):
        super().__init__(min(sliding_window, max_cache_len))
        self.cumulative_length = 0

    def update(self, k, v, cache_position):
        if self.keys is None:
            self.keys = torch.zeros(B, H, self.max_cache_len, D)
            self.values = torch.zeros(B, H, self.max_cache_len, D)
        seen, w = self.cumulative_length, self.max_cache_len
        self.cumulative_length += k.shape[-2]
        if seen + k.shape[-2] <= w:
            self.keys.index_copy_(2, cache_position, k)
            self.values.index_copy_(2, cache_position, v)
            return
        full_k = torch.cat((self.keys[:, :, :min(seen, w)], k), dim=-2)  # rows in position order
        full_v = torch.cat((self.values[:, :, :min(seen, w)], v), dim=-2)
        self.keys.copy_(full_k[:, :, -w:])
        self.values.copy_(full_v[:, :, -w:])


class DynamicSlidingWindowLayer:
    is_sliding = True

    def __init__(self, sliding_window):
        self.sliding_window, self.cumulative_length = sliding_window, 0
        self.keys, self.values = torch.zeros(B, H, 0, D), torch.zeros(B, H, 0, D)

    def update(self, k, v, cache_position):
        self.cumulative_length += k.shape[-2]
        self.keys = torch.cat([self.keys, k], dim=-2)[:, :, -self.sliding_window + 1:]
        self.values = torch.cat([self.values, v], dim=-2)[:, :, -self.sliding_window + 1:]


class QuantoQuantizedLayer(DynamicSlidingWindowLayer):
    """Only what from_cache can see: the float residual ``keys`` and the ``_quantized_keys``."""
    is_sliding = False

    def __init__(self):
        super().__init__(1 << 30)
        self._quantized_keys = self._quantized_values = object()  # an optimum-quanto QTensor in HF


class Cache:
    def __init__(self, layers):
        self.layers = layers


class StaticCache(Cache):
    pass


def feed(cache, steps=(30,) + (1,) * 10):
    """Prefill then decode steps, as a model's forward calls update every layer."""
    t = 0
    for n in steps:
        pos = torch.arange(t, t + n)
        for layer in cache.layers:
            layer.update(REF_K[:, :, t:t + n], REF_V[:, :, t:t + n], pos)
        t += n
    return cache


# ---- checks -----------------------------------------------------------------------------------------
def expect_error(fn, reason, w, name, needle):
    try:
        fn()
    except kvtool.Error as e:
        if e.reason != reason or needle not in str(e):
            fail(f"expected {reason} with {needle!r}, got {e.reason}: {e}")
        left = [n for n in os.listdir(w) if n == name or n.startswith("." + name)]
        if left:
            fail(f"{reason} ({needle}): left {left} behind")
        return
    fail(f"no kvtool.Error (expected {reason}: {needle})")


def expect_dump(p, first, rows, what, b=1, tokens=True):
    if kvtool.verify(p).get("ok") is not True:
        fail(f"{what}: kvtool.verify refused the dump")
    with h5py.File(p, "r") as f:
        k, v = f["kv/k"][...], f["kv/v"][...]
        if k.shape[2] != rows:
            fail(f"{what}: {k.shape[2]} rows written, expected {rows}")
        want = slice(first, first + rows)
        for got, ref, name in ((k, REF_K, "k"), (v, REF_V, "v")):
            if not np.array_equal(got[0], ref[b, :, want].numpy().astype(np.float32)):
                fail(f"{what}: /kv/{name} is not rows {first}..{first + rows - 1} of the sequence")
        has = "kv/positions" in f
        pos = f["kv/positions"][:] if has else np.arange(rows)
        if not np.array_equal(pos, np.arange(first, first + rows)) or (first > 0 and not has):
            fail(f"{what}: /kv/positions {pos[:4]}..., expected {first}..{first + rows - 1}")
        if tokens and not np.array_equal(f["kv/tokens"][:], IDS[b, want].numpy()):
            fail(f"{what}: /kv/tokens {f['kv/tokens'][:4]}... are not the window's tokens")


with tempfile.TemporaryDirectory(prefix="kvtool-hfkinds-") as w:
    out = os.path.join(w, "out.h5")

    def path(name):
        return os.path.join(w, name + ".h5")

    # Static: 64 preallocated rows, 40 filled; the filled length comes from the caller.
    static = feed(StaticCache([StaticLayer(64) for _ in range(3)]))
    expect_error(lambda: kvtool.from_cache(static, out), "UNSUPPORTED_CACHE", w, "out.h5", "seq_length")
    expect_error(lambda: kvtool.from_cache(static, out, seq_length=65), "UNSUPPORTED_CACHE", w, "out.h5",
                 "outside [1, 64]")
    expect_dump(kvtool.from_cache(static, path("static-ids"), tokens=IDS, batch_index=1, dtype="f32"), 0, N,
                "static, tokens")
    expect_dump(kvtool.from_cache(static, path("static-n"), seq_length=N, batch_index=1, dtype="f32"), 0, N,
                "static, seq_length", tokens=False)
    expect_dump(kvtool.from_cache(static, path("static-12"), tokens=IDS[:, :12], batch_index=1, dtype="f32"), 0,
                12, "static, 12 tokens")

    # Static sliding window of 15 after 40 tokens: positions 25..39.
    ssw = feed(Cache([StaticSlidingWindowLayer(64, 15) for _ in range(3)]))
    expect_dump(kvtool.from_cache(ssw, path("ssw"), tokens=IDS, batch_index=1, dtype="f32"), 25, 15,
                "static sliding, full")
    expect_dump(kvtool.from_cache(ssw, path("ssw0"), tokens=IDS, batch_index=0, dtype="f32"), 25, 15,
                "static sliding, sequence 0", b=0)
    expect_error(lambda: kvtool.from_cache(ssw, out, positions=np.arange(15)), "USAGE", w, "out.h5", "25..39")
    young = feed(Cache([StaticSlidingWindowLayer(64, 15) for _ in range(3)]), steps=(6, 1, 1, 1, 1))
    expect_dump(kvtool.from_cache(young, path("ssw-young"), batch_index=1, dtype="f32"), 0, 10,
                "static sliding, not yet full", tokens=False)
    odd = feed(Cache([StaticSlidingWindowLayer(64, 15) for _ in range(3)]), steps=(20, 1, 1))
    expect_dump(kvtool.from_cache(odd, path("ssw-odd"), tokens=IDS[:, :22], batch_index=1, dtype="f32"), 7, 15,
                "static sliding, filled by a long prefill")

    # Dynamic sliding window of 16 keeps 15 rows: positions 25..39.
    dsw = feed(Cache([DynamicSlidingWindowLayer(16) for _ in range(2)]))
    expect_dump(kvtool.from_cache(dsw, path("dsw"), tokens=IDS, batch_index=1, dtype="f32"), 25, 15,
                "dynamic sliding")
    dsw.layers[1].cumulative_length = 12  # fewer tokens seen than rows held: inconsistent bookkeeping
    expect_error(lambda: kvtool.from_cache(dsw, out), "UNSUPPORTED_CACHE", w, "out.h5", "disagree")
    nolen = feed(Cache([DynamicSlidingWindowLayer(16)]))
    del nolen.layers[0].cumulative_length
    expect_error(lambda: kvtool.from_cache(nolen, out), "UNSUPPORTED_CACHE", w, "out.h5", "cumulative_length")

    # Hybrid (full + sliding layers): refused once the window slid, accepted while rows agree.
    hybrid = feed(StaticCache([StaticLayer(64), StaticSlidingWindowLayer(64, 15), StaticLayer(64)]))
    expect_error(lambda: kvtool.from_cache(hybrid, out, tokens=IDS), "UNSUPPORTED_CACHE", w, "out.h5", "mixes")
    short = feed(StaticCache([StaticLayer(64), StaticSlidingWindowLayer(64, 15)]), steps=(8, 1))
    expect_dump(kvtool.from_cache(short, path("hybrid-short"), batch_index=1, dtype="f32"), 0, 9,
                "hybrid before the window slides (filled length from cumulative_length)", tokens=False)
    expect_error(lambda: kvtool.from_cache(short, out, seq_length=12), "UNSUPPORTED_CACHE", w, "out.h5",
                 "seen 9 tokens")

    # Older cache-level classes (key_cache lists): sliding ones record no tokens seen.
    old = type("SlidingWindowCache", (), {"sliding_window": 15})()
    old.key_cache, old.value_cache = [ssw.layers[0].keys], [ssw.layers[0].values]
    expect_error(lambda: kvtool.from_cache(old, out), "UNSUPPORTED_CACHE", w, "out.h5", "sliding-window")
    old_static = type("StaticCache", (), {"max_cache_len": 64})()
    old_static.key_cache, old_static.value_cache = [static.layers[0].keys], [static.layers[0].values]
    expect_error(lambda: kvtool.from_cache(old_static, out), "UNSUPPORTED_CACHE", w, "out.h5", "seq_length")
    expect_dump(kvtool.from_cache(old_static, path("old-static"), tokens=IDS, batch_index=1, dtype="f32"), 0, N,
                "older StaticCache")

    # Quantized: never the float residual alone.
    quanto = feed(Cache([QuantoQuantizedLayer() for _ in range(2)]))
    expect_error(lambda: kvtool.from_cache(quanto, out), "UNSUPPORTED_CACHE", w, "out.h5", "quantized")
    old_q = type("QuantoQuantizedCache", (), {})()
    old_q.key_cache, old_q.value_cache = [REF_K[:, :, -4:]], [REF_V[:, :, -4:]]
    old_q._quantized_key_cache = [object()]
    expect_error(lambda: kvtool.from_cache(old_q, out), "UNSUPPORTED_CACHE", w, "out.h5", "quantized")

    # MLA: one latent per token, not K and V.
    latent = torch.randn(B, 1, N, 24)
    expect_error(lambda: kvtool.from_cache([(latent, latent)], out), "UNSUPPORTED_CACHE", w, "out.h5", "same tensor")
    mla = Cache([DynamicSlidingWindowLayer(1 << 30)])
    mla.kv_lora_rank = 16
    expect_error(lambda: kvtool.from_cache(mla, out), "UNSUPPORTED_CACHE", w, "out.h5", "MLA")

    # fp8: codes need their scales (value = fp8 * scale).
    class Fp8:
        """A tensor whose dtype is torch.float8_e4m3fn (torch 1.13 has none): values held as float."""

        def __init__(self, data):
            self.data, self.shape, self.dtype = data, data.shape, "torch.float8_e4m3fn"

        def __getitem__(self, i):
            return Fp8(self.data[i])

        def float(self):
            return self.data.float()

    codes_k = torch.round(REF_K * 4) / 4  # values an e4m3 code can hold
    codes_v = torch.round(REF_V * 4) / 4
    fp8 = [(Fp8(codes_k), Fp8(codes_v)), (Fp8(codes_k * 2), Fp8(codes_v * 2))]
    expect_error(lambda: kvtool.from_cache(fp8, out), "UNSUPPORTED_CACHE", w, "out.h5", "k_scale")
    expect_error(lambda: kvtool.from_cache(fp8, out, k_scale=0.5), "UNSUPPORTED_CACHE", w, "out.h5", "v_scale")
    expect_error(lambda: kvtool.from_cache(fp8, out, k_scale=-1.0, v_scale=1.0), "USAGE", w, "out.h5", "positive")
    expect_error(lambda: kvtool.from_cache(fp8, out, k_scale=[0.5], v_scale=1.0), "USAGE", w, "out.h5",
                 "per-layer")
    expect_error(lambda: kvtool.from_cache(feed(Cache([DynamicSlidingWindowLayer(99)])), out, k_scale=0.5),
                 "USAGE", w, "out.h5", "not fp8")
    p = kvtool.from_cache(fp8, path("fp8"), k_scale=0.5, v_scale=[3.0, 0.25], batch_index=1, dtype="f32")
    with h5py.File(p, "r") as f:
        for layer, (mult, vs) in enumerate(((1, 3.0), (2, 0.25))):
            if not np.array_equal(f["kv/k"][layer], (codes_k[1] * mult * 0.5).numpy()):
                fail(f"fp8 layer {layer}: K is not fp8 * k_scale")
            if not np.array_equal(f["kv/v"][layer], (codes_v[1] * mult * vs).numpy()):
                fail(f"fp8 layer {layer}: V is not fp8 * v_scale")
    if hasattr(torch, "float8_e4m3fn"):  # a torch with real fp8 tensors
        real = [(codes_k.to(torch.float8_e4m3fn), codes_v.to(torch.float8_e4m3fn))]
        expect_error(lambda: kvtool.from_cache(real, out), "UNSUPPORTED_CACHE", w, "out.h5", "k_scale")
        kvtool.from_cache(real, path("fp8-real"), k_scale=1.0, v_scale=1.0, dtype="f32")
    print(f"ok: static, sliding (static/dynamic), hybrid, older cache classes, quantized, MLA and fp8 caches; "
          f"real fp8 dtype {'tested' if hasattr(torch, 'float8_e4m3fn') else 'absent in torch ' + torch.__version__}")
