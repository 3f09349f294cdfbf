#!/usr/bin/env bash
# kvtool's GGUF tokenizer (kvtool/gguf_tokenizer.h) against llama.cpp's own test vectors: the
# vocabularies models/ggml-vocab-*.gguf of the llama.cpp source node-llama-cpp ships, with the texts
# (.inp) and the token ids llama.cpp gives them (.out). Every vocabulary kvtool claims must pass
# every vector; the others must be refused by name (UNSUPPORTED_MODEL), never tokenized.
source "${KVTOOL_SOURCE:?}/tests/llamacpp/lib.sh"
require_bundle
git --git-dir=llama.git archive HEAD models | tar -x || { fail "the vocabularies from the llama.cpp bundle"; finish; }
CHECK=$BIN/kvtool_tokenize_vectors
CLAIMED="llama-spm phi-3 llama-bpe qwen2 gpt-2"
for v in $CLAIMED; do
  "$CHECK" models/ggml-vocab-$v.gguf || fail "vocabulary $v: test vectors"
done
# The vocabularies kvtool does not claim: refused by name, with a reason.
for f in models/ggml-vocab-*.gguf; do
  v=$(basename "$f" .gguf)
  v=${v#ggml-vocab-}
  case " $CLAIMED " in *" $v "*) continue ;; esac
  [ -f "$f.inp" ] || continue
  "$CHECK" "$f" >out.txt 2>&1 && fail "vocabulary $v was tokenized, but kvtool does not claim it"
  grep -q "UNSUPPORTED_MODEL\|tokenizer model\|pre-tokenizer" out.txt || fail "vocabulary $v: refused without a reason: $(head -c 300 out.txt)"
done
finish
