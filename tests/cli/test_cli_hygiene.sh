#!/usr/bin/env bash
# Command-line conventions: "-" reads standard input (inspect, verify), --shard auto in a Kubernetes
# indexed Job, durations with weeks.
. "$(dirname "$0")/lib.sh"
"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 128 --seed 3 -o d.h5 >/dev/null
"$BIN/kvtool-pq" build d.h5 -o full.kvi --bits 4 -q
mkdir tmp
export TMPDIR=$WORK/tmp

# inspect/verify -: the same answer as with the path, "-" reported as the file, no temporary left.
"$KVTOOL" inspect full.kvi --json > by_path.json
expect_exit 0 "$KVTOOL" inspect - --json < full.kvi
[ "$(json_get "$WORK/out" '["path"]')" = - ] || fail "inspect - names the file '-'"
/usr/bin/python3 - by_path.json "$WORK/out" <<'PY' || fail "inspect - differs from inspect FILE"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
a.pop("path"); b.pop("path")
sys.exit(a != b)
PY
expect_exit 0 "$KVTOOL" verify - < d.h5
contains "$WORK/out" "OK: - is a valid kvdump"
cat full.kvi | "$KVTOOL" verify - >/dev/null || fail "verify - from a pipe"
head -c 4000 full.kvi > cut.kvi
expect_reason 1 TRUNCATED "$KVTOOL" verify - < cut.kvi
expect_reason 1 UNKNOWN_FILE_TYPE "$KVTOOL" inspect - < /dev/null
[ -z "$(ls -A tmp)" ] || fail "temporaries left in TMPDIR: $(ls -A tmp)"

# --shard auto from a Kubernetes indexed Job: the shards merge into the unsharded artifact.
JOB_COMPLETION_INDEX=0 KVTOOL_SHARD_COUNT=2 "$BIN/kvtool-pq" build d.h5 -o s0.kvi --bits 4 --shard auto -q
JOB_COMPLETION_INDEX=1 "$BIN/kvtool-pq" build d.h5 -o s1.kvi --bits 4 --shard auto --shard-count 2 -q
"$KVTOOL" merge s0.kvi s1.kvi -o merged.kvi >/dev/null
cmp -s merged.kvi full.kvi || fail "Kubernetes shards do not merge into the unsharded artifact"
JOB_COMPLETION_INDEX=1 expect_reason 2 USAGE "$BIN/kvtool-pq" build d.h5 -o x.kvi --shard auto
contains "$WORK/err" "KVTOOL_SHARD_COUNT"
absent x.kvi

# Durations: weeks are accepted, nonsense is a usage error.
"$KVTOOL" store put full.kvi --store st >/dev/null
expect_exit 0 "$KVTOOL" store gc --store st --grace 1w
expect_reason 2 USAGE "$KVTOOL" store gc --store st --grace 1y

# Settings: flag > environment > config file (--config FILE, else $XDG_CONFIG_HOME/kvtool/config).
"$KVTOOL" store put full.kvi --store st2 >/dev/null
printf '# team defaults\nstore = st\ntenant = default\n' > team.cfg
expect_exit 0 "$KVTOOL" store ls --config team.cfg
contains "$WORK/out" "default  pq"
expect_exit 0 env KVTOOL_TENANT=other "$KVTOOL" store ls --config team.cfg
[ ! -s "$WORK/out" ] || fail "the environment's tenant did not override the config file's"
expect_exit 0 env KVTOOL_TENANT=other "$KVTOOL" store ls --config team.cfg --tenant default --store st2
contains "$WORK/out" "default  pq"
mkdir -p xdg/kvtool && cp team.cfg xdg/kvtool/config
expect_exit 0 env XDG_CONFIG_HOME="$WORK/xdg" "$KVTOOL" store ls --json
[ "$(json_get "$WORK/out" '["refs"][0]["key"]["tenant"]')" = default ] || fail "default config location"
expect_exit 0 env KVTOOL_STORE=st "$KVTOOL" store ls --all-tenants
contains "$WORK/out" "default  pq"
printf 'stor = st\n' > typo.cfg
expect_reason 2 USAGE "$KVTOOL" store ls --config typo.cfg
contains "$WORK/err" "typo.cfg:1: unknown key 'stor'"
expect_reason 3 IO_ERROR "$KVTOOL" --config missing.cfg store ls
expect_exit 0 env KVTOOL_THREADS=1 "$BIN/kvtool-pq" build d.h5 -o t1.kvi --bits 4 -q
cmp -s t1.kvi full.kvi || fail "KVTOOL_THREADS changed the artifact"
expect_reason 2 USAGE env KVTOOL_THREADS=many "$BIN/kvtool-pq" build d.h5 -o t2.kvi --bits 4 -q

