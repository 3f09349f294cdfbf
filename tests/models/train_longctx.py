#!/usr/bin/python3
"""Trains the long-context test model (tests/models/README.md): a character-level llama in
llama2.c semantics with a real LLM's head shape (head_dim 128, 2 query heads per KV head), on C header
text with planted key -> value facts (longctx_data.py), in three phases of growing context (a
curriculum: copying learned at short distances first), then writes the llama2.c checkpoint and
tokenizer. The data and initialisation are seeded; with --threads 1 a run gives the same bytes every
time (checked: two runs of --warmup 2 --steps 2,1,0,0 are identical), with the default 2 threads
torch's threaded reductions make the weights differ in the last bits from run to run.

Usage: train_longctx.py --out DIR [--steps A,B,C,D] [--drills A,B,C,D] [--drill repeat|shuffled] [--lr LR]
                        [--init longctx.bin] [--threads N] [--measure]
"""
import argparse
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import longctx_data as data  # noqa: E402

DIM, LAYERS, HEADS, KV_HEADS, HIDDEN, SEQ_LEN = 256, 2, 2, 1, 512, 8192
HEAD_DIM = DIM // HEADS
# (window characters, batch, facts per window, asks per fact, copied segments) per phase: copying
# first (random strings written twice, a plain induction signal), then facts at growing distances.
DRILL = "shuffled"
PHASES = [(256, 16, 2, 2, 4), (512, 8, 6, 2, 2), (2048, 4, 16, 2, 4), (4096, 2, 24, 2, 6)]


def rope_tables(n):
    freqs = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    ang = torch.outer(torch.arange(n).float(), freqs)
    return torch.cos(ang), torch.sin(ang)


