#!/usr/bin/env bash
# Builds the Debian package of the ctest build (cmake/Packaging.cmake) into a scratch folder,
# checks its metadata and contents with dpkg-deb, extracts it into a scratch root (dpkg -x) and
# uses the extracted files only: `kvtool --version`, every man page through `man -l`, an artifact
# built and queried by the extracted tools, and the C consumer of tests/install built against the
# extracted CMake package and pkg-config file.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cli/lib.sh"
set -eo pipefail
T="$WORK"
build="$(dirname "$KVTOOL_BIN_DIR")"
for tool in cpack dpkg-deb dpkg-shlibdeps file man; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is needed to build and check the package" >&2; exit 1; }
done
version="$("$KVTOOL" --version | awk '{print $2}')"
arch="$(dpkg --print-architecture)"
[ -n "$version" ] || fail "no version from kvtool --version"

# The package, built in scratch (-B) so that the build folder is left as it was. With a Makefile
# build, cpack first runs the `preinstall` target, which builds `all`; the test packages what the
# build already has (ctest runs after it), so it names a generator without that target.
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$T/pkg" -D CPACK_CMAKE_GENERATOR=Ninja >"$T/cpack.log" 2>&1 || {
  tail -20 "$T/cpack.log" >&2
  fail "cpack -G DEB failed"
  finish
}
debs="$(cd "$T/pkg" && ls ./*.deb)"
[ "$debs" = "./kvtool_${version}_${arch}.deb" ] || fail "cpack made '$debs', not kvtool_${version}_${arch}.deb"
# Go on with the one package there is, whatever its name, so that every other check still reports.
[ "$(wc -l <<<"$debs")" = 1 ] || finish
deb="$T/pkg/${debs#./}"

# Metadata.
field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = kvtool ] || fail "Package is '$(field Package)'"
[ "$(field Version)" = "$version" ] || fail "Version '$(field Version)' differs from kvtool --version ($version)"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture is '$(field Architecture)'"
[[ "$(field Maintainer)" =~ ^[^\<]+\ \<[^@\>]+@[^\>]+\>$ ]] || fail "Maintainer '$(field Maintainer)' is not 'Name <email>'"
[ -n "$(field Section)" ] || fail "no Section"
[ -z "$(field Homepage)" ] || fail "a Homepage is declared: $(field Homepage)"
desc="$(field Description)"
[ "$(wc -l <<<"$desc")" -ge 3 ] || fail "the Description has no extended text: $desc"
depends="$(field Depends)"
echo "Depends: $depends"
# Every shared library the packaged binaries load must come from a package named in Depends: the
# owner of each NEEDED soname as resolved on this machine (dpkg -S), or for the BLAS/LAPACK
# alternatives any package that provides it.
dep_names=" $(sed 's/([^)]*)//g; s/[,|]/ /g' <<<"$depends" | tr -s ' ') "
needed="$(readelf -d "$KVTOOL" "$build"/lib/libkvtool.so | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)"
[ -n "$needed" ] || fail "readelf found no NEEDED libraries"
for so in $needed; do
  path="$(ldconfig -p | awk -v so="$so" '$1 == so && /x86-64/ && !p {p = $NF} END {print p}')"
  [ -n "$path" ] || { fail "$so is not in the linker cache"; continue; }
  owner="$(dpkg -S "$(realpath "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null || true)"
  owner="${owner%%:*}"
  [ -n "$owner" ] || { fail "no package owns $so ($path)"; continue; }
  case "$so" in
    libblas.so.3 | liblapack.so.3) grep -Eq " lib(open)?(blas|lapack)[^ ]* " <<<"$dep_names" || fail "Depends names no BLAS/LAPACK for $so" ;;
    *) grep -q " $owner " <<<"$dep_names" || fail "Depends lacks $owner (for $so)" ;;
  esac
