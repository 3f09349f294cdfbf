#!/usr/bin/env bash
# The three shared-model dumps the quality gates read (ctest fixture "quality: dumps", so that
# the gates running in parallel dump once): make_dumps.sh DIR. Also used by quality_lib.sh when
# a gate runs outside ctest.
set -u
KVTOOL=${KVTOOL:?KVTOOL must point at the kvtool binary}
M=${KVTOOL_SHARED:-../shared}/models
mkdir -p "$1" && cd "$1" || exit 1
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --tokens 512 --queries -o st.h5 -q --force &&
  "$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 256 --queries -o bb.h5 -q --force &&
  "$KVTOOL" dump --llama2c "$M/cheaders.bin" --tokenizer "$M/tok128c.bin" --prompt "$(cat "$M/cheaders.prompt.txt")" \
    --tokens 512 --queries -o ch.h5 -q --force