def rope(x, cos, sin):
    """llama2.c's rotation of adjacent pairs (2i, 2i + 1). x: [B, T, H, D]."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)

        def w(o, i, scale=1.0):
            return torch.nn.Parameter(torch.randn(o, i, generator=g) * 0.02 * scale)
        self.embed = torch.nn.Parameter(torch.randn(data.VOCAB, DIM, generator=g) * 0.02)
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            m = torch.nn.Module()
            m.rms_att, m.rms_ffn = torch.nn.Parameter(torch.ones(DIM)), torch.nn.Parameter(torch.ones(DIM))
            m.wq, m.wk, m.wv = w(DIM, DIM), w(KV_HEADS * HEAD_DIM, DIM), w(KV_HEADS * HEAD_DIM, DIM)
            m.wo = w(DIM, DIM, 1 / math.sqrt(2 * LAYERS))
            m.w1, m.w3, m.w2 = w(HIDDEN, DIM), w(HIDDEN, DIM), w(DIM, HIDDEN, 1 / math.sqrt(2 * LAYERS))
            self.layers.append(m)
        self.rms_final = torch.nn.Parameter(torch.ones(DIM))

    @staticmethod
    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def forward(self, tokens):
        B, T = tokens.shape
        cos, sin = rope_tables(T)
        x = self.embed[tokens]
        mask = torch.full((T, T), float("-inf")).triu(1)
        for m in self.layers:
            h = self.norm(x, m.rms_att)
            q = rope((h @ m.wq.T).view(B, T, HEADS, HEAD_DIM), cos, sin)
            k = rope((h @ m.wk.T).view(B, T, KV_HEADS, HEAD_DIM), cos, sin)
            v = (h @ m.wv.T).view(B, T, KV_HEADS, HEAD_DIM)
            k = k.repeat_interleave(HEADS // KV_HEADS, dim=2)
            v = v.repeat_interleave(HEADS // KV_HEADS, dim=2)
            att = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / math.sqrt(HEAD_DIM) + mask
            o = (att.softmax(-1) @ v.transpose(1, 2)).transpose(1, 2).reshape(B, T, DIM)
            x = x + o @ m.wo.T
            h = self.norm(x, m.rms_ffn)
            x = x + (F.silu(h @ m.w1.T) * (h @ m.w3.T)) @ m.w2.T
        return self.norm(x, self.rms_final) @ self.embed.T


def batch(rng, corpus, phase, drills):
    length, b, facts, asks, segments = phase
    rows, weights = [], []
    for i in range(b):
        if i < drills:
            text, spans = (data.repeat_drill if DRILL == "repeat" else data.copy_drill)(rng, length)
        else:
            text, spans = data.planted_copy_window(rng, corpus, length, facts, asks, segments)
        ids = np.concatenate([[data.BOS], data.encode(text)])[: length + 1]
        wt = np.ones(len(ids) - 1)
        for _, v0, v1 in spans:  # the asked values: the retrieval signal, weighted up
            wt[v0:v1] = 5.0
        rows.append(ids)
        weights.append(wt)
    return torch.tensor(np.stack(rows)), torch.tensor(np.stack(weights), dtype=torch.float32)


def export(model, out):
    """The llama2.c legacy checkpoint (the layout kvtool/llama2c.h reads), shared classifier."""
    L = model.layers
    with open(os.path.join(out, "longctx.bin"), "wb") as f:
        f.write(struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, data.VOCAB, SEQ_LEN))

        def put(t):
            f.write(t.detach().float().contiguous().numpy().astype("<f4").tobytes())
        put(model.embed)
        for name in ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"):
            for m in L:
                put(getattr(m, name))
        put(model.rms_final)
        cos, sin = rope_tables(SEQ_LEN)
        put(cos)
        put(sin)
    data.write_tokenizer(os.path.join(out, "longctx.tok.bin"))


def train_step(model, opt, ids, wt, lr):
    """One step at learning rate `lr` on the next-character cross-entropy of `ids`, each target
    weighted by `wt` (0 leaves it out of the loss), gradients clipped to norm 1. Returns the
    logits, the per-target cross-entropy and the loss."""
    for g in opt.param_groups:
        g["lr"] = lr
    logits = model(ids[:, :-1])
    ce = F.cross_entropy(logits.reshape(-1, data.VOCAB), ids[:, 1:].reshape(-1), reduction="none")
    loss = (ce * wt.reshape(-1)).sum() / wt.sum()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return logits, ce, loss


def induction_warmup(model, rng, steps, lr, log):
    """Attempt 7's first phase: the model attention only (the feed-forward weights held at zero),
    on shuffled copy drills (longctx_data.copy_drill) of 128 characters x 32, the loss on the copy
    spans alone, no weight decay. Two attention layers then form an induction head within a few
    hundred steps (tests/models/README.md), which attempts 1-6, with the feed-forward layers and
    text in the loss from the start, never did. Afterwards w1 and w3 are drawn as at initialisation
    and w2 is zero: the function is unchanged, and the feed-forward layers can learn."""
    mlp = [p for m in model.layers for p in (m.w1, m.w2, m.w3)]
    with torch.no_grad():
        for p in mlp:
            p.zero_()
            p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    t0 = time.time()
    for s in range(steps):
        rows, wts = [], []
        for _ in range(32):
            text, spans = data.copy_drill(rng, 128)
            rows.append(np.concatenate([[data.BOS], data.encode(text)])[:129])
            w = np.zeros(128)
            for _, a, b in spans:
                w[a:b] = 1
            wts.append(w)
        ids, wt = torch.tensor(np.stack(rows)), torch.tensor(np.stack(wts), dtype=torch.float32)
        logits, _, loss = train_step(model, opt, ids, wt, lr * min(1.0, (s + 1) / 30))
        if s % 25 == 0 or s == steps - 1:
            acc = ((logits.argmax(-1) == ids[:, 1:]).float() * wt).sum() / wt.sum()
            log("warm-up step %d/%d copy loss %.3f copy accuracy %.3f %.0f s" %
                (s, steps, loss.item(), acc.item(), time.time() - t0))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in model.layers:
            m.w1.copy_(torch.randn(m.w1.shape, generator=g) * 0.02)
            m.w3.copy_(torch.randn(m.w3.shape, generator=g) * 0.02)
            m.w2.zero_()
    for p in mlp:
        p.requires_grad_(True)


def load(model, path):
    """The inverse of export: a longctx.bin of this script's shape into `model` (--init, to go on
    training a checkpoint in another session)."""
    with open(path, "rb") as f:
        head = struct.unpack("<7i", f.read(28))
        want = (DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, data.VOCAB, SEQ_LEN)
        if head != want:
            sys.exit("%s has shape %s, this script trains %s" % (path, head, want))

        def get(t):
            n = t.numel()
            a = np.frombuffer(f.read(4 * n), dtype="<f4")
            if a.size != n:
                sys.exit("%s is shorter than its shape says" % path)
            with torch.no_grad():
                t.copy_(torch.from_numpy(a.copy()).view_as(t))
        get(model.embed)
        for name in ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"):
            for m in model.layers:
                get(getattr(m, name))
        get(model.rms_final)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", default="1500,300,60,40", help="steps of the phases")
    ap.add_argument("--warmup", type=int, default=400,
                    help="steps of the attention-only induction warm-up (induction_warmup; 0: none, attempts 1-6)")
    ap.add_argument("--drills", default="4,2,0,0",
                    help="rows of each phase's batch that are copy drills (attempt 5: 16,0,0,0; attempts 1-4: 0,0,0,0)")
    ap.add_argument("--drill", default="shuffled", choices=("repeat", "shuffled"), help="which copy drill")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    ap.add_argument("--seed", type=int, default=1, help="the data's seed (another for a run that goes on from --init)")
    ap.add_argument("--init", help="start from this longctx.bin (a checkpoint of an earlier run) instead of random")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads (default 2, both cores of the machine it was made on); only 1 gives "
                    "the same bytes on every run (threaded CPU reductions sum in varying order)")
    ap.add_argument("--measure", action="store_true", help="time 3 steps of each phase and stop")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    rng = np.random.default_rng(args.seed)
    corpus = data.header_corpus()
    model = Model()
    if args.init:
        load(model, args.init)
    if args.warmup and not args.measure:
        induction_warmup(model, rng, args.warmup, 1e-3, lambda line: print(line, flush=True))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.01)
    steps = [int(s) for s in args.steps.split(",")]
    drills = [int(s) for s in args.drills.split(",")]
    global DRILL
    DRILL = args.drill
    total, done, t0 = sum(steps), 0, time.time()
    for phase, n, nd in zip(PHASES, steps, drills):
        for s in range(3 if args.measure else n):
            # Warm-up, constant through the copying phase, then a cosine to a tenth.
            rest = max(0, done - steps[0]) / max(1, total - steps[0])
            lr = args.lr * min(1.0, (done + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * rest)))
            ids, wt = batch(rng, corpus, phase, nd)
            _, ce, loss = train_step(model, opt, ids, wt, lr)
            done += 1
            asked = (ce.view(wt.shape)[wt > 1]).mean().item()  # copies and asked values
            if args.measure or s % 10 == 0 or s == n - 1:
                print("phase %d step %d/%d loss %.3f asked-value loss %.3f lr %.2e %.0f s" %
                      (phase[0], s, n, loss.item(), asked, lr, time.time() - t0), flush=True)
        if not args.measure:
            os.makedirs(args.out, exist_ok=True)
            export(model, args.out)  # after every phase: a usable checkpoint if stopped later
    print("done in %.0f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
