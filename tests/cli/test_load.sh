#!/usr/bin/env bash
# kvtool load: publish into the runtime pool, replay every dumped query against kvtool query's
# answers, budgets, refusals with reasons, store keys, and the device tier (--device cuda with a GPU,
# DEVICE_UNAVAILABLE without one).
. "$(dirname "$0")/lib.sh"
M=$SHARED/models
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Lily and Tom went to the park." --tokens 200 --queries -o p.h5 -q --tenant acme
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Tom and Lily went to the zoo." --tokens 200 --queries -o other.h5 -q --tenant acme
"$BIN/kvtool-pq" build p.h5 -o pq.kvi --prefix 160 -q
"$BIN/kvtool-lsh" build p.h5 -o lsh.kvi --prefix 160 -q
"$BIN/kvtool-squeeze" build p.h5 -o sq.kvi --prefix 160 --observation-window 40 -q
"$BIN/kvtool-clusterkv" build p.h5 -o ck.kvi --prefix 160 -q

# Every kind, one pool; every replayed pool answer equals the file query path (the same selector code
# as kvtool query: this checks the pool, not the selectors; tests/interop/test_query_numpy.py checks
# the answers independently); load fails with INTERNAL otherwise.
expect_exit 0 "$KVTOOL" load pq.kvi lsh.kvi sq.kvi ck.kvi --source p.h5 --device cpu --json
cp "$WORK/out" load.json
[ "$(json_get load.json '["schema_version"]')" = 1 ] || fail "schema_version"
[ "$(json_get load.json '["queries"]["count"]')" -gt 100 ] || fail "too few queries replayed: $(json_get load.json '["queries"]')"
[ "$(json_get load.json '["queries"]["mismatches"]')" = 0 ] || fail "mismatches"
[ "$(json_get load.json '["receipts"][3]["generation"]')" = 4 ] || fail "generations"
[ "$(json_get load.json '["tiers"]["host"]["used"]')" -gt 0 ] || fail "host bytes"
[ "$(json_get load.json '["device"]')" = None ] || fail "a device was used with --device cpu"
expect_exit 0 "$KVTOOL" load pq.kvi --source p.h5 --device cpu
contains "$WORK/out" "pool answers equal the file query path"
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
# A tampered artifact, deterministically: one byte inverted in the middle of a raw (uncompressed)
# section's payload, found from inspect's offsets, is exactly SECTION_DIGEST naming that section.
"$BIN/kvtool-pq" build p.h5 -o raw.kvi --prefix 160 --zstd-level 0 -q
"$KVTOOL" inspect raw.kvi --json >raw.json
/usr/bin/python3 - raw.json raw.kvi bad.kvi <<'PY' || fail "could not tamper raw.kvi"
import json, sys
s = [x for x in json.load(open(sys.argv[1]))["manifest"]["sections"]
     if x["name"] == "pq_codes" and x["layer"] == 1 and x["kv_head"] == 2][0]
assert s["codec"] == "none", s
b = bytearray(open(sys.argv[2], "rb").read())
b[s["offset"] + s["stored_size"] // 2] ^= 0xFF
open(sys.argv[3], "wb").write(b)
PY
expect_reason 1 SECTION_DIGEST "$KVTOOL" load bad.kvi
contains "$WORK/err" "section 'pq_codes' (layer 1, kv head 2) does not match its recorded SHA-256"
expect_exit 0 "$KVTOOL" load raw.kvi --device cpu  # the untampered file loads
expect_reason 3 IO_ERROR "$KVTOOL" load missing.kvi
expect_reason 2 USAGE "$KVTOOL" load pq.kvi --host-budget lots
expect_reason 2 USAGE "$KVTOOL" load
expect_reason 2 USAGE "$KVTOOL" load pq.kvi --kind pq
# The device tier. With a GPU (nvidia-smi lists one) and a CUDA build, --device cuda publishes every
# kind into it and every replayed answer, scored there, equals kvtool query's; without a GPU, cuda is
# refused with DEVICE_UNAVAILABLE and auto falls back to the host.
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  "$KVTOOL" load pq.kvi --device cuda >"$WORK/probe" 2>&1
  if grep -q "built without CUDA" "$WORK/probe"; then
    echo "note: a GPU is present but this kvtool was built without CUDA; checking the refusal only"
    expect_reason 1 DEVICE_UNAVAILABLE "$KVTOOL" load pq.kvi --device cuda
  else
    expect_exit 0 "$KVTOOL" load pq.kvi lsh.kvi sq.kvi ck.kvi --source p.h5 --device cuda --json
    cp "$WORK/out" cuda.json
    [ "$(json_get cuda.json '["device"]')" = cuda ] || fail "--device cuda: device is $(json_get cuda.json '["device"]')"
    [ "$(json_get cuda.json '["queries"]["mismatches"]')" = 0 ] || fail "--device cuda: mismatches"
    [ "$(json_get cuda.json '["queries"]["count"]')" = "$(json_get load.json '["queries"]["count"]')" ] ||
      fail "--device cuda replayed another number of queries than --device cpu"
    [ "$(json_get cuda.json '["queries"]["device"]')" -gt 0 ] || fail "--device cuda: no query was scored on the device"
    [ "$(json_get cuda.json '["tiers"]["device"]["used"]')" -gt 0 ] || fail "--device cuda: no device bytes"
    expect_exit 0 "$KVTOOL" load pq.kvi --source p.h5 --device auto --json
    [ "$(json_get "$WORK/out" '["device"]')" = cuda ] || fail "--device auto did not pick the GPU"
  fi
else
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
