# Shared prologue of the tests against real llama.cpp (tests/llamacpp/test_*.sh): the CLI test
# helpers, where node-llama-cpp 3.21.1 is (.ci/install-deps installs it, with the llama.cpp source
# bundle it ships), and `unavailable`: without it a test is skipped (77), unless
# KVTOOL_REQUIRE_LLAMACPP=1 (CI) makes that a failure.
source "${KVTOOL_SOURCE:?}/tests/cli/lib.sh"
HERE=$KVTOOL_SOURCE/tests/llamacpp
PY=/usr/bin/python3
M=$SHARED/models
unavailable() {
  if [ "${KVTOOL_REQUIRE_LLAMACPP:-0}" = 1 ]; then echo "FAIL: $* (KVTOOL_REQUIRE_LLAMACPP=1)" >&2; exit 1; fi
  echo "skipped: $*"
  exit 77
}
NLC=${KVTOOL_NODE_LLAMA_CPP:-${KVTOOL_NODE_CACHE:-$HOME/.cache/kvtool/node-llama-cpp-3.21.1}}
export KVTOOL_NODE_LLAMA_CPP=$NLC
BUNDLE=$NLC/node_modules/node-llama-cpp/llama/gitRelease.bundle
# require_node: node >= 20 and node-llama-cpp 3.21.1 (the llama.cpp v0.4.0 the tests follow).
require_node() {
  command -v node >/dev/null || unavailable "no node (Node.js >= 20)"
  [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || unavailable "node $(node --version) is older than 20"
  local v
  v=$(node -p "require('$NLC/node_modules/node-llama-cpp/package.json').version" 2>/dev/null) ||
    unavailable "node-llama-cpp is not installed in $NLC (.ci/install-deps installs it)"
  [ "$v" = 3.21.1 ] || unavailable "node-llama-cpp $v in $NLC; these tests follow 3.21.1 (llama.cpp v0.4.0)"
}
# require_bundle: the llama.cpp source bundle, cloned bare to ./llama.git.
require_bundle() {
  [ -f "$BUNDLE" ] || unavailable "no llama.cpp source bundle at $BUNDLE (.ci/install-deps installs node-llama-cpp)"
  git clone -q --bare "$BUNDLE" llama.git || { fail "clone the llama.cpp bundle"; finish; }
}
