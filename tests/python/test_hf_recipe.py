"""The Hugging Face recipe: transformers' past_key_values -> kvtool.from_cache, queries captured with hooks.

Part 2 (at the end) runs the transformers block of docs/python.md itself, verbatim, against a stand-in
``transformers`` package and checks the dump against the stand-in model's own K, V and Q.

transformers is not installed here, so the model is the PyTorch llama2.c example
(python/examples/llama2c_torch.py), which behaves as an HF causal LM with ``use_cache=True``:
``model(input_ids, past_key_values=cache)`` returns logits and a cache with ``key_cache`` /
``value_cache`` lists (HF DynamicCache). The recipe's steps are run as a user writes them:

1. forward hooks record the post-RoPE queries of every layer (here on ``attn.q_rope``; in HF
   Llama the documented hook recomputes them from ``q_proj`` and ``position_embeddings``);
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


# ---- docs/python.md's transformers block, run verbatim against a stand-in transformers -------------
# A small Llama with Hugging Face's module names (model.model.layers[i].self_attn.q_proj,
# model.model.rotary_emb), config fields, rotate-half RoPE (apply_rotary_pos_emb) and a layer-API
# DynamicCache (layers[i].keys/.values), as transformers 4.56/4.57 define them. Each attention keeps
# the post-RoPE query it used, so the block's hook-recomputed queries can be checked against it.
STAND_IN = '''
import torch
from types import SimpleNamespace


class DynamicLayer:
    def __init__(self):
        self.keys = self.values = None

    def update(self, k, v):
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=-2)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=-2)
        return self.keys, self.values


class DynamicCache:
    def __init__(self, n):
        self.layers = [DynamicLayer() for _ in range(n)]


class LlamaRotaryEmbedding(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))

    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class LlamaAttention(torch.nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.layer_idx, self.head_dim = layer_idx, cfg.head_dim
        self.q_proj = torch.nn.Linear(cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, bias=False)
        self.k_proj = torch.nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(self, h, position_embeddings, cache):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        shape = (*h.shape[:-1], -1, self.head_dim)
        q = self.q_proj(h).view(shape).transpose(1, 2)
        k = self.k_proj(h).view(shape).transpose(1, 2)
        v = self.v_proj(h).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        self.used_q = q
        k, v = cache.layers[self.layer_idx].update(k, v)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = q @ k.transpose(-1, -2) / self.head_dim ** 0.5
        s = s + torch.full(s.shape[-2:], float("-inf")).triu(1 + k.shape[2] - q.shape[2])
        return self.o_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(*h.shape[:-1], -1))


class LlamaForCausalLM(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.model.rotary_emb = LlamaRotaryEmbedding(cfg)
        self.model.layers = torch.nn.ModuleList()
        for i in range(cfg.num_hidden_layers):
            block = torch.nn.Module()
            block.self_attn = LlamaAttention(cfg, i)
            self.model.layers.append(block)
        self.lm_head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, use_cache=True, past_key_values=None):
        cache = past_key_values or DynamicCache(len(self.model.layers))
        start = 0 if cache.layers[0].keys is None else cache.layers[0].keys.shape[2]
        h = self.model.embed_tokens(input_ids)
        pos = torch.arange(start, start + input_ids.shape[1])[None]
        pe = self.model.rotary_emb(h, pos)
        for block in self.model.layers:
            h = h + block.self_attn(h, pe, cache)
        return SimpleNamespace(logits=self.lm_head(h), past_key_values=cache)


class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(name, torch_dtype=None):
        torch.manual_seed(0)
        cfg = SimpleNamespace(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                              rope_theta=10000.0, num_hidden_layers=3, vocab_size=97)
        return LlamaForCausalLM(cfg).to(torch_dtype or torch.float32)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(name):
        return lambda text, return_tensors=None: SimpleNamespace(
            input_ids=torch.tensor([[1] + [3 + ord(c) % 90 for c in text]]))
'''
MODELING_LLAMA = '''
import torch


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)
'''


def documented_transformers_block():
    import re
    text = open(os.path.join(SOURCE, "docs", "python.md")).read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "from transformers" in b]
    if len(blocks) != 1:
        fail(f"expected one docs/python.md Python block using transformers, found {len(blocks)}")
    return blocks[0]


with tempfile.TemporaryDirectory(prefix="kvtool-hf-recipe-") as w:
    pkg = os.path.join(w, "mods", "transformers")
    os.makedirs(os.path.join(pkg, "models", "llama"))
    open(os.path.join(pkg, "__init__.py"), "w").write(STAND_IN)
    open(os.path.join(pkg, "models", "__init__.py"), "w").close()
    open(os.path.join(pkg, "models", "llama", "__init__.py"), "w").close()
    open(os.path.join(pkg, "models", "llama", "modeling_llama.py"), "w").write(MODELING_LLAMA)
    os.makedirs(os.path.join(w, "path", "to", "model"))
    open(os.path.join(w, "path", "to", "model", "model.safetensors"), "wb").write(b"stand-in weights")
    sys.path.insert(0, os.path.join(w, "mods"))
    cwd = os.getcwd()
    os.chdir(w)
    try:
        scope = {}
        exec(compile(documented_transformers_block(), "docs/python.md (transformers block)", "exec"), scope)
    finally:
        os.chdir(cwd)
        sys.path.remove(os.path.join(w, "mods"))
    m, ids = scope["model"], scope["input_ids"]
    p = os.path.join(w, "hf-prompt.h5")
    if kvtool.verify(p).get("ok") is not True:
        fail("docs/python.md transformers block: the dump does not verify")
    with h5py.File(p, "r") as f:
        if f["kv/k"].shape != (3, 2, ids.shape[1], 8) or f["kv/q"].shape != (3, 6, ids.shape[1], 8):
            fail(f"docs/python.md transformers block: shapes {f['kv/k'].shape}, {f['kv/q'].shape}")
        for layer, block in enumerate(m.model.layers):
            cache = scope["out"].past_key_values.layers[layer]
            for ds, ref in (("k", cache.keys), ("v", cache.values), ("q", block.self_attn.used_q)):
                if not np.array_equal(f["kv/" + ds][layer], ref[0].detach().numpy().astype(np.float16)):
                    fail(f"docs/python.md transformers block: /kv/{ds} layer {layer} is not the model's tensor")
        if not np.array_equal(f["kv/tokens"][:], ids[0].numpy()):
            fail("docs/python.md transformers block: /kv/tokens differ from input_ids")
        sha = hashlib.sha256(b"stand-in weights").hexdigest()
        if f.attrs["model_artifact_sha256"] != sha or '"half"' not in f.attrs["rope_config"]:
            fail("docs/python.md transformers block: identity attributes")
    print(f"ok: docs/python.md transformers block (run on torch {torch.__version__}): K, V and hook-recomputed post-RoPE "
          f"Q equal the stand-in model's, T={ids.shape[1]}")
