#!/usr/bin/env bash
# GPU checks for the device machine (CUDA toolkit, CMake and a compiler only): builds the standalone
# tests/gpu project, runs the device-vs-host equality tests and the copy/scoring benchmark, and writes
# the results to ${OUT:-.}/gpu-results.txt. Sized to finish in well under 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-.}/gpu-results.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S tests/gpu -B build-gpu -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >/dev/null
cmake --build build-gpu -j"$(nproc)"
{ date -u +"date: %Y-%m-%dT%H:%M:%SZ"; } > "$out"
KVTOOL_REQUIRE_GPU=1 build-gpu/kvtool_gpu_test "$out.tmp"
cat "$out.tmp" >> "$out" && rm -f "$out.tmp"
echo "results in $out"
