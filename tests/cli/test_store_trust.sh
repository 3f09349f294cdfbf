#!/usr/bin/env bash
# One trust policy for store get, load --store and verify: trust is applied before a lookup can be
# ambiguous, <tenant>/ key folders work everywhere, an empty trusted-keys setting fails closed, and
# every store subcommand validates tenant names alike (no paths, controls or bidi characters).
. "$(dirname "$0")/lib.sh"
S=$BIN/kvtool-squeeze
M=$SHARED/models
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Lily and Tom went to the park." --tokens 200 --queries -o p.h5 -q --tenant acme
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Lily and Tom went to the park." --tokens 200 --queries -o q.h5 -q --tenant other
"$S" build p.h5 -o a.kvi --prefix 160 --observation-window 40 -q
"$S" build p.h5 -o a2.kvi --prefix 160 --observation-window 40 --percent-clusters 10 -q
"$S" build p.h5 -o a3.kvi --prefix 160 --observation-window 40 --percent-clusters 20 -q
"$S" build p.h5 -o a4.kvi --prefix 160 --observation-window 40 --percent-clusters 30 -q
"$S" build q.h5 -o b.kvi --prefix 160 --observation-window 40 -q
"$KVTOOL" keygen -o acme.pem >/dev/null
"$KVTOOL" keygen -o mallory.pem >/dev/null
cp a.kvi a-signed.kvi && "$KVTOOL" sign a-signed.kvi --key acme.pem >/dev/null
cp a3.kvi a3-signed.kvi && "$KVTOOL" sign a3-signed.kvi --key acme.pem >/dev/null
cp a4.kvi a4-mallory.kvi && "$KVTOOL" sign a4-mallory.kvi --key mallory.pem >/dev/null
cp b.kvi b-by-acme.kvi && "$KVTOOL" sign b-by-acme.kvi --key acme.pem >/dev/null
key() { "$KVTOOL" inspect "$1" --json | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin)["manifest"]; src=s["source"]; print(src["model_artifact_sha256"], src["adapter_set_sha256"], src["prefix_tokens_sha256"], s["params_digest"])'; }
read -r MODEL ADAPTER PREFIX PARAMS < <(key a.kvi)
KEY=(--model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind squeeze)
get() { "$KVTOOL" store get --store "$1" --tenant acme "${KEY[@]}" "${@:2}"; }
load() { "$KVTOOL" load --store "$1" --tenant acme "${KEY[@]}" --device cpu "${@:2}"; }
mkdir -p tk/acme && cp acme.pub.pem tk/acme/

# Refs the reader's trust refuses never make a lookup ambiguous: an unsigned ref and one signed by
# an unknown key, both with other params under acme's key, cannot deny service to a trusting reader.
expect_exit 0 "$KVTOOL" store put a-signed.kvi --store st
expect_exit 0 "$KVTOOL" store put a2.kvi --store st
expect_exit 0 "$KVTOOL" store put a4-mallory.kvi --store st
for trust in "--pubkey acme.pub.pem --require-signature" "--trusted-keys tk"; do
  # shellcheck disable=SC2086
  expect_exit 0 get st $trust
  cmp "$(cat "$WORK/out")" a-signed.kvi || fail "get ($trust) served another artifact"
  contains "$WORK/err" "warning \[SIGNATURE_REQUIRED\]"
  # shellcheck disable=SC2086
  expect_exit 0 load st $trust
