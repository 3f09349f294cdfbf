#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a scratch copy of its committed seed corpus
# (fuzz/README.md). Usage: fuzz/run.sh TARGET SECONDS [extra libFuzzer flags...]
# Env: KVTOOL_FUZZ_BUILD (default build-fuzz), KVTOOL_FUZZ_JOBS (parallel workers, default 1),
# KVTOOL_FUZZ_WORK (where the growing corpus and any crash go; default a temporary directory).
# Exits non-zero when the target crashes; the reproducer is left in the work directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target=${1:?usage: fuzz/run.sh TARGET SECONDS [libFuzzer flags...]}
seconds=${2:?usage: fuzz/run.sh TARGET SECONDS [libFuzzer flags...]}
shift 2
build=${KVTOOL_FUZZ_BUILD:-$root/build-fuzz}
bin="$build/bin/$target"
[ -x "$bin" ] || { echo "run.sh: $bin is not built (cmake --build $build --target kvtool_fuzz)" >&2; exit 2; }
seeds="$root/fuzz/corpus/${target#fuzz_}"
work=${KVTOOL_FUZZ_WORK:-$(mktemp -d -t "kvtool-$target.XXXXXX")}
mkdir -p "$work/corpus" "$work/artifacts"
[ -d "$seeds" ] && cp -n "$seeds"/* "$work/corpus/" 2>/dev/null || true
dict_flag=()  # JSON tokens for the targets whose input is mostly JSON text
case "$target" in fuzz_manifest | fuzz_kind | fuzz_store_ref) dict_flag=(-dict="$root/fuzz/json.dict") ;; esac
# libhdf5 leaks small blocks on some of its own error paths (fuzz/crashes/README.md); leak checks
# there would report the library, not kvtool.
# fuzz_dump_struct's dumps reach the same libhdf5 error paths through kvtool's checks.
case "$target" in fuzz_dump | fuzz_dump_struct) dict_flag+=(-detect_leaks=0) ;; esac
# libhdf5 sizes some allocations from damaged metadata (7e18 bytes, fuzz/crashes/README.md); the
# release build gets NULL and kvtool a clean error, so the ASan build must too.
asan_default=detect_leaks=1:abort_on_error=1
[ "$target" = fuzz_dump ] && asan_default=$asan_default:allocator_may_return_null=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-$asan_default}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=1
echo "run.sh: $target for ${seconds}s, corpus $work/corpus, crashes in $work/artifacts" >&2
jobs=${KVTOOL_FUZZ_JOBS:-1}
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-fork="$jobs" -ignore_crashes=0)
exec "$bin" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "${dict_flag[@]}" "${parallel[@]}" "$@"
