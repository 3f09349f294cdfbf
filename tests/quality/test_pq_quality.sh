#!/usr/bin/env bash
# Quality gate (issue: kvtool-pq): default pq parameters, --budget 0.1, real f32 dumps.
# Mean retained mass / oracle mean retained mass must reach 0.90 (stories260K, 512 tokens,
# --prefix 384) and 0.75 (babyllama361, 256 tokens, --prefix 192).
. "$(dirname "$0")/../cli/lib.sh"
M=$SHARED/models
"$KVTOOL" dump --llama2c "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --tokens 512 --queries -o st.h5 -q
"$KVTOOL" dump --llama2c "$M/babyllama361.bin" --tokens 256 --queries -o bb.h5 -q
check_ratio() {  # dump prefix minimum
  "$BIN/kvtool-pq" build "$1" --prefix "$2" -o "$1.pq.kvi" -q || { fail "build $1"; return; }
  "$KVTOOL" eval "$1.pq.kvi" --source "$1" --budget 0.1 --json > "$1.eval.json" || { fail "eval $1"; return; }
  /usr/bin/python3 - "$1.eval.json" "$3" "$1" <<'PY' || FAILS=$((FAILS + 1))
import json, sys
b = json.load(open(sys.argv[1]))["budgets"][0]
ratio = b["retained_mass_mean"] / b["oracle_retained_mass_mean"]
print(f"{sys.argv[3]}: retained {b['retained_mass_mean']:.4f} oracle {b['oracle_retained_mass_mean']:.4f} "
      f"ratio {ratio:.4f} (min {sys.argv[2]}) selected fraction {b['selected_fraction_mean']:.4f} "
      f"recall {b['recall_support_mean']:.4f} output error {b['output_error_mean']:.4f}")
sys.exit(0 if ratio >= float(sys.argv[2]) else 1)
PY
}
check_ratio st.h5 384 0.90
check_ratio bb.h5 192 0.75
finish
