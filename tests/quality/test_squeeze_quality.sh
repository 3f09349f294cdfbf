#!/usr/bin/env bash
# Quality gate (issue: kvtool-squeeze): --percent-clusters 10, default coarse rule, queries after the
# prefix. At the 0.8 quantile the ratio to the oracle must reach 0.85 (stories260K, 512 tokens,
# --prefix 384, --observation-window 64) and 0.75 (babyllama361, 256 tokens, --prefix 192,
# --observation-window 32); hierarchical lookup must score fewer centroids than flat, with retained
# mass within 0.03 of flat.
. "$(dirname "$0")/../cli/lib.sh"
M=$SHARED/models
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --tokens 512 --queries -o st.h5 -q
"$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 256 --queries -o bb.h5 -q
check() {  # dump prefix window minimum
  "$BIN/kvtool-squeeze" build "$1" --prefix "$2" --observation-window "$3" --percent-clusters 10 -o "$1.sq.kvi" -q || { fail "build $1"; return; }
  "$KVTOOL" eval "$1.sq.kvi" --source "$1" --quantile 0.8 --json > "$1.eval.json" || { fail "eval $1"; return; }
  /usr/bin/python3 - "$1.eval.json" "$4" "$1" <<'PY' || FAILS=$((FAILS + 1))
import json, sys
hier, flat = json.load(open(sys.argv[1]))["budgets"]
assert hier["selector"]["mode"] == "hierarchical" and flat["selector"]["mode"] == "flat"
ratio = hier["retained_mass_mean"] / hier["oracle_retained_mass_mean"]
print(f"{sys.argv[3]}: q=0.8 ratio {ratio:.4f} (min {sys.argv[2]}); retained hier {hier['retained_mass_mean']:.4f} "
      f"flat {flat['retained_mass_mean']:.4f}; centroids scored hier {hier['centroids_scored_mean']:.1f} flat {flat['centroids_scored_mean']:.1f}")
ok = ratio >= float(sys.argv[2]) and hier["centroids_scored_mean"] < flat["centroids_scored_mean"] \
     and flat["retained_mass_mean"] - hier["retained_mass_mean"] <= 0.03
sys.exit(0 if ok else 1)
PY
}
check st.h5 384 64 0.85
check bb.h5 192 32 0.75
finish
