#!/usr/bin/env bash
# Every command example in README.md and the man pages runs as written (issue 13): the README's
# shell blocks (except the ones named below) from a folder with ../shared next to it, after the
# demo; each man page's EXAMPLES in a fresh folder holding the inputs its lines name. Not run here:
# the quick start (it is CI itself), the Slurm recipe (tests/cli/test_slurm.sh runs those scripts),
# the Kubernetes manifest (needs a cluster; tests/unit/test_cli_env.cpp) and the C fragment
# (tests/install builds a consumer of the same API).
. "$(dirname "$0")/lib.sh"
# /usr/bin before the rest: man examples call python3 with numpy (Debian's interpreter).
export PATH="$BIN:/usr/bin:$PATH"
SRC=${KVTOOL_SOURCE:?}
ln -s "$SHARED" shared
mkdir root

# blocks FILE PREFIX: writes each example block of FILE to PREFIX-N.sh (markdown ```sh blocks, or
# man .SH EXAMPLES .nf ... .fi with roff escapes undone); prints the names.
blocks() {
  /usr/bin/python3 - "$@" <<'PY'
import os, re, sys
text, prefix = open(sys.argv[1]).read(), sys.argv[2]
if sys.argv[1].endswith(".md"):
    lang = sys.argv[3] if len(sys.argv) > 3 else "sh"
    found = re.findall(r"```" + lang + r"\n(.*?)```", text, re.S)
    skip = ("bash .ci/install-deps", "#!/bin/bash", "jid=$(sbatch")
    found = [b for b in found if not b.startswith(skip)]
    if lang == "python":  # the transformers recipe needs a model this machine does not have
        found = [b for b in found if "transformers" not in b]
    if os.environ.get("NO_PYTHON_MODULE"):  # a build without the Python package
        found = [b for b in found if "PYTHONPATH=" not in b and lang != "python"]
else:
    found = re.findall(r"^\.SH EXAMPLES\n\.nf\n(.*?)^\.fi$", text, re.S | re.M)
    found = [b.replace("\\-", "-") for b in found]
for i, b in enumerate(found):
    if len(sys.argv) > 3 and sys.argv[3] == "python":
        name = "%s-%d.py" % (prefix, i)
        open(name, "w").write(b)
    else:
        name = "%s-%d.sh" % (prefix, i)
        open(name, "w").write("set -euo pipefail\n" + b)
    print(name)
PY
}

# run_block FILE DIR: runs FILE in DIR; a failing line fails the test with the block's log.
run_block() {
  local start=$SECONDS
  local run=(bash -x)
  [[ "$1" == *.py ]] && run=(env PYTHONPATH="$PYMOD" /usr/bin/python3)
  if (cd "$2" && "${run[@]}" "$WORK/$1") > "$WORK/$1.log" 2>&1; then
    echo "ok   $1 ($((SECONDS - start)) s)"
  else
    fail "example block $1 failed in $2:"
    tail -15 "$WORK/$1.log" | sed 's/^/    /' >&2
  fi
}

# README: the demo first (the "next commands" use its files), then every block in order; then the
# Python blocks with the build tree's package (the repository's build/ and python/ are linked in
# for the paths the Python section uses).
PYMOD="$(dirname "$BIN")/python"
[ -d "$PYMOD/kvtool" ] || export NO_PYTHON_MODULE=1
ln -s "$(dirname "$BIN")" root/build
ln -s "$SRC/python" root/python
ln -s "$SRC/tests" root/tests  # the llama.cpp section runs tests/llamacpp/ (real llama.cpp)
(cd root && kvtool demo > demo.out 2>&1) || fail "kvtool demo: $(tail -5 root/demo.out)"
readme=$(blocks "$SRC/README.md" readme)
[ "$(echo "$readme" | wc -l)" -ge 3 ] || fail "expected at least 3 runnable README blocks, found: $readme"
for b in $readme; do run_block "$b" root; done
if [ -z "${NO_PYTHON_MODULE:-}" ]; then
  pyblocks=$(blocks "$SRC/README.md" readme-py python)
  [ -n "$pyblocks" ] || fail "expected the README's Python example block"
  for b in $pyblocks; do run_block "$b" root; done
fi

# The demo's echoed commands, pasted back (each line after "== ").
grep '^== ' root/demo.out | sed 's/^== //' > demo-echo.sh
[ "$(wc -l < demo-echo.sh)" -ge 10 ] || fail "the demo echoed only $(wc -l < demo-echo.sh) commands"
sed -i '1i set -euo pipefail' demo-echo.sh
run_block demo-echo.sh root

# Man pages: the inputs their examples name, made from the shared stories260K model.
M=$SHARED/models
kvtool dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --tokens 512 --queries -o stories.h5 -q
kvtool synth --layers 2 --kv-heads 4 --q-heads 8 --head-dim 32 --tokens 1024 --seed 1 -o big.h5 -q
for page in "$SRC"/man/*.1 "$SRC"/man/*.5; do  # section 3 is C (tests/install builds a consumer)
  name=$(basename "$page")
  for b in $(blocks "$page" "man-$name"); do
    d="dir-$b"
    mkdir "$d"
    ln -s "$M/stories260K.bin" "$d/stories260K.bin"; ln -s "$M/tok512.bin" "$d/tok512.bin"
    ln -s "$M/stories260K.bin" "$d/m.bin"; ln -s "$M/tok512.bin" "$d/t.bin"
    cp stories.h5 big.h5 "$d/"
    grep -q "keygen" "$b" || "$KVTOOL" keygen -o "$d/team.pem" > /dev/null
    SYSTEM_PROMPT="Once upon a time there was a little dog." run_block "$b" "$d"
  done
done
ls man-kvtool.1-0.sh man-kvtool-pq.1-0.sh man-kvtool-squeeze.1-0.sh >/dev/null || fail "man examples not found"
finish