done
# (Outputs are captured before grep: grep -q would close a pipe early, and pipefail would fail it.)
control="$(dpkg-deb --ctrl-tarfile "$deb" | tar -t)"
grep -qx './shlibs' <<<"$control" || fail "no shlibs control file: $control"
grep -q "^libkvtool 0 kvtool (>= $version)" <<<"$(dpkg-deb --info "$deb" shlibs)" || fail "shlibs does not declare libkvtool 0"
grep -q '^[[:space:]]*ldconfig' <<<"$(dpkg-deb --info "$deb" postinst)" || fail "postinst does not run ldconfig"

# Contents: exactly the files `cmake --install` installs, under /usr; each kind named explicitly.
dpkg-deb --contents "$deb" | awk '{print $6}' | grep -v '/$' | sed 's|^\./||' | sort >deb.txt
cmake --install "$build" --prefix "$T/inst" >/dev/null
(cd "$T/inst" && find . ! -type d | sed 's|^\./|usr/|' | sort) >install.txt
diff install.txt deb.txt >/dev/null || fail "package contents differ from cmake --install: $(diff install.txt deb.txt | head -5)"
libdir="$(sed -n 's|^\(usr/lib[^ ]*\)/libkvtool\.so$|\1|p' deb.txt)"
[ -n "$libdir" ] || fail "no usr/lib*/libkvtool.so in the package"
want=(usr/include/kvtool/kvtool_c.h usr/share/doc/kvtool/copyright "$libdir/libkvtool.so.0" "$libdir/libkvtool.so.$version"
      "$libdir/cmake/kvtool/kvtoolConfig.cmake" "$libdir/cmake/kvtool/kvtoolConfigVersion.cmake"
      "$libdir/cmake/kvtool/kvtoolTargets.cmake" "$libdir/pkgconfig/kvtool.pc")
for prog in kvtool kvtool-pq kvtool-clusterkv kvtool-lsh kvtool-squeeze; do
  want+=("usr/bin/$prog" "usr/share/bash-completion/completions/$prog")
done
for page in "$KVTOOL_SOURCE"/man/*.[0-9]; do
  name="$(basename "$page")"
  want+=("usr/share/man/man${name##*.}/$name")
done
for f in "${want[@]}"; do grep -qx "$f" deb.txt || fail "the package lacks /$f"; done

# Installed into a scratch root; from here on only the extracted files are used. Every man page must
# render without a groff warning (man --warnings).
R="$T/root"
dpkg -x "$deb" "$R"
K="$R/usr/bin/kvtool"
[ "$("$K" --version)" = "kvtool $version" ] || fail "extracted kvtool --version says '$("$K" --version)'"
grep -q ', stripped' <<<"$(file -L "$K")" || fail "the packaged kvtool is not stripped"
for page in "$R"/usr/share/man/man*/*; do
  MANWIDTH=80 man --warnings -P cat -l "$page" >man.txt 2>man.err || fail "man -l $(basename "$page") failed"
  grep -q '^NAME' man.txt || fail "man -l $(basename "$page") has no NAME section"
  [ ! -s man.err ] || fail "man -l $(basename "$page") complains: $(head -2 man.err)"
done
contains <(MANWIDTH=80 man -P cat -l "$R/usr/share/man/man1/kvtool.1") "kvtool"

"$K" synth --layers 1 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 300 --seed 4 --query-count 4 -o "$T/d.h5" -q >/dev/null
"$R/usr/bin/kvtool-pq" build "$T/d.h5" -o "$T/a.kvi" --subspaces 4 --bits 4 --prefix 256 -q >/dev/null
/usr/bin/python3 -c 'import struct; open("q.f32","wb").write(struct.pack("<16f", *[((i*7)%11-5)/5 for i in range(16)]))'
cand="$("$K" query "$T/a.kvi" --source "$T/d.h5" --layer 0 --q-head 0 --vector q.f32 --budget 0.1 --json |
        /usr/bin/python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["candidates"])))')"
