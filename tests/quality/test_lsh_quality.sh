#!/usr/bin/env bash
# Quality gate for lsh (the MagicPIG table of docs/reports/quality-runs.md): -K 8 -L 100, c = 2, sink 4,
# local 64, on the three shared models (as test_pq_quality.sh). Per model (tests/quality/
# baselines.py prints every number), the MagicPIG estimator is recomputed in numpy from the dump
# and `kvtool export` of the artifact (query hashed with the stored projections, collisions counted
# from the CSR tables, inclusion probabilities of formats/kinds-v1.md §5.5):
# - its mean relative output error agrees with eval's within 1 % and is below a bound (1.25 x the
#   measured 0.032 / 0.319 / 0.336, rounded up to 0.01) and below the sink + window baseline's
#   (same rows per query) by 0.02 absolute;
# - the sampled fraction agrees with eval's and lies within 20 % of the mean inclusion probability
#   of the indexed rows (what the tables should sample; measured within 0.8 %);
# - ratio retained / oracle >= 0.95 / 0.85 / 0.65 (measured 0.978 / 0.876 / 0.695, 0.02 off,
#   rounded down to 0.05), above the window and best prefix heavy-hitter baselines by 0.02;
# - raw section bytes equal formats/kinds-v1.md §5.3 (no bound against key bytes: MagicPIG's
#   tables are larger than the keys, 243-803 bytes per indexed row here).
. "$(dirname "$0")/quality_lib.sh"
gate() {  # model prefix min max-rel-err
  "$BIN/kvtool-lsh" build "$1.h5" --prefix "$2" -K 8 -L 100 -o "$1.lsh.kvi" -q --force || { fail "build $1"; return; }
  baselines --kind lsh --model "$1" --dump "$1.h5" --artifact "$1.lsh.kvi" --settings c=2 \
    --min-ratio "$3" --always 68 --lsh-max-rel-err "$4" --param bits=8 --param tables=100 --param sink=4 --param local=64
}
gate st 384 0.95 0.05
gate bb 192 0.85 0.40
gate ch 384 0.65 0.42
finish
