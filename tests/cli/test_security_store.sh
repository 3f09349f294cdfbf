#!/usr/bin/env bash
# The prefix store under attack, through the CLI: symlinks planted in the store, tenant poisoning,
# damaged refs, the put/gc race and temporaries of killed writers; and text output by default.
. "$(dirname "$0")/lib.sh"
GEN=$BIN/kvtool-testgen
for t in alice bob; do
  "$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 3 --tenant $t -o $t.h5 -q
done
"$GEN" alice.h5 -o alice.kvi --coverage 56 || fail "testgen"
"$GEN" bob.h5 -o bob.kvi --coverage 56 || fail "testgen"
"$KVTOOL" keygen -o alice-key.pem >/dev/null
"$KVTOOL" keygen -o mallory.pem >/dev/null
cp alice.kvi alice-signed.kvi && "$KVTOOL" sign alice-signed.kvi --key alice-key.pem >/dev/null
cp alice.kvi alice-mallory.kvi && "$KVTOOL" sign alice-mallory.kvi --key mallory.pem >/dev/null
key() { "$KVTOOL" inspect "$1" --json | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin)["manifest"]; src=s["source"]; print(src["model_artifact_sha256"], src["adapter_set_sha256"], src["prefix_tokens_sha256"])'; }
read -r MODEL ADAPTER PREFIX < <(key alice.kvi)
get() { "$KVTOOL" store get --store "$1" --tenant "$2" --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind container-test "${@:3}"; }

# finding 5: gc never deletes through a symlinked directory planted under objects/.
expect_exit 0 "$KVTOOL" store put alice.kvi --store s5
mkdir victim && for i in 1 2 3 4 5 6; do echo precious >victim/f$i; done
ln -s "$WORK/victim" s5/objects/zz
expect_exit 0 "$KVTOOL" store gc --store s5 --grace 0s
[ "$(ls victim | wc -l)" = 6 ] || fail "finding 5: gc deleted files outside the store"
contains "$WORK/err" "objects/zz"
# ... and put never writes through a symlinked objects/<aa>.
hex=$(sha256sum bob.kvi | cut -c1-64)
mkdir outside && ln -s "$WORK/outside" "s5/objects/${hex:0:2}"
expect_reason 1 STORE_CORRUPT "$KVTOOL" store put bob.kvi --store s5
[ -z "$(ls -A outside)" ] || fail "finding 5: put wrote through a symlink"

# finding 6: an unsigned or foreign-signed put never replaces a signed ref; modes are private.
expect_exit 0 "$KVTOOL" store put alice-signed.kvi --store s6
expect_reason 1 SIGNATURE_REQUIRED "$KVTOOL" store put alice.kvi --store s6
expect_reason 1 UNTRUSTED_KEY "$KVTOOL" store put alice-mallory.kvi --store s6
expect_exit 0 get s6 alice
cmp "$(cat "$WORK/out")" alice-signed.kvi || fail "finding 6: alice's ref was replaced"
expect_reason 1 UNTRUSTED_KEY get s6 alice --pubkey mallory.pub.pem
expect_exit 0 get s6 alice --pubkey alice-key.pub.pem --require-signature
[ "$(stat -c %a "$(cat "$WORK/out")")" = 600 ] || fail "finding 6: object mode is not 600"
[ "$(find s6 -type f ! -perm 600 | wc -l)" = 0 ] || fail "finding 6: files readable by others: $(find s6 -type f ! -perm 600)"
[ "$(find s6 -type d ! -perm 700 | wc -l)" = 0 ] || fail "finding 6: directories open to others"
expect_exit 0 "$KVTOOL" store put alice.kvi --store g6 --group-shared
[ "$(find g6 -type f ! -perm 640 | wc -l)" = 0 ] || fail "finding 6: group-shared files are not 640"
# Per-tenant keys: alice's folder vouches for alice only.
mkdir -p trusted/alice && cp alice-key.pub.pem trusted/alice/
expect_exit 0 "$KVTOOL" store put alice-signed.kvi --store t6 --trusted-keys trusted
expect_reason 1 SIGNATURE_REQUIRED "$KVTOOL" store put alice.kvi --store t6b --trusted-keys trusted
cp bob.kvi bob-by-alice.kvi && "$KVTOOL" sign bob-by-alice.kvi --key alice-key.pem >/dev/null
expect_reason 1 UNTRUSTED_KEY "$KVTOOL" store put bob-by-alice.kvi --store t6 --trusted-keys trusted
# ls lists one tenant, or all only when asked.
expect_exit 0 "$KVTOOL" store put bob.kvi --store s6
expect_reason 2 USAGE "$KVTOOL" store ls --store s6
expect_exit 0 "$KVTOOL" store ls --store s6 --tenant bob --json
[ "$(json_get "$WORK/out" '["refs"].__len__()')" = 1 ] || fail "finding 6: ls --tenant bob lists other tenants"
expect_exit 0 "$KVTOOL" store ls --store s6 --all-tenants --json
[ "$(json_get "$WORK/out" '["refs"].__len__()')" = 2 ] || fail "finding 6: ls --all-tenants"

