#!/usr/bin/env node
// Times real llama.cpp's prefill (node-llama-cpp 3.21.1, llama.cpp v0.4.0): evaluates TOKENS.json
// in one sequence with an f32 cache and prints {"seconds": S, "tokens": N}, the evaluation alone
// (the model is loaded and the context created before the clock starts). For
// tests/bench/bench_gguf_prefill.sh.
//   node prefill_time.mjs --model M.gguf --tokens TOKENS.json [--threads N] [--batch N]
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const a = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) a[process.argv[i].slice(2)] = process.argv[i + 1];
const base = process.env.KVTOOL_NODE_LLAMA_CPP ||
    path.join(process.env.HOME || "/root", ".cache/kvtool/node-llama-cpp-3.21.1");
const {getLlama} = await import(pathToFileURL(path.join(base, "node_modules/node-llama-cpp/dist/index.js")).href);
const tokens = JSON.parse(fs.readFileSync(a.tokens, "utf8"));
const threads = Number(a.threads || 2), batch = Number(a.batch || 512);
const llama = await getLlama({gpu: false, logLevel: "error"});
const model = await llama.loadModel({modelPath: a.model});
const ctx = await model.createContext({
  contextSize: 256 * Math.ceil((tokens.length + 2) / 256), batchSize: batch, threads,
  flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const seq = ctx.getSequence();
const t0 = process.hrtime.bigint();
await seq.evaluateWithoutGeneratingNewTokens(tokens);
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(JSON.stringify({seconds, tokens: tokens.length, threads, batch}));
await ctx.dispose();
await model.dispose();
