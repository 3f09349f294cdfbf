#!/usr/bin/env bash
# Format stability: the committed fixtures (written by an earlier build, see fixtures/make_fixtures.sh)
# still read and verify, their digests are unchanged, and inspect prints the golden output.
. "$(dirname "$0")/lib.sh"
cp -r "$FIXTURES" fx
cd fx

expect_exit 0 "$KVTOOL" verify small-f16.h5
expect_exit 0 "$KVTOOL" verify stories-f32.h5
for f in small-f16 stories-f32; do
  "$KVTOOL" verify $f.h5 --json | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({k: d[k] for k in ("content_digest","snapshot_digest")}, indent=1, sort_keys=True))' > $f.digests
  cmp -s $f.digests expected/$f-digests.json || fail "digests of $f.h5 changed: $(cat $f.digests)"
done
expect_exit 0 "$KVTOOL" verify container-test.kvi --source small-f16.h5 --strict-snapshot
expect_exit 0 "$KVTOOL" verify container-test-signed.kvi --source small-f16.h5 --pubkey fixture-signing.pub.pem --require-signature
contains "$WORK/out" "(trusted)"
expect_reason 1 SIGNATURE_REQUIRED "$KVTOOL" verify container-test.kvi --pubkey fixture-signing.pub.pem
# The container fixture is bound to rows [0, 40): a dump whose committed rows stop earlier is refused.
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 48 --seed 11 --dtype f16 --frontier 30 \
  --tenant fixtures --query-count 4 -o short.h5 -q
expect_reason 1 COVERAGE_BEYOND_FRONTIER "$KVTOOL" verify container-test.kvi --source short.h5

# Golden outputs of inspect.
"$KVTOOL" inspect small-f16.h5 > got.txt
diff -u expected/inspect-small-f16.txt got.txt || fail "inspect small-f16.h5 differs from the golden output"
"$KVTOOL" inspect container-test-signed.kvi > got.txt
diff -u expected/inspect-container-test-signed.txt got.txt || fail "inspect container-test-signed.kvi differs from the golden output"
finish
