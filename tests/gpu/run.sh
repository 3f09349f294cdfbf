#!/usr/bin/env bash
# GPU checks for the device machine, which has only the CUDA toolkit, CMake and a compiler (no zstd,
# OpenSSL, nlohmann_json, HDF5 or FAISS, no network). Writes one line per check to
# ${OUT:-.}/gpu-results.txt and exits 1 if any check failed or could not run. Takes a few minutes
# (two small CMake builds and a few seconds of checks) on 16 cores.
#
# 1. Kernel checks (test_gpu.cpp): the CUDA kernels against the host arithmetic, then a small bench.
#    Built here from tests/gpu/CMakeLists.txt (needs nothing but the toolkit).
# 2. Pool check (test_gpu_pool.cpp): every kind's committed artifact (tests/gpu/data, made by
#    data/make_data.sh) published into a Pool with the CUDA device tier (cuda/src/backend.cu),
#    queried with many vectors and settings, compared with the host tier and an independent
#    brute-force scorer, then an injected-error self-test. It needs the format and runtime layers,
#    hence zstd, OpenSSL and nlohmann_json. Two ways, tried in this order; the results say which ran:
#    a. built here by tests/gpu/CMakeLists.txt when those packages are installed;
#    b. a static binary built on a machine that has them and carried here:
#         cmake --build build --target kvtool_gpu_pool_test_static     (a CUDA build of the project
#         configured with -DKVTOOL_TESTS=ON: a plain configure builds the product only)
#       then run this script with carry ["build/bin/kvtool_gpu_pool_test_static"] (about 10 MB;
#       glibc is the only shared library it needs besides the driver). KVTOOL_GPU_POOL_BIN names
#       another path; otherwise the first build*/bin/kvtool_gpu_pool_test_static found is used.
#    With neither, the pool check is reported as NOT RUN and the script fails.
# KVTOOL_GPU_BUILD_DIR (default build-gpu) is where tests/gpu is built; KVTOOL_GPU_POOL=OFF skips way a
# (to exercise b on a machine that has the packages).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out="${OUT:-.}/gpu-results.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PATH="/usr/local/cuda/bin:$PATH"
status=0
bdir="${KVTOOL_GPU_BUILD_DIR:-build-gpu}"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
} >"$out"

rm -f "$bdir"/kvtool_gpu_pool_test  # never a stale one: rebuilt below when way a is possible
cmake -S tests/gpu -B "$bdir" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DKVTOOL_GPU_POOL="${KVTOOL_GPU_POOL:-ON}" >"$work/configure.log" 2>&1 &&
  cmake --build "$bdir" -j"$(nproc)" >"$work/build.log" 2>&1
build_rc=$?
[ $build_rc = 0 ] || { echo "build of tests/gpu failed:"; tail -30 "$work/configure.log" "$work/build.log"; }

echo "== kernel checks (test_gpu.cpp)" >>"$out"
if [ -x "$bdir"/kvtool_gpu_test ]; then
  KVTOOL_REQUIRE_GPU=1 "$bdir"/kvtool_gpu_test "$work/kernels.txt" >"$work/kernels.log" 2>&1
  rc=$?
  if [ -s "$work/kernels.txt" ]; then cat "$work/kernels.txt"; else cat "$work/kernels.log"; fi >>"$out"
  echo "kernel checks: exit $rc" >>"$out"
  [ $rc = 0 ] || status=1
else
  echo "FAIL kernel checks NOT RUN: tests/gpu did not build" >>"$out"
  status=1
fi

echo "== pool check through the CUDA backend (test_gpu_pool.cpp)" >>"$out"
pool_bin="" how=""
if [ -x "$bdir"/kvtool_gpu_pool_test ]; then
  pool_bin="$bdir"/kvtool_gpu_pool_test how="built here from source (tests/gpu/CMakeLists.txt)"
elif [ -n "${KVTOOL_GPU_POOL_BIN:-}" ] && [ -x "$KVTOOL_GPU_POOL_BIN" ]; then
  pool_bin=$KVTOOL_GPU_POOL_BIN how="carried static binary $KVTOOL_GPU_POOL_BIN"
else
  for b in "$root"/build*/bin/kvtool_gpu_pool_test_static; do
    [ -x "$b" ] && { pool_bin=$b how="carried static binary ${b#"$root"/}"; break; }
  done
fi
if [ -n "$pool_bin" ]; then
  echo "pool check binary: $how" >>"$out"
  KVTOOL_REQUIRE_GPU=1 "$pool_bin" tests/gpu/data "$work/pool.txt" >"$work/pool.log" 2>&1
  rc=$?
  if [ -s "$work/pool.txt" ]; then cat "$work/pool.txt"; else cat "$work/pool.log"; fi >>"$out"
  echo "pool check: exit $rc" >>"$out"
  [ $rc = 0 ] || status=1
else
  echo "FAIL pool check NOT RUN: zstd/OpenSSL/nlohmann_json are missing here and no kvtool_gpu_pool_test_static was carried" >>"$out"
  status=1
fi
cat "$out"
echo "results in $out"
exit $status
