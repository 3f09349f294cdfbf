# Shared helpers for the CLI tests (sourced). Each test runs in a fresh temporary directory.
set -u
KVTOOL=${KVTOOL:?KVTOOL must point at the kvtool binary}
BIN=${KVTOOL_BIN_DIR:-$(dirname "$KVTOOL")}
SHARED=${KVTOOL_SHARED:-../shared}
FIXTURES=${KVTOOL_FIXTURES:-fixtures}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
FAILS=0

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
# skip WHY: ends the test as skipped (ctest's SKIP_RETURN_CODE 77), saying why.
skip() { echo "skipped: $*"; exit 77; }

# expect_exit CODE CMD...: runs CMD, captures stdout/stderr in $WORK/out, $WORK/err.
expect_exit() {
  local want=$1; shift
  "$@" >"$WORK/out" 2>"$WORK/err"
  local got=$?
  if [ "$got" != "$want" ]; then
    fail "expected exit $want, got $got: $*"
    sed 's/^/    stderr: /' "$WORK/err" | head -5 >&2
  fi
}

# expect_reason CODE REASON CMD...: exit code and the "kvtool: error [REASON]:" line.
expect_reason() {
  local want=$1 reason=$2; shift 2
  expect_exit "$want" "$@"
  grep -q "error \[$reason\]: " "$WORK/err" || fail "expected reason $reason from: $* (stderr: $(head -c 300 "$WORK/err"))"
}

contains() { grep -q -- "$2" "$1" || fail "$1 does not contain '$2'"; }
absent() { [ ! -e "$1" ] || fail "$1 should not exist"; }
no_temps() { local n; n=$(find "${1:-.}" -name '.*.tmp.*' | wc -l); [ "$n" = 0 ] || fail "$n temporary files left in ${1:-.}"; }
json_get() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval('d'+sys.argv[2]))" "$1" "$2"; }

finish() {
  if [ "$FAILS" != 0 ]; then echo "$FAILS check(s) failed" >&2; exit 1; fi
  echo "all checks passed"
}
