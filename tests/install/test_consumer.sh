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
# Only the C API's header: no C++ header, kind internals (lib/kinds) above all, is installed.
installed_headers="$(cd "$prefix/include" && find . -type f | sort)"
[ "$installed_headers" = "./kvtool/kvtool_c.h" ] || fail "headers other than kvtool/kvtool_c.h installed: $installed_headers"
for prog in kvtool kvtool-pq kvtool-clusterkv kvtool-lsh kvtool-squeeze; do
  [ -s "$prefix/share/bash-completion/completions/$prog" ] || fail "bash completion for $prog not installed"
done
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

# The Python package, when built: installed under the prefix (KVTOOL_PYTHON_INSTALL_DIR), imported
# from there (not from the build tree), and answering the same query.
if compgen -G "$build/python/kvtool/_kvtool*.so" >/dev/null; then
  pyrel="$(sed -n 's/^KVTOOL_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")"
  [ -n "$pyrel" ] && [[ "$pyrel" != /* ]] || fail "KVTOOL_PYTHON_INSTALL_DIR is '$pyrel', not a folder under the prefix"
  compgen -G "$prefix/$pyrel/kvtool/_kvtool*.so" >/dev/null && [ -f "$prefix/$pyrel/kvtool/__init__.py" ] ||
    fail "the Python package is not installed in $prefix/$pyrel"
  pywant="$(cd "$T" && PYTHONPATH="$prefix/$pyrel" /usr/bin/python3 - "$prefix/$pyrel" "$T" <<'PY'
import os, sys, numpy as np, kvtool
assert os.path.dirname(kvtool.__file__) == os.path.join(sys.argv[1], "kvtool"), kvtool.__file__
q = np.fromfile(os.path.join(sys.argv[2], "q.f32"), dtype="<f4")
r = kvtool.query(os.path.join(sys.argv[2], "a.kvi"), os.path.join(sys.argv[2], "d.h5"), layer=0, q_head=0, vector=q,
                 budget=0.1)
print(" ".join(map(str, r["candidates"])))
PY
)" || fail "the installed Python package does not import or query"
  [ "$pywant" = "$want" ] || fail "the installed Python package answers '$pywant', kvtool query '$want'"
fi

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

# Every installed header compiles on its own, as C and as C++, and nothing but what the shared
# library exports is installed (the C API).
headers="$(cd "$prefix/include" && find . -name '*.h' | sed 's|^\./||' | sort)"
[ "$headers" = "kvtool/kvtool_c.h" ] || fail "installed headers are not exactly the C API: $headers"
for h in $headers; do
  printf '#include <%s>\nint main(void) { return 0; }\n' "$h" > "$T/inc.c"
  cc -std=c99 -Wall -Wextra -Wpedantic -Werror -I"$prefix/include" "$T/inc.c" -o "$T/inc-c" -L"$(dirname "$so")" -lkvtool ||
    fail "$h does not compile as C"
  cp "$T/inc.c" "$T/inc.cpp"
  c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror -I"$prefix/include" "$T/inc.cpp" -o "$T/inc-cpp" -L"$(dirname "$so")" -lkvtool ||
    fail "$h does not compile as C++"
done

# pkg-config is relocatable and right for a multiarch libdir: configure (only) with the prefix
# /usr, where GNUInstallDirs picks lib/<multiarch>, and resolve the file where it would be installed.
cmake -S "$KVTOOL_SOURCE" -B "$T/usr-cfg" -DCMAKE_INSTALL_PREFIX=/usr -DKVTOOL_TESTS=OFF -DKVTOOL_CUDA=OFF >/dev/null
libdir="$(sed -n 's/^libdir=\${prefix}\///p' "$T/usr-cfg/lib/kvtool.pc")"
[ -n "$libdir" ] || fail "no libdir in the /usr kvtool.pc"
mkdir -p "$T/root/usr/$libdir/pkgconfig"
cp "$T/usr-cfg/lib/kvtool.pc" "$T/root/usr/$libdir/pkgconfig/"
got="$(cd "$T/root/usr/$libdir/pkgconfig/$(sed 's|[^/]*|..|g' <<<"$libdir")/.." && pwd)"
[ "$got" = "$T/root/usr" ] || fail "the /usr kvtool.pc climbs to $got"
want_l="$(realpath "$T/root/usr/$libdir")"
got_l="$(realpath "$(PKG_CONFIG_PATH="$T/root/usr/$libdir/pkgconfig" pkg-config --variable=libdir kvtool)")"
[ "$got_l" = "$want_l" ] || fail "pkg-config libdir for prefix /usr is $got_l, not $want_l"
got_i="$(realpath -m "$(PKG_CONFIG_PATH="$T/root/usr/$libdir/pkgconfig" pkg-config --variable=includedir kvtool)")"
[ "$got_i" = "$T/root/usr/include" ] || fail "pkg-config includedir for prefix /usr is $got_i"
echo "prefix /usr: libdir $libdir"
head -c 300 out.txt; echo
finish