# -v/--verbose: libhdf5's own error stack for a damaged dump (kvtool's reason line either way).
{ printf '\x89HDF\r\n\x1a\n'; head -c 3000 d.h5 | tail -c 2992; } > damaged.h5
expect_reason 1 NOT_A_DUMP "$KVTOOL" inspect damaged.h5
! grep -q "HDF5-DIAG" "$WORK/err" || fail "libhdf5 error stack printed without -v"
expect_reason 1 NOT_A_DUMP "$KVTOOL" inspect damaged.h5 -v
contains "$WORK/err" "HDF5-DIAG"
expect_exit 0 "$KVTOOL" --verbose verify d.h5 --config team.cfg
contains "$WORK/err" "settings from config file 'team.cfg'"

# Bash completion: generated from the command definitions, so it offers exactly the subcommands and
# options the programs have.
expect_exit 0 "$KVTOOL" completion bash
cp "$WORK/out" kvtool.bash
bash -n kvtool.bash || fail "the completion script is not valid bash"
complete_words() {  # what completing the given words offers, one line
  bash -c 'source kvtool.bash; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _kvtool; echo "${COMPREPLY[*]}"' _ "$@"
}
[ "$(complete_words kvtool sto)" = store ] || fail "kvtool sto -> $(complete_words kvtool sto)"
[ "$(complete_words kvtool store put --sto)" = --store ] || fail "store put --sto"
[ "$(complete_words kvtool-pq build --subs)" = --subspaces ] || fail "kvtool-pq build --subs"
[ "$(complete_words kvtool build pq --bi)" = --bits ] || fail "kvtool build pq --bi (alias of kvtool-pq build)"
[ "$(complete_words kvtool build cl)" = clusterkv ] || fail "kvtool build cl"
[ "$(complete_words kvtool-squeeze build d.h5 --percent-clu)" = --percent-clusters ] || fail "squeeze option"
[ "$(complete_words kvtool verify --source d.)" = d.h5 ] || fail "a file after an option taking a value"
# Every subcommand kvtool --help lists is offered after "kvtool ".
"$KVTOOL" --help | awk '/^Subcommands:/{on=1; next} on && NF {print $1}' | sort > listed
complete_words kvtool "" | tr ' ' '\n' | grep -v '^-' | sort > offered
cmp -s listed offered || fail "subcommands in --help and in the completion differ: $(diff listed offered | tr '\n' ' ')"
[ -s listed ] || fail "no subcommands parsed from kvtool --help"

# kvtool alone: the command list, exactly what `kvtool --help` prints (on stderr), then a USAGE
# error (exit 2) that says to choose a command; nothing on stdout.
"$KVTOOL" --help > help.txt
expect_reason 2 USAGE "$KVTOOL"
head -c "$(stat -c %s help.txt)" "$WORK/err" | cmp -s - help.txt || fail "kvtool alone does not print the --help text first"
grep -q "no command given" "$WORK/err" || fail "kvtool alone does not say a command is missing: $(tail -2 "$WORK/err")"
for sub in inspect verify build demo load store completion; do
  grep -Eq "^  $sub( |$)" "$WORK/err" || fail "kvtool alone does not list '$sub'"
done
[ ! -s "$WORK/out" ] || fail "kvtool alone wrote to stdout"
expect_reason 2 USAGE "$KVTOOL" -v  # global options but no command: the same
head -c "$(stat -c %s help.txt)" "$WORK/err" | cmp -s - help.txt || fail "kvtool -v does not print the --help text"

# Every Catch2 test is its own ctest entry (named "unit:NAME"): catch_discover_tests hands ctest a CMake list, so a name
# with ';' or a bracket (an unclosed '[' stops the list splitting) merges tests into one entry that
# matches nothing and passes without running them.
if [ -x "$BIN/kvtool_unit" ] && [ -x "$BIN/kvtool_unit_pool" ]; then
  for unit in kvtool_unit kvtool_unit_pool; do
    "$BIN/$unit" --list-test-names-only || true  # Catch2 v2 exits with the count
  done > unit-names
  [ "$(wc -l < unit-names)" -gt 50 ] || fail "too few unit test names listed: $(wc -l < unit-names)"
  ! grep -n '[][;]' unit-names || fail "unit test names with ';', '[' or ']' (ctest cannot select them)"
  n_ctest=$(cd "$BIN/.." && ctest -N -R '^unit:' 2>/dev/null | grep -c 'Test *#') || true
  [ "$n_ctest" = 0 ] || [ "$n_ctest" = "$(wc -l < unit-names)" ] ||
    fail "ctest lists $n_ctest unit tests, kvtool_unit and kvtool_unit_pool $(wc -l < unit-names)"
fi
finish
