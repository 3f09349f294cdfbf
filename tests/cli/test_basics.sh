#!/usr/bin/env bash
# Exit codes and common behaviour of the kvtool CLI (the exit codes README.md documents).
. "$(dirname "$0")/lib.sh"

expect_exit 0 "$KVTOOL" --version
contains "$WORK/out" "kvtool 0.1.0"
expect_exit 0 "$KVTOOL" --help
contains "$WORK/out" "inspect"
for sub in inspect verify export keygen sign dump synth demo reasons query eval merge build store; do
  expect_exit 0 "$KVTOOL" "$sub" --help
done
expect_reason 2 USAGE "$KVTOOL"
expect_reason 2 USAGE "$KVTOOL" frobnicate
expect_reason 2 USAGE "$KVTOOL" inspect
expect_reason 2 USAGE "$KVTOOL" inspect --no-such-flag x
expect_reason 2 USAGE "$KVTOOL" synth --layers 0 --kv-heads 1 --q-heads 1 --head-dim 8 --tokens 8 --seed 1 -o x.h5
absent x.h5
expect_reason 2 USAGE "$KVTOOL" synth --layers 1 --kv-heads 2 --q-heads 3 --head-dim 8 --tokens 8 --seed 1 -o x.h5
absent x.h5
expect_reason 2 USAGE "$KVTOOL" synth --layers 1 --kv-heads 1 --q-heads 1 --head-dim 8 --tokens 8 --seed 1 --dtype f64 -o x.h5
absent x.h5
expect_reason 3 IO_ERROR "$KVTOOL" inspect does-not-exist.h5
expect_reason 3 IO_ERROR "$KVTOOL" verify does-not-exist.kvi
expect_reason 3 IO_ERROR "$KVTOOL" synth --layers 1 --kv-heads 1 --q-heads 1 --head-dim 8 --tokens 8 --seed 1 -o no/such/dir/x.h5
echo "hello" > text.txt
expect_reason 1 UNKNOWN_FILE_TYPE "$KVTOOL" inspect text.txt
expect_exit 1 "$KVTOOL" verify text.txt --json
contains "$WORK/out" '"ok": false'
contains "$WORK/out" '"reason": "UNKNOWN_FILE_TYPE"'
contains "$WORK/out" '"schema_version": 1'
expect_exit 0 "$KVTOOL" reasons
contains "$WORK/out" "STALE_SOURCE"
expect_exit 0 "$KVTOOL" reasons --json
contains "$WORK/out" '"schema_version"'
# One table of reasons: `kvtool reasons`, the man page and reasons.def agree exactly (name, exit
# code, meaning, order).
/usr/bin/python3 "$KVTOOL_SOURCE/man/reasons.py" --check || fail "man/kvtool.1 REASONS differ from reasons.def"
"$KVTOOL" reasons --json > reasons.json
/usr/bin/python3 - "$KVTOOL_SOURCE/man/reasons.py" reasons.json <<'PY' || fail "kvtool reasons differs from reasons.def"
import json, subprocess, sys
table = json.loads(subprocess.check_output([sys.executable, sys.argv[1], "--json"]))
cli = json.load(open(sys.argv[2]))["reasons"]
sys.exit(0 if table == cli and len(cli) > 60 else 1)
PY
# The demo runs end to end.
expect_exit 0 "$KVTOOL" demo --dir demo --model "$SHARED/models/stories260K.bin" --tokenizer "$SHARED/models/tok512.bin"
contains "$WORK/out" "Once upon a time"
contains "$WORK/out" "OK: demo/demo.h5 is a valid kvdump"
contains "$WORK/out" "OK: demo/demo.pq.kvi is a valid kvi artifact (kind pq"
contains "$WORK/out" "oracle"
contains "$WORK/out" "OK: demo/store/objects/"
finish
