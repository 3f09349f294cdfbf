# Shared by the quality gates (sourced): the three shared-model dumps (from the ctest fixture's
# directory KVTOOL_QUALITY_DUMPS when set, else dumped here) and the numpy gate.
QUALITY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # before lib.sh changes directory
. "$QUALITY/../cli/lib.sh"
if [ -n "${KVTOOL_QUALITY_DUMPS:-}" ] && [ -f "$KVTOOL_QUALITY_DUMPS/ch.h5" ]; then
  for m in st bb ch; do ln -s "$KVTOOL_QUALITY_DUMPS/$m.h5" "$m.h5"; done
else
  bash "$QUALITY/make_dumps.sh" . || fail "dumps"
fi
baselines() { /usr/bin/python3 "$QUALITY/baselines.py" --kvtool "$KVTOOL" "$@" || fail "quality gate: $*"; }
