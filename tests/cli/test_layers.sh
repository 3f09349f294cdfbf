#!/usr/bin/env bash
# The house rules of lib/ (docs/architecture.md), checked on the source text:
#   * every #include "kvtool/X" in a layer names a header of that layer or of one below it (CMake's
#     include folders enforce the same at compile time; this names the offending line);
#   * no lib/ folder holds more than 25 % of the library's source lines;
#   * no file in lib/ is over 700 lines.
. "$(dirname "$0")/lib.sh"
SRC=${KVTOOL_SOURCE:?KVTOOL_SOURCE must point at the source tree}
/usr/bin/python3 - "$SRC/lib" <<'PY' || fail "lib/ breaks a house rule (above)"
import os, re, sys
lib = sys.argv[1]
# What each layer may include (its own headers and those of the layers below it).
below = {"format": {"format"}, "runtime": {"format", "runtime"}, "model": {"format", "model"},
         "snapshot": {"format", "snapshot"}}
below["offline"] = below["runtime"] | below["model"] | below["snapshot"] | {"offline", "kinds"}
below["eval"] = below["offline"] | {"eval"}
owner = {}  # "kvtool/x.h" -> the layer whose include/ holds it
for layer in below:
    inc = os.path.join(lib, layer, "include")
    for root, _, files in os.walk(inc):
        for f in files:
            owner[os.path.relpath(os.path.join(root, f), inc)] = layer
for root, _, files in os.walk(os.path.join(lib, "kinds", "include")):
    for f in files:
        owner[os.path.relpath(os.path.join(root, f), os.path.join(lib, "kinds", "include"))] = "kinds"
bad, lines, per_folder = [], {}, {}
for root, _, files in os.walk(lib):
    for f in files:
        if not f.endswith((".cpp", ".h", ".def")):
            continue
        path = os.path.join(root, f)
        rel = os.path.relpath(path, lib)
        top = rel.split(os.sep)[0]
        # A kind's runtime half (KIND_select.cpp and what only it includes) is runtime; the rest offline.
        layer = top if top != "kinds" else ("runtime" if f.endswith("_select.cpp") else "offline")
        text = open(path, encoding="utf-8").read()
        n = text.count("\n")
        lines[rel] = n
        per_folder[top] = per_folder.get(top, 0) + n
        if n > 700:
            bad.append(f"lib/{rel}: {n} lines (at most 700)")
        for i, line in enumerate(text.split("\n"), 1):
            m = re.match(r'\s*#\s*include\s+"(kvtool/[^"]+)"', line)
            if m and m.group(1) in owner and owner[m.group(1)] not in below.get(layer, set()):
                bad.append(f"lib/{rel}:{i}: {layer} includes {m.group(1)} of {owner[m.group(1)]}")
total = sum(per_folder.values())
for top, n in sorted(per_folder.items()):
    if n > total / 4:
        bad.append(f"lib/{top} holds {n} of {total} source lines ({100 * n / total:.1f} %, at most 25 %)")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
exit $FAILS