# finding 7: damaged refs are reported and skipped, for every command.
expect_exit 0 "$KVTOOL" store put alice.kvi --store s7
echo '{"key":5}' >s7/refs/k.json
echo '{"object":5}' >s7/refs/o.json
echo '{"created":"x"}' >s7/refs/c.json
/usr/bin/python3 -c 'print("[" * 100000 + "]" * 100000)' >s7/refs/deep.json
mkfifo s7/refs/fifo.json
# (timeout: a reader that opens the FIFO without O_NONBLOCK hangs)
expect_exit 0 timeout 20 "$KVTOOL" store get --store s7 --tenant alice --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind container-test
contains "$WORK/err" "refs/k.json"
expect_exit 0 timeout 20 "$KVTOOL" store ls --store s7 --tenant alice
expect_exit 0 timeout 20 "$KVTOOL" store gc --store s7 --grace 0s --keep-last 1
expect_exit 0 timeout 20 "$KVTOOL" store rm --store s7 --tenant alice --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind container-test

# finding 8: put and gc in parallel never leave a ref naming a deleted object.
expect_exit 0 "$KVTOOL" store put alice.kvi --store s8
dangling=0
for i in $(seq 40); do
  "$KVTOOL" store rm --store s8 --tenant alice --model "$MODEL" --adapter "$ADAPTER" --prefix-hash "$PREFIX" --kind container-test >/dev/null 2>&1
  "$KVTOOL" store put alice.kvi --store s8 >/dev/null 2>&1 &
  "$KVTOOL" store gc --store s8 --grace 0s >/dev/null 2>&1
  wait
  get s8 alice >/dev/null 2>&1 || dangling=$((dangling + 1))
done
[ "$dangling" = 0 ] || fail "finding 8: $dangling of 40 put/gc races left a dangling ref"

# finding 9: gc removes old temporaries; a writer removes stale ones of its own output.
expect_exit 0 "$KVTOOL" store put alice.kvi --store s9
shard=$(dirname "$(find s9/objects -name '*.kvi' | head -1)")
echo partial >"$shard/.deadbeef.kvi.tmp.Xy12Ab" && touch -d '2 hours ago' "$shard/.deadbeef.kvi.tmp.Xy12Ab"
echo partial >s9/refs/.r.json.tmp.Xy12Ab && touch -d '2 hours ago' s9/refs/.r.json.tmp.Xy12Ab
echo partial >"$shard/.young.kvi.tmp.1.a"
expect_exit 0 "$KVTOOL" store gc --store s9 --grace 1h --json
[ "$(json_get "$WORK/out" '["temps_removed"]')" = 2 ] || fail "finding 9: gc left old temporaries"
[ -e "$shard/.young.kvi.tmp.1.a" ] || fail "finding 9: gc removed a young temporary"
# A command killed with SIGKILL leaves its temporary; the next writer of that output removes it.
sleep 100 &
dead=$!
kill -9 $dead; wait $dead 2>/dev/null
echo partial >".x.h5.tmp.$dead.killed"
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 4 -o x.h5 -q
[ -z "$(find . -maxdepth 1 -name '.x.h5.tmp.*')" ] || fail "finding 9: a stale temporary of x.h5 stayed"
[ -s x.h5 ] || fail "finding 9: synth wrote no x.h5"

# put, rm and gc print text, JSON only with --json.
expect_exit 0 "$KVTOOL" store gc --store s9
grep -q '^{' "$WORK/out" && fail "gc printed JSON without --json"
contains "$WORK/out" "removed"
expect_exit 0 "$KVTOOL" store put alice.kvi --store s9
grep -q '^{' "$WORK/out" && fail "put printed JSON without --json"
finish
