#!/usr/bin/env node
// Runs real llama.cpp (through node-llama-cpp 3.21.1, which bundles llama.cpp tag v0.4.0) on a
// GGUF model: evaluates a token list and saves the sequence state (llama_state_seq_save_file,
// magic "ggsq", version 3) under several KV cache configurations, or prints llama.cpp's greedy
// continuation of a token prefix. Used by tests/llamacpp/test_llamacpp_state.sh.
//
//   node write_states.mjs --model M.gguf --tokens TOKENS.json --out-dir DIR --configs f32,f16,...
//       writes DIR/<config>.ggsq (two_seq: DIR/two_seq.seq0.ggsq and .seq1.ggsq) and, for each
//       config, DIR/<config>.json: what was fed, which cells the file should hold and at which
//       positions (see describe* below).
//   node write_states.mjs --model M.gguf --tokens TOKENS.json --greedy N --prefix P
//       prints {"tokens": [...]}: N greedy tokens after the first P tokens of TOKENS.json.
//
// TOKENS.json is a JSON array of token ids. node-llama-cpp is found in $KVTOOL_NODE_LLAMA_CPP
// (default: $KVTOOL_NODE_CACHE or ~/.cache/kvtool/node-llama-cpp-3.21.1)
// (the folder holding node_modules/node-llama-cpp), as .ci/install-deps installs it.
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

// Each config: cache types, flash attention (off: llama.cpp stores V transposed, v_trans = 1;
// quantized caches need it on), and the special runs. LLAMA_ATTN_ROT_DISABLE is read when the KV cache is created
// (llama-kv-cache.cpp), so setting it in this process before createContext is enough.
const CONFIGS = {
  f32: {k: "F32", v: "F32", fa: false},
  f32_fa: {k: "F32", v: "F32", fa: true},
  f16: {k: "F16", v: "F16", fa: false},
  bf16: {k: "BF16", v: "BF16", fa: false},
  q8_0: {k: "Q8_0", v: "Q8_0", fa: true},
  q8_0_norot: {k: "Q8_0", v: "Q8_0", fa: true, norot: true},
  shift: {k: "F32", v: "F32", fa: false, run: "shift"},
  two_seq: {k: "F32", v: "F32", fa: false, run: "two_seq"},
};

// The shift run: a 256-cell context (the smallest node-llama-cpp creates) fed SHIFT_FED tokens.
// When it is full node-llama-cpp erases SHIFT_ERASE tokens after BOS and moves the rest down
// (seq_rm + seq_add: positions stay contiguous, keys are re-rotated at the next decode, new tokens
// land in the freed cells, so cells are out of position order). Then a run of positions is
// removed without moving the rest (llama_memory_seq_rm alone), leaving a gap in the positions.
const SHIFT_CTX = 256, SHIFT_FED = 290, SHIFT_ERASE = 100, HOLE = [150, 160];

function parseArgs(argv) {
  const a = {};
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i];
    if (!key.startsWith("--") || i + 1 >= argv.length) throw new Error(`bad argument ${key}`);
    a[key.slice(2)] = argv[++i];
  }
  for (const need of ["model", "tokens"]) if (!a[need]) throw new Error(`--${need} is required`);
  return a;
}

async function loadLlama() {
  // Default: where .ci/install-deps installs it (its KVTOOL_NODE_CACHE default).
  const base = process.env.KVTOOL_NODE_LLAMA_CPP ||
      process.env.KVTOOL_NODE_CACHE || path.join(process.env.HOME || "/root", ".cache/kvtool/node-llama-cpp-3.21.1");
  const entry = path.join(base, "node_modules", "node-llama-cpp", "dist", "index.js");
  return import(pathToFileURL(entry).href);
}

function contextOptions(cfg, extra = {}) {
  return {
    contextSize: 512,
    threads: 1,  // the default thread count spins on 2 cores (SNAPSHOTS.md)
    flashAttention: cfg.fa,
    experimentalKvCacheKeyType: cfg.k,
    experimentalKvCacheValueType: cfg.v,
    ...extra,
  };
}

// Room for every token: node-llama-cpp shifts the context once the next token index reaches
// contextSize - 1 (and llama.cpp v0.4.0's CPU K-shift aborts on a bf16 cache: ggml_rope has no
// bf16 path), so plain runs get a context that holds them, in multiples of 256.
const roomFor = (n) => 256 * Math.ceil((n + 2) / 256);

function writeJson(file, obj) {
  fs.writeFileSync(file, JSON.stringify(obj, null, 1) + "\n");
}

// Plain run: all tokens, positions 0..T-1, one cell per token.
async function runPlain(model, cfg, tokens, out) {
  const ctx = await model.createContext(contextOptions(cfg, {contextSize: roomFor(tokens.length)}));
  const seq = ctx.getSequence();
  await seq.evaluateWithoutGeneratingNewTokens(tokens);
  await seq.saveStateToFile(out + ".ggsq");
  const desc = {config: cfg, files: [out + ".ggsq"], v_trans: cfg.fa ? 0 : 1,
                positions: tokens.map((_, i) => i), source_index: tokens.map((_, i) => i),
                exact: tokens.map(() => true)};
  await ctx.dispose();
  return desc;
}

