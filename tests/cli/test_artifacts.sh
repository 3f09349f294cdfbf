#!/usr/bin/env bash
# Artifacts through the CLI: inspect, verify (digests, signatures, source binding), sign, keygen,
# export, and a sample of the mutation corpus with exit codes.
. "$(dirname "$0")/lib.sh"
GEN=$BIN/kvtool-testgen

"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 3 -o d.h5 -q
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 3 --tenant other -o other.h5 -q
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 3 --request-generation 7 -o regen.h5 -q
"$GEN" d.h5 -o a.kvi --coverage 56 || fail "testgen"
expect_exit 0 "$KVTOOL" inspect a.kvi
contains "$WORK/out" "kind               container-test"
contains "$WORK/out" "signature          none"
contains "$WORK/out" "coverage         \[0, 56)"
expect_exit 0 "$KVTOOL" inspect a.kvi --json
contains "$WORK/out" '"schema_version": 1'
expect_exit 0 "$KVTOOL" verify a.kvi --source d.h5
contains "$WORK/out" "content digest of \[0, 56) matches"
expect_exit 0 "$KVTOOL" verify a.kvi --source regen.h5
expect_reason 1 SNAPSHOT_MISMATCH "$KVTOOL" verify a.kvi --source regen.h5 --strict-snapshot
expect_reason 1 TENANT_MISMATCH "$KVTOOL" verify a.kvi --source other.h5
expect_exit 1 "$KVTOOL" verify a.kvi --source other.h5 --json
contains "$WORK/out" '"reason": "TENANT_MISMATCH"'
expect_reason 3 IO_ERROR "$KVTOOL" verify a.kvi --source missing.h5

# Keys and signatures.
expect_exit 0 "$KVTOOL" keygen -o key.pem
[ "$(stat -c %a key.pem)" = 600 ] || fail "key.pem mode is $(stat -c %a key.pem)"
[ -s key.pub.pem ] || fail "no key.pub.pem"
expect_reason 3 OUTPUT_EXISTS "$KVTOOL" keygen -o key.pem
"$KVTOOL" keygen -o other.pem >/dev/null
expect_reason 1 SIGNATURE_REQUIRED "$KVTOOL" verify a.kvi --require-signature --pubkey key.pub.pem
expect_reason 2 USAGE "$KVTOOL" verify a.kvi --require-signature
cp a.kvi unsigned.kvi
expect_exit 0 "$KVTOOL" sign a.kvi --key key.pem
expect_exit 0 "$KVTOOL" verify a.kvi --require-signature --pubkey key.pub.pem --source d.h5
contains "$WORK/out" "(trusted)"
mkdir trusted && cp key.pub.pem trusted/
expect_exit 0 "$KVTOOL" verify a.kvi --trusted-keys trusted --require-signature
expect_reason 1 UNTRUSTED_KEY "$KVTOOL" verify a.kvi --pubkey other.pub.pem
expect_reason 1 BAD_KEY "$KVTOOL" sign unsigned.kvi --key d.h5
"$GEN" d.h5 -o b.kvi --coverage 56 --sign-key key.pem
cmp a.kvi b.kvi || fail "signing after the fact differs from signing at build time"

# Mutations through the CLI: exit 1 with the reason and the sentence of the one check each is
# made for (generic reasons are raised at many places), never a crash (exit >= 128).
size=$(stat -c %s a.kvi)
cp a.kvi magic.kvi; printf "XVI1" | dd of=magic.kvi bs=1 count=4 conv=notrunc status=none
head -c $((size / 2)) a.kvi > trunc.kvi
expect_reason 1 TRUNCATED "$KVTOOL" verify trunc.kvi
contains "$WORK/err" "is truncated: $((size / 2)) bytes of $size recorded in the header"
expect_reason 1 BAD_MAGIC "$KVTOOL" verify magic.kvi
contains "$WORK/err" "does not start with the kvi magic 'KVI1'"
# Byte 200 lies 136 bytes into the zstd frame of section 'keys' (0, 0), past its headers; libzstd
# still decodes the frame, to other bytes.
cp a.kvi flip.kvi; printf '\x00' | dd of=flip.kvi bs=1 seek=200 count=1 conv=notrunc status=none
expect_reason 1 SECTION_DIGEST "$KVTOOL" verify flip.kvi
contains "$WORK/err" "section 'keys' (layer 0, kv head 0) does not match its recorded SHA-256"
# An uncompressed section ('ids' of (0, 0), stored at the offset the manifest gives).
ids_at=$("$KVTOOL" inspect a.kvi --json | /usr/bin/python3 -c 'import json,sys; print(next(s["offset"] for s in json.load(sys.stdin)["manifest"]["sections"] if s["name"] == "ids"))')
cp a.kvi flip-ids.kvi; printf '\xff' | dd of=flip-ids.kvi bs=1 seek=$((ids_at + 3)) count=1 conv=notrunc status=none
expect_reason 1 SECTION_DIGEST "$KVTOOL" verify flip-ids.kvi
contains "$WORK/err" "section 'ids' (layer 0, kv head 0) does not match its recorded SHA-256"
head -c 1 a.kvi > t1.kvi
expect_reason 1 UNKNOWN_FILE_TYPE "$KVTOOL" verify t1.kvi
contains "$WORK/err" "is neither a kvdump (HDF5), a kvi artifact nor a llama.cpp state file"
for n in 7 63; do
  head -c $n a.kvi > t$n.kvi
  expect_reason 1 TRUNCATED "$KVTOOL" verify t$n.kvi
  contains "$WORK/err" "t$n.kvi' is truncated inside the header"
done
for n in 64 65 100 1000 $((size - 81)) $((size - 1)); do
  head -c $n a.kvi > t$n.kvi
  expect_reason 1 TRUNCATED "$KVTOOL" verify t$n.kvi
  contains "$WORK/err" "is truncated: $n bytes of $size recorded in the header"
done

# Export to HDF5.
expect_exit 0 "$KVTOOL" export a.kvi -o a.h5
[ -s a.h5 ] || fail "export wrote nothing"
expect_exit 1 "$KVTOOL" export trunc.kvi -o bad.h5
absent bad.h5
no_temps .
finish
