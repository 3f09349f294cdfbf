#!/usr/bin/env bash
# A Llama-3-8B-shaped index build (docs/performance.md, "Scale"): synthesizes the 32 layers x 8 kv heads x
# 32,768 tokens x d 128 fp16 dump (4 GiB of K/V; 32 query heads, 64 queries at the last positions)
# once, then builds all four kinds with their defaults, one after the other, and prints each
# build's wall time, its peak RSS and the total. The goal is a total under 5 minutes on a 2-core
# machine; the script exits 1 when the total is over KVTOOL_SCALE_GOAL_S (default 300).
#
#   tests/bench/scale_llama8b.sh [BIN_DIR]      (ctest -L bench runs it with the build's bin/)
#
# Environment: KVTOOL_BENCH_DIR (default /tmp/kvtool-bench; needs ~5 GiB free), KVTOOL_THREADS.
set -euo pipefail
bin=${1:-${KVTOOL_BIN_DIR:-build/bin}}
dir=${KVTOOL_BENCH_DIR:-/tmp/kvtool-bench}
goal=${KVTOOL_SCALE_GOAL_S:-300}
mkdir -p "$dir"
dump=$dir/synth-32x8x32768x128-f16-q64.h5
if [ ! -f "$dump" ]; then
  start=$SECONDS
  "$bin/kvtool" synth --layers 32 --kv-heads 8 --q-heads 32 --head-dim 128 --tokens 32768 --seed 1 \
    --query-count 64 -o "$dump.tmp" -q
  mv "$dump.tmp" "$dump"
  echo "synthesized $dump ($(du -h "$dump" | cut -f1)) in $((SECONDS - start)) s"
fi
cat "$dump" > /dev/null  # into the page cache, so the first kind is not charged for the disk
total=0
printf '%-10s %10s %12s %12s\n' kind seconds "peak MiB" "index MiB"
for kind in pq clusterkv lsh squeeze; do
  out=$dir/scale8b.$kind.kvi
  /usr/bin/time -f '%e %M' -o "$dir/time.txt" "$bin/kvtool-$kind" build "$dump" -o "$out" -q --force
  read -r secs kib < "$dir/time.txt"
  awk -v k="$kind" -v s="$secs" -v m="$kib" -v b="$(stat -c %s "$out")" \
    'BEGIN { printf "%-10s %10.1f %12.0f %12.1f\n", k, s, m / 1024, b / 1048576 }'
  total=$(awk -v t="$total" -v s="$secs" 'BEGIN { print t + s }')
  rm -f "$out"
done
printf '%-10s %10.1f   (goal: under %s s)\n' total "$total" "$goal"
awk -v t="$total" -v g="$goal" 'BEGIN { exit !(t <= g) }'
