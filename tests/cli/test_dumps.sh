#!/usr/bin/env bash
# kvtool dump / synth / inspect / verify on dumps.
. "$(dirname "$0")/lib.sh"
M=$SHARED/models

expect_exit 0 "$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --tokens 120 --queries -o s.h5 --json
contains "$WORK/out" '"schema_version": 1'
contains "$WORK/out" "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
expect_exit 0 "$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 64 --dtype bf16 -o b.h5 -q
[ -s "$WORK/out" ] && fail "--quiet printed something"
expect_exit 0 "$KVTOOL" inspect b.h5 --json
contains "$WORK/out" '"dtype": "bfloat16"'
contains "$WORK/out" '"head_dim": 16'
contains "$WORK/out" '"synthetic": false'
expect_exit 0 "$KVTOOL" verify s.h5
contains "$WORK/out" "OK: s.h5 is a valid kvdump"
expect_exit 0 "$KVTOOL" verify b.h5 --json
contains "$WORK/out" '"ok": true'
expect_reason 2 USAGE "$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 300 -o big.h5
absent big.h5
expect_reason 2 USAGE "$KVTOOL" dump --llama2c "$M/babyllama361.bin" --prompt "hi" --tokens 10 -o p.h5
absent p.h5
expect_reason 3 IO_ERROR "$KVTOOL" dump --llama2c missing.bin --tokens 10 -o m.h5
absent m.h5
head -c 1000 "$M/stories260K.bin" > broken.bin
expect_reason 1 BAD_MODEL "$KVTOOL" dump --llama2c broken.bin --tokens 10 -o m.h5
absent m.h5

# Synthetic dumps: deterministic, marked synthetic, with a frontier.
expect_exit 0 "$KVTOOL" synth --layers 2 --kv-heads 1 --q-heads 3 --head-dim 24 --tokens 100 --seed 5 --frontier 90 --tenant acme -o a.h5
expect_exit 0 "$KVTOOL" synth --layers 2 --kv-heads 1 --q-heads 3 --head-dim 24 --tokens 100 --seed 5 --frontier 90 --tenant acme -o b2.h5
cmp <("$KVTOOL" verify a.h5 --json | grep digest) <("$KVTOOL" verify b2.h5 --json | grep digest) || fail "synth not deterministic"
expect_exit 0 "$KVTOOL" inspect a.h5
contains "$WORK/out" "SYNTHETIC"
contains "$WORK/out" "90 (10 uncommitted rows)"
contains "$WORK/out" "tenant             acme"
expect_reason 2 USAGE "$KVTOOL" synth --layers 1 --kv-heads 1 --q-heads 1 --head-dim 8 --tokens 8 --seed 1 --frontier 9 -o f.h5
absent f.h5
no_temps .

# A killed writer leaves neither the output nor its temporary.
"$KVTOOL" synth --layers 32 --kv-heads 8 --q-heads 32 --head-dim 128 --tokens 8192 --seed 1 -o killed.h5 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 50); do
  [ -n "$(find . -name '.killed.h5.tmp.*')" ] && break
  sleep 0.1
done
sleep 0.5
kill -TERM $pid
wait $pid
rc=$?
[ "$rc" -ge 128 ] || fail "killed synth exited $rc"
absent killed.h5
no_temps .
finish