// See SHIFT_* above. Records when node-llama-cpp shifted (how many tokens were evaluated before),
// so the test knows which cells were computed with the full context (exact: true) and which
// attended to the shortened one (exact: false; only their layer 0 depends on the token alone).
async function runShift(model, cfg, tokens, out) {
  if (tokens.length < SHIFT_FED) throw new Error(`shift needs ${SHIFT_FED} tokens, got ${tokens.length}`);
  const fed = tokens.slice(0, SHIFT_FED);
  const ctx = await model.createContext(contextOptions(cfg, {contextSize: SHIFT_CTX}));
  if (ctx.contextSize !== SHIFT_CTX) throw new Error(`context size ${ctx.contextSize}, wanted ${SHIFT_CTX}`);
  let shiftedAt = -1;
  const seq = ctx.getSequence({
    contextShift: {
      size: (s) => {
        if (shiftedAt >= 0) throw new Error("a second context shift");
        shiftedAt = s.nextTokenIndex;
        return SHIFT_ERASE;
      },
      strategy: "eraseBeginning",
    },
  });
  await seq.evaluateWithoutGeneratingNewTokens(fed);
  if (shiftedAt < 0) throw new Error("node-llama-cpp did not shift the context");
  // Original index of each token now in the sequence, in position order (BOS kept).
  let source = [0, ...fed.map((_, i) => i).slice(1 + SHIFT_ERASE)];
  if (seq.contextTokens.join() !== source.map((i) => fed[i]).join()) throw new Error("unexpected shift result");
  // The gap: llama_memory_seq_rm on positions [HOLE[0], HOLE[1]) through node-llama-cpp's binding,
  // without the seq_add that its public eraseContextTokenRanges adds. The sequence's token list is
  // cut to match, so the file's tokens are the tokens of its cells in position order.
  if (!ctx._ctx.removeTokenCellsFromSequence(seq._sequenceId, HOLE[0], HOLE[1])) throw new Error("seq_rm failed");
  seq._contextTokens.splice(HOLE[0], HOLE[1] - HOLE[0]);
  const positions = source.map((_, p) => p).filter((p) => p < HOLE[0] || p >= HOLE[1]);
  source = positions.map((p) => source[p]);
  await seq.saveStateToFile(out + ".ggsq");
  await ctx.dispose();
  return {config: cfg, files: [out + ".ggsq"], v_trans: 1, context_size: SHIFT_CTX, fed: SHIFT_FED,
          erased: [1, 1 + SHIFT_ERASE], shifted_after: shiftedAt, hole: HOLE, positions,
          source_index: source, exact: source.map((i) => i < shiftedAt)};
}

// Two sequences in one context (non-unified cache: one stream per sequence, llama-context.cpp):
// sequence 0 gets all tokens, sequence 1 the first half, evaluated together.
async function runTwoSeq(model, cfg, tokens, out) {
  const half = Math.floor(tokens.length / 2);
  const ctx = await model.createContext(contextOptions(cfg, {sequences: 2, contextSize: roomFor(tokens.length)}));
  const s0 = ctx.getSequence(), s1 = ctx.getSequence();
  await Promise.all([s0.evaluateWithoutGeneratingNewTokens(tokens),
                     s1.evaluateWithoutGeneratingNewTokens(tokens.slice(0, half))]);
  await s0.saveStateToFile(out + ".seq0.ggsq");
  await s1.saveStateToFile(out + ".seq1.ggsq");
  await ctx.dispose();
  const idx = (n) => [...Array(n).keys()];
  return {config: cfg, v_trans: 1, files: [out + ".seq0.ggsq", out + ".seq1.ggsq"],
          sequences: [{seq_id: 0, positions: idx(tokens.length), source_index: idx(tokens.length)},
                      {seq_id: 1, positions: idx(half), source_index: idx(half)}],
          positions: idx(tokens.length), source_index: idx(tokens.length), exact: idx(tokens.length).map(() => true)};
}

async function greedy(model, tokens, prefix, n) {
  const cfg = CONFIGS.f32;
  const ctx = await model.createContext(contextOptions(cfg, {contextSize: roomFor(prefix + n)}));
  const seq = ctx.getSequence();
  const out = [];
  // temperature 0 is greedy (argmax) in node-llama-cpp's sampler; no penalties are set.
  for await (const t of seq.evaluate(tokens.slice(0, prefix), {temperature: 0, yieldEogToken: true})) {
    out.push(t);
    if (out.length >= n) break;
  }
  await ctx.dispose();
  return out;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const tokens = JSON.parse(fs.readFileSync(a.tokens, "utf8"));
  if (!Array.isArray(tokens) || tokens.length === 0 || !tokens.every(Number.isInteger)) throw new Error("bad token list");
  const {getLlama, LlamaLogLevel} = await loadLlama();
  const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
  const model = await llama.loadModel({modelPath: a.model});
  if (a.greedy) {
    const out = await greedy(model, tokens, Number(a.prefix), Number(a.greedy));
    process.stdout.write(JSON.stringify({tokens: out}) + "\n");
  } else {
    if (!a["out-dir"] || !a.configs) throw new Error("--out-dir and --configs are required");
    fs.mkdirSync(a["out-dir"], {recursive: true});
    for (const name of a.configs.split(",")) {
      const cfg = CONFIGS[name];
      if (!cfg) throw new Error(`unknown config ${name}`);
      if (cfg.norot) process.env.LLAMA_ATTN_ROT_DISABLE = "1";
      else delete process.env.LLAMA_ATTN_ROT_DISABLE;
      const out = path.join(a["out-dir"], name);
      const run = cfg.run === "shift" ? runShift : cfg.run === "two_seq" ? runTwoSeq : runPlain;
      const desc = await run(model, {name, ...cfg}, tokens, out);
      writeJson(out + ".json", desc);
    }
  }
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  process.stderr.write(`write_states: ${e.message}\n`);
  process.exit(1);
});
