#!/usr/bin/env node
// Real llama.cpp's next-token distribution at every position of a token list (node-llama-cpp
// 3.21.1's controlledEvaluate, teacher forced, f32 cache): prints {"probs": [[p_0 ... p_V-1], ...]}, one
// row per position (the distribution of the token after it). For tests/llamacpp/test_gguf_forward.sh.
//   node next_token_probs.mjs --model M.gguf --tokens TOKENS.json
// With --text FILE instead of --tokens: prints {"tokens": [...]}, llama.cpp's tokenization of the
// file's text (llama_tokenize with special-token parsing off, BOS as the vocabulary says).
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const a = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) a[process.argv[i].slice(2)] = process.argv[i + 1];
const base = process.env.KVTOOL_NODE_LLAMA_CPP ||
    path.join(process.env.HOME || "/root", ".cache/kvtool/node-llama-cpp-3.21.1");
const {getLlama} = await import(pathToFileURL(path.join(base, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({gpu: false, logLevel: "error"});
const model = await llama.loadModel({modelPath: a.model});
if (a.text) {
  const ids = model.tokenize(fs.readFileSync(a.text, "utf8"), false);
  const bos = model.tokens.shouldPrependBosToken ? [model.tokens.bos] : [];
  console.log(JSON.stringify({tokens: [...bos, ...ids]}));
  await model.dispose();
  process.exit(0);
}
const tokens = JSON.parse(fs.readFileSync(a.tokens, "utf8"));
const vocab = model.tokens.nTokens ?? model.vocabularySize;
const ctx = await model.createContext({
  contextSize: 256 * Math.ceil((tokens.length + 2) / 256), threads: 1, flashAttention: false,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const seq = ctx.getSequence();
const out = await seq.controlledEvaluate(tokens.map((t) => [t, {generateNext: {probabilities: true}}]));
const probs = out.map((o) => {
  const row = new Array(vocab).fill(0);
  for (const [t, p] of o.next.probabilities) row[t] = p;
  return row;
});
console.log(JSON.stringify({vocab, probs}));
await ctx.dispose();
await model.dispose();
