#!/usr/bin/env bash
# Hostile dumps through the CLI: HDF5 dumps written with h5py
# (make_hostile_dumps.py) or found by fuzz_dump (fuzz/crashes/) exit 1 with their reason from verify,
# inspect and builds, never 3/4 or a signal, and the resource bombs stay under 200 MB peak RSS and 5 s.
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
/usr/bin/python3 "$HERE/make_hostile_dumps.py" d || { echo "cannot write the hostile dumps" >&2; exit 1; }
build() { "$KVTOOL" build pq "$1" -o "$WORK/x.kvi" --force --subspaces 4 --bits 4 --threads 1 -q; }

expect_exit 0 "$KVTOOL" verify d/ok.h5
expect_exit 0 build d/ok.h5

# finding 13: every dump verify rejects, builds reject with the same reason.
while read -r file reason; do
  expect_reason 1 "$reason" "$KVTOOL" verify "d/$file"
  expect_reason 1 "$reason" build "d/$file"
done <<'EOF'
tenant_nul.h5 BAD_ATTRIBUTE
tenant_traversal.h5 BAD_ATTRIBUTE
tenant_dotdot.h5 BAD_ATTRIBUTE
tenant_empty.h5 BAD_ATTRIBUTE
sha_short.h5 BAD_ATTRIBUTE
sha_nonhex.h5 BAD_ATTRIBUTE
positions_decreasing.h5 BAD_ATTRIBUTE
q_nan.h5 NON_FINITE
q_inf.h5 NON_FINITE
qpos_negative.h5 BAD_ATTRIBUTE
qpos_beyond.h5 BAD_ATTRIBUTE
headmap_long.h5 BAD_HEAD_MAP
external.h5 NOT_A_DUMP
EOF
expect_reason 1 BAD_ATTRIBUTE "$KVTOOL" inspect d/tenant_nul.h5

# findings 12 and 13: shapes the file does not hold, tiny chunks, a decompression bomb. Each
# command runs under /usr/bin/time for its peak RSS (KB) and is killed after 20 s.
bounded() {  # bounded REASON CMD...: exit 1 with REASON, < 200 MB peak RSS, < 5 s
  local reason=$1; shift
  local t0 t1 rss
  t0=$(date +%s%N)
  expect_reason 1 "$reason" /usr/bin/time -f %M -o "$WORK/rss" timeout 20 "$@"
  t1=$(date +%s%N)
  rss=$(tail -n 1 "$WORK/rss")
  [ "${rss:-999999999}" -lt 204800 ] 2>/dev/null || fail "$* peaked at ${rss} KB (limit 200 MB)"
  [ $(((t1 - t0) / 1000000)) -lt 5000 ] || fail "$* took $(((t1 - t0) / 1000000)) ms (limit 5 s)"
}
for f in layers_2p20.h5 huge_unwritten.h5 contiguous_unwritten.h5 tiny_chunks.h5 gzip_bomb.h5; do
  bounded SHAPE_MISMATCH "$KVTOOL" verify "d/$f"
  bounded SHAPE_MISMATCH "$KVTOOL" inspect "d/$f"
  bounded SHAPE_MISMATCH "$KVTOOL" build pq "d/$f" -o "$WORK/y.kvi" --subspaces 4 --bits 4 --threads 1 -q
done
absent "$WORK/y.kvi"

# finding 13: the fuzzer's dump whose global heap collection claims a 1 GiB string (a SIGSEGV in
# libhdf5 before): refused by every command that opens it, in bounded memory and time.
crash="$HERE/../../fuzz/crashes/dump-hdf5-global-heap-vlen-attr.h5"
bounded NOT_A_DUMP "$KVTOOL" verify "$crash"
bounded NOT_A_DUMP "$KVTOOL" inspect "$crash"
bounded NOT_A_DUMP "$KVTOOL" build pq "$crash" -o "$WORK/z.kvi" --subspaces 4 --bits 4 --threads 1 -q
contains "$WORK/err" "global heap"
absent "$WORK/z.kvi"
no_temps .
finish
