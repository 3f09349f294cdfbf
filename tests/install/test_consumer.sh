#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds a C consumer against it twice (CMake package
# and pkg-config), and checks its candidates equal `kvtool query`'s; the shared library must export
# the C API and keep FAISS/HDF5/internal symbols hidden.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cli/lib.sh"
set -eo pipefail
T="$WORK"
build="$(dirname "$KVTOOL_BIN_DIR")"
prefix="$T/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
so="$(ls "$prefix"/lib*/libkvtool.so | head -1)"
[ -f "$prefix/include/kvtool/kvtool_c.h" ] || fail "headers not installed"
[ -f "$(dirname "$so")/cmake/kvtool/kvtoolConfig.cmake" ] || fail "CMake package not installed"
[ -f "$(dirname "$so")/pkgconfig/kvtool.pc" ] || fail "pkg-config file not installed"
exported="$(nm -D --defined-only "$so" | awk '{print $3}')"
grep -qx kvtool_pool_new <<<"$exported" || fail "kvtool_pool_new is not exported"
if grep -Ei 'faiss|^H5|ZSTD_|hdf5' <<<"$exported" | head -3 | grep -q .; then fail "internal dependency symbols are exported"; fi
if c++filt <<<"$exported" | grep -q 'kvtool::scoring::\|kvtool::PqBuilder\|kvtool::DumpReader::'; then fail "internal kvtool symbols are exported"; fi

# An artifact and a query.
"$KVTOOL" synth --layers 1 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 300 --seed 4 --query-count 4 -o "$T/d.h5" -q >/dev/null
"$KVTOOL_BIN_DIR/kvtool-pq" build "$T/d.h5" -o "$T/a.kvi" --subspaces 4 --bits 4 --prefix 256 -q >/dev/null
python3 - "$T" <<'PY'
import struct, sys, random
random.seed(3)
open(sys.argv[1] + "/q.f32", "wb").write(struct.pack("<16f", *[random.uniform(-1, 1) for _ in range(16)]))
PY
want="$("$KVTOOL" query "$T/a.kvi" --source "$T/d.h5" --layer 0 --q-head 0 --vector "$T/q.f32" --budget 0.1 --json |
        python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["candidates"])))')"

cmake -S "$here" -B "$T/cb" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$T/cb" >/dev/null
out="$(LD_LIBRARY_PATH="$(dirname "$so")" "$T/cb/consumer" "$T/a.kvi" "$T/q.f32" 16 255)"
echo "$out" > out.txt
contains out.txt "candidates $want\$"
contains out.txt "missing key: status 1 reason NOT_PUBLISHED"
contains out.txt "host bytes after retire 0"

PKG_CONFIG_PATH="$(dirname "$so")/pkgconfig" cc "$here/consumer.c" -o "$T/consumer-pc" \
  $(PKG_CONFIG_PATH="$(dirname "$so")/pkgconfig" pkg-config --cflags --libs kvtool)
out2="$(LD_LIBRARY_PATH="$(dirname "$so")" "$T/consumer-pc" "$T/a.kvi" "$T/q.f32" 16 255)"
[ "$out" = "$out2" ] || fail "the pkg-config build answers differently"
head -c 300 out.txt; echo
finish
