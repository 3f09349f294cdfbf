#!/usr/bin/env bash
# Bytes from input in --json output and on the terminal: a path or a file's string may hold any
# byte; JSON gets it as valid UTF-8 (U+FFFD for what is not), stderr gets '?' for control bytes and
# for what is not UTF-8, and no such byte makes a command abort.
. "$(dirname "$0")/lib.sh"
json_ok() {  # json_ok FILE: FILE is one JSON document
  /usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$1" ||
    fail "not valid UTF-8 JSON: $(head -c 200 "$1" | od -c | head -3)"
}
no_raw_bytes() {  # no_raw_bytes FILE: no ESC and no byte that is not UTF-8
  /usr/bin/python3 -c 'import sys; b=open(sys.argv[1],"rb").read(); b.decode("utf-8"); sys.exit(b"\x1b" in b)' "$1" ||
    fail "raw control or non-UTF-8 bytes reach the terminal: $(head -c 200 "$1" | od -c | head -3)"
}

# A missing path with a 0xFF byte and an escape sequence in it.
bad=$'missing\xff\x1b[31m.h5'
for cmd in verify inspect; do
  expect_reason 3 IO_ERROR "$KVTOOL" $cmd "$bad" --json
  json_ok "$WORK/out"
  no_raw_bytes "$WORK/err"
done
# An existing dump so named verifies; its path is in the JSON as U+FFFD.
cp "$FIXTURES/small-f16.h5" $'d\xff.h5'
expect_exit 0 "$KVTOOL" verify $'d\xff.h5' --json
json_ok "$WORK/out"
grep -q '"ok": true' "$WORK/out" || fail "verify of a 0xFF-named dump did not say ok"

# A GGUF whose general.architecture holds 0xFF and an escape sequence: import refuses it by name
# (no RoPE pairing known for it) instead of aborting while printing the message.
/usr/bin/python3 - <<'PY'
import struct
def s(x): return struct.pack("<Q", len(x)) + x
kv = [(b"general.architecture", 8, s(b"\xff\x1b[31mx")),
      (b"\xff\x1b[31mx.block_count", 4, struct.pack("<I", 5))]
out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv))
for k, t, v in kv:
    out += s(k) + struct.pack("<I", t) + v
open("m.gguf", "wb").write(out)
PY
state="$KVTOOL_SOURCE/fuzz/corpus/llama_state/stories-f16.ggsq"
"$KVTOOL" import "$state" --gguf m.gguf -o out.h5 --json > "$WORK/out" 2> "$WORK/err"
code=$?
[ "$code" = 1 ] || [ "$code" = 2 ] || fail "import with a hostile GGUF exited $code (want 1 or 2)"
json_ok "$WORK/out"
no_raw_bytes "$WORK/err"
[ ! -e out.h5 ] || fail "a refused import left out.h5"
exit $FAILS
