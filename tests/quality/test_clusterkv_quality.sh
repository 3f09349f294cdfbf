#!/usr/bin/env bash
# Quality gate (issue: kvtool-clusterkv): --tokens-per-cluster 8, --budget 0.1, default centroid rule
# (raw-mean), real f32 dumps. Ratio to the oracle must reach 0.80 (stories260K, 512 tokens,
# --prefix 384) and 0.60 (babyllama361, 256 tokens, --prefix 192).
. "$(dirname "$0")/../cli/lib.sh"
M=$SHARED/models
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --tokens 512 --queries -o st.h5 -q
"$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 256 --queries -o bb.h5 -q
check_ratio() {  # dump prefix minimum
  "$BIN/kvtool-clusterkv" build "$1" --prefix "$2" --tokens-per-cluster 8 -o "$1.ckv.kvi" -q || { fail "build $1"; return; }
  "$KVTOOL" eval "$1.ckv.kvi" --source "$1" --budget 0.1 --json > "$1.eval.json" || { fail "eval $1"; return; }
  /usr/bin/python3 - "$1.eval.json" "$3" "$1" <<'PY' || FAILS=$((FAILS + 1))
import json, sys
b = json.load(open(sys.argv[1]))["budgets"][0]
ratio = b["retained_mass_mean"] / b["oracle_retained_mass_mean"]
print(f"{sys.argv[3]}: retained {b['retained_mass_mean']:.4f} oracle {b['oracle_retained_mass_mean']:.4f} ratio {ratio:.4f} (min {sys.argv[2]})")
sys.exit(0 if ratio >= float(sys.argv[2]) else 1)
PY
}
check_ratio st.h5 384 0.80
check_ratio bb.h5 192 0.60
finish
