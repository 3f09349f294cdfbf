#!/usr/bin/env bash
# kvtool store: put/get/ls/rm/gc, concurrent writers, tenant isolation, key parts that try to
# escape the store, and entries that fail verify.
. "$(dirname "$0")/lib.sh"
S=$BIN/kvtool-squeeze
M=$SHARED/models
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Lily and Tom went to the park." --tokens 200 --queries -o p.h5 -q --tenant acme
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Lily and Tom went to the park." --tokens 200 --queries -o q.h5 -q --tenant other
"$S" build p.h5 -o a.kvi --prefix 160 --observation-window 40 -q
"$S" build p.h5 -o a2.kvi --prefix 160 --observation-window 40 --percent-clusters 10 -q
"$S" build q.h5 -o b.kvi --prefix 160 --observation-window 40 -q
key() { "$KVTOOL" inspect "$1" --json | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin)["manifest"]; src=s["source"]; print(src["model_artifact_sha256"], src["adapter_set_sha256"], src["prefix_tokens_sha256"], s["params_digest"])'; }
read -r MODEL ADAPTER PREFIX PARAMS < <(key a.kvi)

expect_exit 0 "$KVTOOL" store put a.kvi --store st
contains "$WORK/out" "stored a.kvi"
expect_exit 0 "$KVTOOL" store get --store st --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
path=$(cat "$WORK/out")
cmp "$path" a.kvi || fail "get returned another artifact"
expect_exit 0 "$KVTOOL" verify "$path" --source p.h5
# Another tenant with the same model, adapter and prompt never gets acme's artifact.
expect_reason 1 STORE_MISS "$KVTOOL" store get --store st --tenant other --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
expect_exit 0 "$KVTOOL" store put b.kvi --store st
expect_exit 0 "$KVTOOL" store get --store st --tenant other --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
cmp "$(cat "$WORK/out")" b.kvi || fail "tenant other got the wrong artifact"
# Two params for one key: ambiguous without --params-digest.
expect_exit 0 "$KVTOOL" store put a2.kvi --store st
expect_reason 1 STORE_AMBIGUOUS "$KVTOOL" store get --store st --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
expect_exit 0 "$KVTOOL" store get --store st --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze --params-digest "$PARAMS" --json
contains "$WORK/out" '"path"'
# Key parts can never name paths.
for bad in "../evil" "a/b" "." ".." "$(printf 'x\ty')"; do
  expect_reason 2 BAD_STORE_KEY "$KVTOOL" store get --store st --tenant "$bad" --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
done
expect_reason 2 BAD_STORE_KEY "$KVTOOL" store get --store st --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "../../etc" --kind squeeze
[ -z "$(find . -maxdepth 1 -name 'evil*')" ] || fail "a key part escaped the store"
# Concurrent writers of the same key.
parallel --will-cite -j 8 -N0 "$KVTOOL" store put a.kvi --store conc ::: $(seq 16) >/dev/null || fail "parallel puts"
expect_exit 0 "$KVTOOL" store get --store conc --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
cmp "$(cat "$WORK/out")" a.kvi || fail "concurrent puts left a different object"
[ "$(find conc/refs -name '*.json' | wc -l)" = 1 ] || fail "concurrent puts left more than one ref"
[ -z "$(find conc -name '.*tmp*')" ] || fail "temporaries left behind"
# An object damaged on disk is reported, not served.
obj=$("$KVTOOL" store get --store conc --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze)
chmod u+w "$obj"; printf 'KVTOOL-DAMAGE' | dd of="$obj" bs=1 seek=300 conv=notrunc status=none
expect_reason 1 STORE_CORRUPT "$KVTOOL" store get --store conc --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
[ -s "$WORK/out" ] && fail "a corrupt entry printed a path"
# ls, rm and gc.
expect_exit 0 "$KVTOOL" store ls --store st --all-tenants --json
[ "$(json_get "$WORK/out" '["refs"].__len__()')" = 3 ] || fail "three refs expected"
expect_exit 0 "$KVTOOL" store rm --store st --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze --params-digest "$PARAMS"
expect_exit 0 "$KVTOOL" store gc --store st --grace 1h --json
contains "$WORK/out" '"objects_removed": 0'
expect_exit 0 "$KVTOOL" store gc --store st --grace 0s --json
contains "$WORK/out" '"objects_removed": 1'
expect_reason 2 USAGE "$KVTOOL" store gc --store st --grace soon
expect_reason 3 IO_ERROR "$KVTOOL" store ls --store nowhere --all-tenants
finish