done
expect_exit 0 get st --pubkey acme.pub.pem --require-signature --json
[ "$(json_get "$WORK/out" '["warnings"].__len__()')" = 2 ] || fail "the two refused refs are not reported as warnings"
expect_exit 0 get st --pubkey acme.pub.pem  # a trusted key alone refuses unsigned artifacts too
cmp "$(cat "$WORK/out")" a-signed.kvi || fail "get --pubkey served another artifact"
# A reader whose trust admits the extra refs (no trust options) still sees the ambiguity.
expect_reason 1 STORE_AMBIGUOUS get st
expect_reason 1 STORE_AMBIGUOUS load st
# Ambiguity among trusted refs is still STORE_AMBIGUOUS; --params-digest chooses.
expect_exit 0 "$KVTOOL" store put a3-signed.kvi --store st
expect_reason 1 STORE_AMBIGUOUS get st --pubkey acme.pub.pem --require-signature
expect_reason 1 STORE_AMBIGUOUS get st --trusted-keys tk
expect_reason 1 STORE_AMBIGUOUS load st --trusted-keys tk
expect_exit 0 get st --trusted-keys tk --params-digest "$PARAMS"
cmp "$(cat "$WORK/out")" a-signed.kvi || fail "--params-digest chose another artifact"
# When no match is trusted, the refusal is the admission reason, not an ambiguity.
expect_exit 0 "$KVTOOL" store put a2.kvi --store su
expect_exit 0 "$KVTOOL" store put a4-mallory.kvi --store su
expect_exit 1 get su --pubkey acme.pub.pem --require-signature
grep -q "error \[SIGNATURE_REQUIRED\]\|error \[UNTRUSTED_KEY\]" "$WORK/err" || fail "untrusted-only lookup: $(cat "$WORK/err")"

# One --trusted-keys policy for store get, load --store and verify: <tenant>/ folders everywhere.
expect_exit 0 "$KVTOOL" store put a-signed.kvi --store s1
expect_exit 0 get s1 --trusted-keys tk
expect_exit 0 load s1 --trusted-keys tk
expect_exit 0 "$KVTOOL" load a-signed.kvi --trusted-keys tk --device cpu
expect_exit 0 "$KVTOOL" verify a-signed.kvi --trusted-keys tk
expect_reason 1 UNTRUSTED_KEY "$KVTOOL" verify a4-mallory.kvi --trusted-keys tk
expect_reason 1 SIGNATURE_REQUIRED "$KVTOOL" verify a.kvi --trusted-keys tk
expect_reason 1 UNTRUSTED_KEY "$KVTOOL" verify b-by-acme.kvi --trusted-keys tk  # acme's folder vouches for acme only
expect_reason 1 UNTRUSTED_KEY "$KVTOOL" load b-by-acme.kvi --trusted-keys tk --device cpu
expect_exit 0 "$KVTOOL" verify b.kvi --trusted-keys tk  # unsigned, and other has no folder
# The same errors everywhere: a directory without keys, a missing one, --require-signature alone.
mkdir empty
expect_reason 2 USAGE get s1 --trusted-keys empty
expect_reason 2 USAGE load s1 --trusted-keys empty
expect_reason 2 USAGE "$KVTOOL" verify a-signed.kvi --trusted-keys empty
expect_reason 2 USAGE "$KVTOOL" store put a-signed.kvi --store s2 --trusted-keys empty
expect_reason 3 IO_ERROR get s1 --trusted-keys missing
expect_reason 3 IO_ERROR load s1 --trusted-keys missing
expect_reason 3 IO_ERROR "$KVTOOL" verify a-signed.kvi --trusted-keys missing
expect_reason 2 USAGE get s1 --require-signature
expect_reason 2 USAGE load s1 --require-signature
expect_reason 2 USAGE "$KVTOOL" verify a-signed.kvi --require-signature

# KVTOOL_TRUSTED_KEYS set but empty (or --trusted-keys '') fails closed in every command reading it:
# an artifact signed by an unknown key is never served.
expect_exit 0 "$KVTOOL" store put a4-mallory.kvi --store s3
for how in env flag; do
  if [ $how = env ]; then pre=(env KVTOOL_TRUSTED_KEYS=); post=(); else pre=(); post=(--trusted-keys ''); fi
  expect_reason 2 USAGE "${pre[@]}" "$KVTOOL" store get --store s3 --tenant acme "${KEY[@]}" "${post[@]}"
  absent "$(cat "$WORK/out")"
  expect_reason 2 USAGE "${pre[@]}" "$KVTOOL" store put a4-mallory.kvi --store s4 "${post[@]}"
  absent s4
  expect_reason 2 USAGE "${pre[@]}" "$KVTOOL" verify a4-mallory.kvi "${post[@]}"
  expect_reason 2 USAGE "${pre[@]}" "$KVTOOL" load a4-mallory.kvi --device cpu "${post[@]}"
  expect_reason 2 USAGE "${pre[@]}" "$KVTOOL" load --store s3 --tenant acme "${KEY[@]}" --device cpu "${post[@]}"
