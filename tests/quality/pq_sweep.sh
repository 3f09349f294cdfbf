#!/usr/bin/env bash
# Not a gate: prints eval's retained/oracle ratio and selected fraction of pq builds, for comparing
# build options at equal code bytes (docs/reports/quality-runs.md's PQ loss and (m, b) tables were made with it).
#   pq_sweep.sh DIR DUMP PREFIX BUDGETS "BUILD ARGS" ["BUILD ARGS" ...]
# e.g. pq_sweep.sh /tmp/q ch.h5 384 0.05,0.1,0.2 "-m 2 -b 6" "-m 2 -b 6 --loss anisotropic"
# Output: one line per (build args, budget): dump, args, budget, selected fraction, ratio, index bytes.
set -eu
BIN=${BIN:?BIN must be the build/bin directory}
dir=$1 dump=$2 prefix=$3 budgets=$4
shift 4
mkdir -p "$dir"
for args in "$@"; do
  out="$dir/$(basename "$dump" .h5).$(echo "$args" | tr -c 'A-Za-z0-9.\n' '_').kvi"
  # shellcheck disable=SC2086
  "$BIN/kvtool-pq" build "$dump" --prefix "$prefix" -o "$out" -q --force $args
  # shellcheck disable=SC2046
  "$BIN/kvtool" eval "$out" --source "$dump" --json $(echo "$budgets" | tr ',' '\n' | sed 's/^/--budget /') |
    /usr/bin/python3 -c '
import json, sys
for b in json.load(sys.stdin)["budgets"]:
    print(sys.argv[1], sys.argv[2], b.get("budget"), "%.3f" % b["selected_fraction_mean"], "%.4f" % b["quality_ratio"], b["index_bytes"], sep="\t")
' "$(basename "$dump")" "$args"
done
