#!/usr/bin/env bash
# A Llama-3-8B-shaped index build (docs/reports/performance.md, "Scale"): synthesizes the 32 layers x 8 kv heads x
# TOKENS x d 128 fp16 dump (32,768 tokens: 4.3 GB of K/V; 32 query heads, 64 queries at the last
# positions) once, then builds all four kinds with their defaults, one after the other, and prints
# each build's wall time, its peak RSS, its index size and the total. The targets: all four in
# under 60 s at 32K tokens (240 s at 128K: 60 s x TOKENS / 32768, x LAYERS / 32) on a 2-core
# machine, every build's peak RSS at most 1 GiB; the script prints each missed target and exits 1.
#
#   tests/bench/scale_llama8b.sh [BIN_DIR [TOKENS [LAYERS]]]   (ctest -L bench runs it with the build's bin/)
#
# Environment: KVTOOL_BENCH_DIR (default /tmp/kvtool-bench; needs the dump's size free: 32 layers
# take 4.3 GB at 32K tokens, 17.2 GB at 128K), KVTOOL_THREADS, KVTOOL_SCALE_GOAL_S (the total's
# target in seconds), KVTOOL_SCALE_RSS_MIB (default 1024).
set -euo pipefail
bin=${1:-${KVTOOL_BIN_DIR:-build/bin}}
tokens=${2:-32768}
layers=${3:-32}
dir=${KVTOOL_BENCH_DIR:-/tmp/kvtool-bench}
goal=${KVTOOL_SCALE_GOAL_S:-$(awk -v t="$tokens" -v l="$layers" 'BEGIN { print 60 * t / 32768 * l / 32 }')}
rss_goal=${KVTOOL_SCALE_RSS_MIB:-1024}
mkdir -p "$dir"
dump=$dir/synth-${layers}x8x${tokens}x128-f16-q64.h5
if [ ! -f "$dump" ]; then
  need=$((layers * 8 * tokens * 128 * 2 * 2 + (1 << 28)))
  free=$(($(df --output=avail -B1 "$dir" | tail -1)))
  if [ "$free" -lt "$need" ]; then
    echo "$dir has $((free >> 20)) MiB free, the dump needs $((need >> 20)) MiB: give fewer layers" >&2
    exit 2
  fi
  start=$SECONDS
  "$bin/kvtool" synth --layers "$layers" --kv-heads 8 --q-heads 32 --head-dim 128 --tokens "$tokens" --seed 1 \
    --query-count 64 -o "$dump.tmp" -q
  mv "$dump.tmp" "$dump"
  echo "synthesized $dump ($(du -h "$dump" | cut -f1)) in $((SECONDS - start)) s"
fi
cat "$dump" > /dev/null  # into the page cache, so the first kind is not charged for the disk
total=0
missed=0
printf '%-10s %10s %12s %12s\n' kind seconds "peak MiB" "index MiB"
for kind in pq clusterkv lsh squeeze; do
  out=$dir/scale8b.$kind.kvi
  /usr/bin/time -f '%e %M' -o "$dir/time.txt" "$bin/kvtool-$kind" build "$dump" -o "$out" -q --force
  read -r secs kib < "$dir/time.txt"
  awk -v k="$kind" -v s="$secs" -v m="$kib" -v b="$(stat -c %s "$out")" \
    'BEGIN { printf "%-10s %10.1f %12.0f %12.1f\n", k, s, m / 1024, b / 1048576 }'
  if awk -v m="$kib" -v g="$rss_goal" 'BEGIN { exit !(m / 1024 > g) }'; then
    echo "missed: $kind's peak RSS is over $rss_goal MiB"
    missed=1
  fi
  total=$(awk -v t="$total" -v s="$secs" 'BEGIN { print t + s }')
  rm -f "$out"
done
printf '%-10s %10.1f   (target: under %s s)\n' total "$total" "$goal"
if ! awk -v t="$total" -v g="$goal" 'BEGIN { exit !(t < g) }'; then
  echo "missed: the total is $(awk -v t="$total" -v g="$goal" 'BEGIN { printf "%.1f s (%.2fx)", t - g, t / g }') over the target"
  missed=1
fi
exit "$missed"
