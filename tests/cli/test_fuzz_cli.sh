#!/usr/bin/env bash
# Every command with hostile bytes in paths, option values and file strings, with and without
# --json (tests/cli/fuzz_cli.py says what each run must satisfy). KVTOOL_FUZZ_CLI_TRIALS and
# KVTOOL_FUZZ_CLI_SEED run it longer or elsewhere; CI runs a fixed seed.
. "$(dirname "$0")/lib.sh"
export KVTOOL_SOURCE=${KVTOOL_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
# Sanitizer builds hold more resident memory for the same work (shadow memory).
[ -z "${KVTOOL_SANITIZED:-}" ] || export KVTOOL_FUZZ_CLI_RSS_MIB=${KVTOOL_FUZZ_CLI_RSS_MIB:-2048}
/usr/bin/python3 "$(dirname "$0")/fuzz_cli.py" "$KVTOOL" "$WORK/fuzz" "${KVTOOL_FUZZ_CLI_TRIALS:-500}" \
  "${KVTOOL_FUZZ_CLI_SEED:-1}" || fail "fuzz_cli found runs that broke the rules above"
exit $FAILS
