"""README recipe "HF transformers past_key_values -> kvtool.from_cache, capturing queries with hooks".

transformers is not installed here, so the model is the PyTorch llama2.c example
(python/examples/llama2c_torch.py), which behaves as an HF causal LM with ``use_cache=True``:
``model(input_ids, past_key_values=cache)`` returns logits and a cache with ``key_cache`` /
``value_cache`` lists (HF DynamicCache). The recipe's steps are run as a user writes them:

1. forward hooks record the post-RoPE queries of every layer (here on ``attn.q_rope``; in HF
   Llama the README's hook recomputes them from ``q_proj`` and ``position_embeddings``);
2. the prompt runs in one call (prefill), then greedy steps reuse the cache (decode) — queries of
   the decode steps only are kept, as ``kvtool eval`` wants queries after the indexed prefix;
3. ``kvtool.from_cache`` writes the DynamicCache-style object and the legacy tuple of ``(k, v)``.

Checks: both dumps hold exactly the cache tensors and the hook-recorded queries (float16), at the
right rows, for the right sequence of a batch of 2; both verify; the two cache forms give the same
file content; an artifact built on the dump evaluates with the captured decode queries.
"""
import hashlib
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

SOURCE = os.environ["KVTOOL_SOURCE"]
MODELS = os.path.join(os.environ["KVTOOL_SHARED"], "models")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(SOURCE, "python", "examples"))
from llama2c_torch import Llama2c, encode  # noqa: E402


def fail(msg):
    sys.exit("FAIL: " + msg)


ckpt = os.path.join(MODELS, "stories260K.bin")
model = Llama2c(ckpt)
texts = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
         "her friends. One day, she saw a big red ball under a tree.",
         "The little dog was very happy. He ran to the garden and found a stick. He played with the stick all "
         "day long, and then he went home to sleep.")
prompts = [encode(os.path.join(MODELS, "tok512.bin"), 512, t) for t in texts]
n = min(map(len, prompts))
input_ids = torch.tensor([p[:n] for p in prompts])  # a batch of 2 prompts, [2, n]
DECODE = 40

# ---- the recipe ------------------------------------------------------------------------------------
captured = {}  # layer -> list of post-RoPE query tensors [batch, q_heads, t, d], one per forward call


def record_q(layer):
    def hook(module, args, output):
        captured.setdefault(layer, []).append(output.detach())
    return hook


hooks = [blk.attn.q_rope.register_forward_hook(record_q(i)) for i, blk in enumerate(model.layers)]
with torch.no_grad():
    logits, past_key_values = model(input_ids)  # HF: out = model(input_ids, use_cache=True)
    captured.clear()  # keep only the decode steps' queries
    ids = input_ids
    for _ in range(DECODE):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        logits, past_key_values = model(nxt, past_key_values=past_key_values)
for h in hooks:
    h.remove()
queries = [torch.cat(captured[layer], dim=2) for layer in range(len(model.layers))]
identity = {"model_artifact_sha256": hashlib.sha256(open(ckpt, "rb").read()).hexdigest(),
            "rope_config": {"theta": 10000.0, "scaling": "none", "pairing": "interleaved",
                            "head_dim": model.config.head_dim}}
legacy = tuple(zip(past_key_values.key_cache, past_key_values.value_cache))  # HF's legacy format
# ----------------------------------------------------------------------------------------------------

T = past_key_values.get_seq_length()
if T != n + DECODE or ids.shape[1] != T:
    fail(f"cache holds {T} rows, ids {ids.shape[1]}; expected {n + DECODE}")
Tq = queries[0].shape[2]
if Tq != DECODE:
    fail(f"the hooks recorded {Tq} decode queries, expected {DECODE}")

with tempfile.TemporaryDirectory(prefix="kvtool-hf-") as w:
    paths = {}
    for form, cache in (("dynamic", past_key_values), ("legacy", legacy)):
        p = os.path.join(w, form + ".h5")
        kvtool.from_cache(cache, p, queries=queries, tokens=ids, batch_index=1, dtype="f16", identity=identity)
        paths[form] = p
        if kvtool.verify(p).get("ok") is not True:
            fail(f"{form}: kvtool.verify refused the dump")
        g = kvtool.inspect(p)["geometry"]
        want = {"layers": 5, "kv_heads": 4, "q_heads": 8, "tokens": T, "q_tokens": Tq, "head_dim": 8,
                "dtype": "float16"}
        if any(g[k] != v for k, v in want.items()):
            fail(f"{form}: geometry {g}, expected {want}")
        with h5py.File(p, "r") as f:
            f16 = lambda x: x[1].numpy().astype(np.float16)  # noqa: E731  sequence 1 of the batch
            for layer in range(len(model.layers)):
                for ds, ref in (("k", past_key_values.key_cache), ("v", past_key_values.value_cache),
                                ("q", queries)):
                    if not np.array_equal(f["kv/" + ds][layer], f16(ref[layer])):
                        fail(f"{form}: /kv/{ds} layer {layer} is not sequence 1 of the cache/hooks")
            if not np.array_equal(f["kv/tokens"][:], ids[1].numpy()):
                fail(f"{form}: /kv/tokens {f['kv/tokens'][:8]}... is not sequence 1's ids")
            # The decode queries sit at the last DECODE rows (from_cache's default q_positions).
            if not np.array_equal(f["kv/q_positions"][:], np.arange(T - Tq, T)):
                fail(f"{form}: /kv/q_positions {f['kv/q_positions'][:]}")
            if '"interleaved"' not in f.attrs["rope_config"]:
                fail(f"{form}: rope_config {f.attrs['rope_config']}")
    if kvtool.inspect(paths["dynamic"])["identity"] != kvtool.inspect(paths["legacy"])["identity"]:
        fail("the two cache forms wrote different identities")

    # What the captured queries are for: evaluating an index built on the prompt's prefix.
    art = os.path.join(w, "prompt.kvi")
    kvtool.build("pq", paths["dynamic"], art, prefix=T - Tq, subspaces=2, bits=4, iters=5, threads=1)
    r = kvtool.eval(art, paths["dynamic"], budget=0.25)
    q, mass = r["budgets"][0]["queries"], r["budgets"][0]["retained_mass_mean"]
    if q != 5 * 8 * Tq:
        fail(f"eval used {q} queries, expected every captured one ({5 * 8 * Tq})")
    if not 0 < mass < 1:
        fail(f"eval retained mass {mass}: the budget should select a strict subset of the prefix")
    print(f"ok: HF-style recipe: T={T}, {Tq} decode queries per head; DynamicCache and legacy tuple dumps "
          f"verify and match the cache; eval retained mass {r['budgets'][0]['retained_mass_mean']:.3f}")
