#!/usr/bin/env bash
# kvtool load: publish into the runtime pool, replay every dumped query against kvtool query's
# answers, budgets, refusals with reasons, store keys, and the device tier when there is no GPU.
. "$(dirname "$0")/lib.sh"
M=$SHARED/models
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Lily and Tom went to the park." --tokens 200 --queries -o p.h5 -q --tenant acme
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Tom and Lily went to the zoo." --tokens 200 --queries -o other.h5 -q --tenant acme
"$BIN/kvtool-pq" build p.h5 -o pq.kvi --prefix 160 -q
"$BIN/kvtool-lsh" build p.h5 -o lsh.kvi --prefix 160 -q
"$BIN/kvtool-squeeze" build p.h5 -o sq.kvi --prefix 160 --observation-window 40 -q
"$BIN/kvtool-clusterkv" build p.h5 -o ck.kvi --prefix 160 -q

# Every kind, one pool; every replayed answer equals kvtool query's (load checks it itself and
# fails with INTERNAL otherwise); spot-check one answer against the CLI too.
expect_exit 0 "$KVTOOL" load pq.kvi lsh.kvi sq.kvi ck.kvi --source p.h5 --device cpu --json
cp "$WORK/out" load.json
[ "$(json_get load.json '["schema_version"]')" = 1 ] || fail "schema_version"
[ "$(json_get load.json '["queries"]["count"]')" -gt 100 ] || fail "too few queries replayed: $(json_get load.json '["queries"]')"
[ "$(json_get load.json '["queries"]["mismatches"]')" = 0 ] || fail "mismatches"
[ "$(json_get load.json '["receipts"][3]["generation"]')" = 4 ] || fail "generations"
[ "$(json_get load.json '["tiers"]["host"]["used"]')" -gt 0 ] || fail "host bytes"
[ "$(json_get load.json '["device"]')" = None ] || fail "a device was used with --device cpu"
expect_exit 0 "$KVTOOL" load pq.kvi --source p.h5 --device cpu
contains "$WORK/out" "every candidate list equals kvtool query's"
contains "$WORK/out" "latency p50"
contains "$WORK/out" "publish: "

# A kind without queries is published as bytes; replay skips it.
expect_exit 0 "$KVTOOL" load "$FIXTURES/container-test.kvi" --device cpu --json
[ "$(json_get "$WORK/out" '["receipts"][0]["kind"]')" = container-test ] || fail "container-test publish"

# Refusals: exit 1 with the reason, nothing else printed on stdout.
expect_reason 1 HOST_BUDGET_EXCEEDED "$KVTOOL" load pq.kvi --source p.h5 --host-budget 4K
[ ! -s "$WORK/out" ] || fail "a refused load printed results"
expect_exit 1 "$KVTOOL" load pq.kvi --source other.h5
grep -Eq "error \[(PREFIX_MISMATCH|STALE_SOURCE)\]" "$WORK/err" || fail "another prompt's dump: $(cat "$WORK/err")"
expect_reason 1 TENANT_MISMATCH "$KVTOOL" load pq.kvi --tenant someone-else
"$KVTOOL" keygen -o k.pem >/dev/null
expect_reason 2 USAGE "$KVTOOL" load pq.kvi --require-signature
expect_reason 1 SIGNATURE_REQUIRED "$KVTOOL" load pq.kvi --require-signature --pubkey k.pub.pem
cp pq.kvi bad.kvi
size=$(stat -c %s bad.kvi)
printf '\xff' | dd of=bad.kvi bs=1 seek=$((size / 4)) conv=notrunc 2>/dev/null
expect_exit 1 "$KVTOOL" load bad.kvi
grep -Eq "error \[(SECTION_DIGEST|DECOMPRESS_FAILED|BAD_LAYOUT|MANIFEST_DIGEST|BAD_MANIFEST)\]" "$WORK/err" || fail "tampered artifact: $(cat "$WORK/err")"
expect_reason 3 IO_ERROR "$KVTOOL" load missing.kvi
expect_reason 2 USAGE "$KVTOOL" load pq.kvi --host-budget lots
expect_reason 2 USAGE "$KVTOOL" load
expect_reason 2 USAGE "$KVTOOL" load pq.kvi --kind pq
if ! command -v nvidia-smi >/dev/null 2>&1; then
  expect_reason 1 DEVICE_UNAVAILABLE "$KVTOOL" load pq.kvi --device cuda
  expect_exit 0 "$KVTOOL" load pq.kvi --device auto --json
  [ "$(json_get "$WORK/out" '["device"]')" = None ] || fail "auto found a device on a machine without one"
fi

# From the prefix store, by key.
"$KVTOOL" store put sq.kvi --store st >/dev/null
read -r MODEL ADAPTER PREFIX < <("$KVTOOL" inspect sq.kvi --json | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin)["manifest"]["source"]; print(s["model_artifact_sha256"], s["adapter_set_sha256"], s["prefix_tokens_sha256"])')
expect_exit 0 "$KVTOOL" load --store st --tenant acme --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze --source p.h5 --json
[ "$(json_get "$WORK/out" '["receipts"][0]["kind"]')" = squeeze ] || fail "store load"
expect_reason 1 STORE_MISS "$KVTOOL" load --store st --tenant other --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze
expect_exit 0 "$KVTOOL" load --help
contains "$WORK/out" "--host-budget"
finish
