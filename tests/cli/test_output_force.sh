#!/usr/bin/env bash
# Every command that writes an output file refuses an existing one unless --force (OUTPUT_EXISTS,
# exit 3, the file untouched), and no command writes over one of its own inputs, even with --force
# and whatever path or symlink names it.
. "$(dirname "$0")/lib.sh"
GEN=$BIN/kvtool-testgen
SYNTH=(synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 64 --seed 3 --query-count 8)
"$KVTOOL" "${SYNTH[@]}" -o d.h5 -q || fail "synth"
"$GEN" d.h5 -o c.kvi --coverage 56 || fail "testgen"
"$BIN/kvtool-pq" build d.h5 -o pq.kvi --prefix 56 -q || fail "pq build"
for i in 0 1; do "$BIN/kvtool-pq" build d.h5 -o s$i.kvi --prefix 56 --shard $i/2 -q || fail "pq shard $i"; done

# refused_unless_force OUT CMD...: with OUT existing, CMD is OUTPUT_EXISTS and OUT keeps its
# bytes; with --force it succeeds.
refused_unless_force() {
  local out=$1; shift
  echo sentinel >"$out"
  expect_reason 3 OUTPUT_EXISTS "$@"
  contains "$WORK/err" "already exists; refusing to overwrite it"
  echo sentinel | cmp -s - "$out" || fail "$* replaced $out without --force"
  no_temps .
  expect_exit 0 "$@" --force
  echo sentinel | cmp -s - "$out" && fail "$* --force did not write $out"
}
refused_unless_force out.h5 "$KVTOOL" "${SYNTH[@]}" -o out.h5 -q
refused_unless_force out.kvi "$KVTOOL" build pq d.h5 -o out.kvi --prefix 56 -q
refused_unless_force out.kvi "$BIN/kvtool-pq" build d.h5 -o out.kvi --prefix 56 -q
refused_unless_force out.kvi "$BIN/kvtool-lsh" build d.h5 -o out.kvi --prefix 56 -q
refused_unless_force out.kvi "$KVTOOL" merge s0.kvi s1.kvi -o out.kvi -q
refused_unless_force out.h5 "$KVTOOL" export c.kvi -o out.h5
refused_unless_force out.kvi "$BIN/kvtool-pq" append pq.kvi d.h5 -o out.kvi -q
if [ -e "$SHARED/models/stories260K.bin" ]; then
  refused_unless_force out.h5 "$KVTOOL" dump --llama2c "$SHARED/models/stories260K.bin" --tokens 8 -o out.h5 -q
fi
# An output that is one of the inputs is refused even with --force: by path, through another
# path, through a symlink, through a hard link.
cp s0.kvi keep0.kvi
ln -s s0.kvi link0.kvi
ln s1.kvi hard1.kvi
for o in s0.kvi ./s0.kvi "$WORK/s0.kvi" link0.kvi hard1.kvi; do
  expect_reason 2 USAGE "$KVTOOL" merge s0.kvi s1.kvi -o "$o" --force -q
  cmp s0.kvi keep0.kvi || fail "merge -o $o replaced a shard"
done
expect_reason 2 USAGE "$KVTOOL" export c.kvi -o ./c.kvi --force
expect_reason 2 USAGE "$KVTOOL" build pq d.h5 -o ./d.h5 --prefix 56 --force -q
expect_reason 2 USAGE "$BIN/kvtool-pq" append pq.kvi d.h5 -o ./pq.kvi --force -q
"$KVTOOL" verify s0.kvi >/dev/null || fail "a shard was damaged"
"$KVTOOL" verify d.h5 >/dev/null || fail "the dump was damaged"
finish