[ -n "$cand" ] || fail "the extracted kvtool query returned no candidates"

# The Python package from the extracted files: under /usr/lib/python3*/dist-packages, stripped like
# the rest, and answering as kvtool query does. Recommends names the interpreter and NumPy.
if compgen -G "$build/python/kvtool/_kvtool*.so" >/dev/null; then
  pyso="$(grep -E '^usr/lib/python3[^/]*/dist-packages/kvtool/_kvtool[^/]*\.so$' deb.txt | head -1)"
  [ -n "$pyso" ] || fail "the package lacks the Python extension under usr/lib/python3*/dist-packages/kvtool"
  grep -q ', stripped' <<<"$(file -L "$R/$pyso")" || fail "the packaged Python extension is not stripped"
  grep -q 'python3-numpy' <<<"$(field Recommends)" || fail "Recommends lacks python3-numpy: $(field Recommends)"
  pycand="$(cd "$T" && PYTHONPATH="$R/$(dirname "$(dirname "$pyso")")" /usr/bin/python3 -c '
import kvtool, numpy as np, sys
assert kvtool.__file__.startswith(sys.argv[1]), kvtool.__file__
r = kvtool.query("a.kvi", "d.h5", layer=0, q_head=0, vector=np.fromfile(sys.argv[2], dtype="<f4"), budget=0.1)
print(" ".join(map(str, r["candidates"])))' "$R" "$PWD/q.f32")" || fail "the packaged Python package does not import or query"
  [ "$pycand" = "$cand" ] || fail "the packaged Python package answers '$pycand', kvtool query '$cand'"
fi

# The C consumer against the extracted CMake package; it must link the extracted library.
cmake -S "$here" -B "$T/cb" -Dkvtool_DIR="$R/$libdir/cmake/kvtool" -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF >cb.log 2>&1 &&
  cmake --build "$T/cb" >>cb.log 2>&1 || { tail -8 cb.log >&2; fail "the consumer does not build against the package"; finish; }
grep -q "$R/$libdir/libkvtool.so" "$T/cb/CMakeFiles/consumer.dir/link.txt" ||
  fail "the consumer does not link $R/$libdir/libkvtool.so: $(cat "$T/cb/CMakeFiles/consumer.dir/link.txt")"
loaded="$(LD_LIBRARY_PATH="$R/$libdir" ldd "$T/cb/consumer")"
grep -q "libkvtool.so.0 => $R/$libdir/" <<<"$loaded" || fail "the consumer loads another libkvtool: $loaded"
LD_LIBRARY_PATH="$R/$libdir" "$T/cb/consumer" "$T/a.kvi" q.f32 16 255 >out.txt
contains out.txt "^version $version generation"
contains out.txt "candidates $cand\$"
contains out.txt "missing key: status 1 reason NOT_PUBLISHED"

# ... and against the extracted pkg-config file, which must point into the scratch root.
export PKG_CONFIG_PATH="$R/$libdir/pkgconfig"
[ "$(realpath -m "$(pkg-config --variable=libdir kvtool)")" = "$(realpath "$R/$libdir")" ] ||
  fail "pkg-config libdir is $(pkg-config --variable=libdir kvtool)"
[ "$(pkg-config --modversion kvtool)" = "$version" ] || fail "pkg-config version is $(pkg-config --modversion kvtool)"
cc "$here/consumer.c" -o "$T/consumer-pc" $(pkg-config --cflags --libs kvtool) || fail "the pkg-config consumer does not build"
LD_LIBRARY_PATH="$R/$libdir" "$T/consumer-pc" "$T/a.kvi" q.f32 16 255 >out2.txt
cmp -s out.txt out2.txt || fail "the pkg-config consumer answers differently"
echo "package $(basename "$deb"): $(stat -c %s "$deb") bytes, $(wc -l <deb.txt) files"
finish
