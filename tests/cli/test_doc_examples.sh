#!/usr/bin/env bash
# Every command example a reader can paste runs as written: the ```sh and ```python blocks of
# README.md (after the demo, whose files the first block uses) and of each docs/*.md page (one
# fresh folder per page), each from a folder with ../shared, build/, python/ and tests/ beside or
# inside it as in a checkout; then the demo's echoed commands; then each man page's EXAMPLES in a
# fresh folder holding the inputs its lines name. Blocks that cannot run here use another fence
# language (```bash for the Slurm scripts, which tests/cli/test_slurm.sh submits to a real Slurm;
# ```yaml for the Kubernetes manifest, whose environment tests/unit/test_cli_env.cpp simulates;
# ```c for the C fragment, whose API tests/install builds a consumer of; ```text). Also skipped:
# the quick start (it is CI itself) and Python blocks that import transformers, which needs a model
# this machine does not have (tests/python/test_hf_recipe.py runs that recipe on a stand-in).
. "$(dirname "$0")/lib.sh"
# /usr/bin before the rest: man examples call python3 with numpy (Debian's interpreter).
export PATH="$BIN:/usr/bin:$PATH"
# The README's llama.cpp tour runs node, which must be >= 20: where Debian's /usr/bin/node is older,
# .ci/install-deps links Node 20 as /usr/local/bin/node, which /usr/bin now shadows; name it first.
for n in /usr/local/bin/node "$(command -v node)"; do
  if [ -x "$n" ] && [ "$("$n" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ]; then
    mkdir -p "$WORK/node-bin" && ln -sf "$n" "$WORK/node-bin/node" && export PATH="$WORK/node-bin:$PATH"
    break
  fi
done
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

# checkout DIR: a folder laid out like the repository root for the paths examples use (the build
# tree's build/, python/ for python/examples, tests/ for tests/llamacpp), with ../shared beside it.
PYMOD="$(dirname "$BIN")/python"
[ -d "$PYMOD/kvtool" ] || export NO_PYTHON_MODULE=1
checkout() {
  mkdir -p "$1"
  ln -s "$(dirname "$BIN")" "$1/build"
  ln -s "$SRC/python" "$1/python"
  ln -s "$SRC/tests" "$1/tests"
}

# run_page FILE DIR NAME: the shell blocks of FILE in order, then its Python blocks with the build
# tree's package, all in DIR; prints how many blocks ran.
run_page() {
  local b n=0 sh py
  sh=$(blocks "$1" "$3")
  for b in $sh; do run_block "$b" "$2"; n=$((n + 1)); done
  if [ -z "${NO_PYTHON_MODULE:-}" ]; then
    py=$(blocks "$1" "$3-py" python)
    for b in $py; do run_block "$b" "$2"; n=$((n + 1)); done
  fi
  PAGE_BLOCKS=$n
}

# README: the demo first (the "next commands" use its files), then every block in order.
checkout root
(cd root && kvtool demo --model ../shared/models/stories260K.bin > demo.out 2>&1) || fail "kvtool demo: $(tail -5 root/demo.out)"
run_page "$SRC/README.md" root readme
[ "$PAGE_BLOCKS" -ge 5 ] || fail "expected at least 5 runnable README blocks, ran $PAGE_BLOCKS"
[ -n "${NO_PYTHON_MODULE:-}" ] || [ -f readme-py-0.py ] || fail "expected the README's Python example block"

# docs/*.md: each page in its own folder, so that no page depends on another's files.
for page in "$SRC"/docs/*.md; do
  name=docs-$(basename "$page" .md)
  checkout "$name"
  run_page "$page" "$name" "$name"
done
ls docs-guide-pipelines-0.sh docs-import-0.sh >/dev/null || fail "docs examples not found"

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