done
expect_exit 0 env KVTOOL_TRUSTED_KEYS=tk "$KVTOOL" verify a-signed.kvi
expect_reason 1 UNTRUSTED_KEY env KVTOOL_TRUSTED_KEYS=tk "$KVTOOL" store get --store s3 --tenant acme "${KEY[@]}"
expect_reason 1 UNTRUSTED_KEY env KVTOOL_TRUSTED_KEYS=tk "$KVTOOL" load --store s3 --tenant acme "${KEY[@]}" --device cpu

# One tenant-name rule for every store subcommand: paths, '..', controls, bidi and invisible
# format characters, and bytes that are not UTF-8 are BAD_STORE_KEY for ls as for get and rm.
for bad in "../x" "a/b" ".." "." "$(printf 'x\ty')" "$(printf 'acme\e[2K')" "$(printf 'evil\u202eemca')" \
  "$(printf 'ac\u200bme')" "$(printf 'a\u2066b')" "$(printf 'x\xc2\x85')" "$(printf 'x\xff')" "$(printf '\xef\xbb\xbfacme')"; do
  expect_reason 2 BAD_STORE_KEY "$KVTOOL" store ls --store st --tenant "$bad"
  expect_reason 2 BAD_STORE_KEY env KVTOOL_TENANT="$bad" "$KVTOOL" store ls --store st
  expect_reason 2 BAD_STORE_KEY "$KVTOOL" store get --store st --tenant "$bad" "${KEY[@]}"
  expect_reason 2 BAD_STORE_KEY "$KVTOOL" store rm --store st --tenant "$bad" "${KEY[@]}"
done
# Nor can a dump or an artifact carry such a tenant into the store (put takes the artifact's).
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 3 --tenant "$(printf 'evil\u202e')" -o bidi.h5 -q
expect_reason 1 BAD_ATTRIBUTE "$KVTOOL" verify bidi.h5
# The dump reader refuses that tenant, so the artifact is a valid one re-packed with it.
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 3 -o plain.h5 -q
"$BIN/kvtool-testgen" plain.h5 -o plain.kvi --coverage 56 || fail "testgen"
"$BIN/kvtool-testgen" repack plain.kvi -o bidi.kvi --set "/source/tenant_namespace=\"$(printf 'evil\u202e')\"" ||
  fail "repack with a bidi tenant"
expect_reason 1 BAD_MANIFEST "$KVTOOL" store put bidi.kvi --store st
# UTF-8 letters remain valid names.
expect_reason 1 STORE_MISS "$KVTOOL" store get --store st --tenant "$(printf 'caf\xc3\xa9')" "${KEY[@]}"
expect_exit 0 "$KVTOOL" store ls --store st --tenant "$(printf 'caf\xc3\xa9')"
# ls never prints raw control or bidi bytes from the store directory.
printf '{}' >"st/refs/$(printf '\e[2Jevil\u202eflip')".json
expect_exit 0 "$KVTOOL" store ls --store st --all-tenants
expect_exit 0 "$KVTOOL" store ls --store st --tenant acme
LC_ALL=C grep -q "$(printf '\e')" "$WORK/err" "$WORK/out" && fail "ls printed a raw escape character"
LC_ALL=C grep -q "$(printf '\xe2\x80\xae')" "$WORK/err" "$WORK/out" && fail "ls printed a raw bidi override"
contains "$WORK/err" 'x1b'
finish
