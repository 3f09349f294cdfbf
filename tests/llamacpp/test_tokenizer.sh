#!/usr/bin/env bash
# kvtool's GGUF tokenizer (kvtool/gguf_tokenizer.h) against llama.cpp's own test vectors: the
# vocabularies models/ggml-vocab-*.gguf of the llama.cpp source node-llama-cpp ships, with the texts
# (.inp) and the token ids llama.cpp gives them (.out). Every vocabulary kvtool claims must pass
# every vector; the others must be refused by name (UNSUPPORTED_MODEL), never tokenized.
source "${KVTOOL_SOURCE:?}/tests/cli/lib.sh"
unavailable() {
  if [ "${KVTOOL_REQUIRE_LLAMACPP:-0}" = 1 ]; then echo "FAIL: $* (KVTOOL_REQUIRE_LLAMACPP=1)" >&2; exit 1; fi
  echo "skipped: $*"
  exit 77
}
NLC=${KVTOOL_NODE_LLAMA_CPP:-${KVTOOL_NODE_CACHE:-$HOME/.cache/kvtool/node-llama-cpp-3.21.1}}
BUNDLE=$NLC/node_modules/node-llama-cpp/llama/gitRelease.bundle
[ -f "$BUNDLE" ] || unavailable "no llama.cpp source bundle at $BUNDLE (.ci/install-deps installs node-llama-cpp)"
git clone -q --bare "$BUNDLE" llama.git && git --git-dir=llama.git archive HEAD models | tar -x ||
  { fail "the vocabularies from the llama.cpp bundle"; finish; }
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
