#!/usr/bin/env bash
# GPU checks, meant for the device machine (one short run): configure with CUDA ON, build the
# library, the CUDA code and the GPU tests, run them with a GPU required. Prints nvidia-smi first.
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
cmake -S . -B build-gpu -DKVTOOL_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j"$(nproc)" --target kvtool_gpu_test
KVTOOL_REQUIRE_GPU=1 ctest --test-dir build-gpu -L gpu --output-on-failure
