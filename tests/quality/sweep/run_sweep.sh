#!/usr/bin/env bash
# Reproduces the index-settings sweep of docs/quality.md, "Defaults" (measurement only; about 40
# minutes on 2 cores). Usage, from the repository root:
#   KVTOOL_BIN=build/bin KVTOOL_SHARED=../shared SWEEP_DIR=/tmp/kvtool-sweep \
#     bash tests/quality/sweep/run_sweep.sh [all|dumps|real|synth|extra|seeds]
# JSON goes to $SWEEP_DIR/raw; analyze.py and summary.py turn it into tables. It names settings
# explicitly, so it measures the same builds whatever the defaults are.
set -u
S=${SWEEP_DIR:-/tmp/kvtool-sweep}; B=$(cd "${KVTOOL_BIN:-build/bin}" && pwd); K=$B/kvtool
M=$(cd "${KVTOOL_SHARED:-../shared}" && pwd)/models; HERE=$(cd "$(dirname "$0")" && pwd)
W=$S/work; R=$S/raw
N="nice -n 10"
mkdir -p $W $R
cd $W

dumps() {
  $N $K dump --llama2c $M/stories260K.bin --tokenizer $M/tok512.bin --tokens 512 --queries -o stories.h5 -q --force
  $N $K dump --llama2c $M/babyllama361.bin --tokens 256 --queries -o baby.h5 -q --force
  $N $K dump --llama2c $M/cheaders.bin --tokenizer $M/tok128c.bin --prompt "$(cat $M/cheaders.prompt.txt)" --tokens 512 --queries -o cheaders.h5 -q --force
  # synthetic: 2 layers, 2 kv heads, 4 q heads, d=64, f16 (the synth default), queries of the last 256 positions:
  # prefix T-128 leaves squeeze's 100-row observation window and 128 evaluated positions inside them
  for T in 2048 8192 32768; do
    $N $K synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 64 --tokens $T --seed 7 --query-count 256 -o synth$T.h5 -q --force
  done
}

model_of() { case $1 in stories) echo $M/stories260K.bin;; baby) echo $M/babyllama361.bin;; cheaders) echo $M/cheaders.bin;; esac; }
hd_of() { case $1 in stories) echo 8;; baby) echo 16;; cheaders) echo 64;; synth*) echo 64;; esac; }

build_all() {  # $1 dump name (no .h5), $2 prefix, $3 dir
  local ds=$1 P=$2 D=$3 d; d=$(hd_of $ds); mkdir -p $D
  local src=$W/$ds.h5
  for m in 2 4 8; do
    [ $((d % m)) -eq 0 ] || continue
    for b in 4 5 6 7 8; do for dt in f32 f16; do
      $N $B/kvtool-pq build $src --prefix $P -m $m -b $b --codebook-dtype $dt -o $D/pq_m${m}_b${b}_${dt}.kvi -q --force
    done; done
  done
  for t in 80 40 20 10 8 5 4; do for dt in f32 f16; do
    $N $B/kvtool-clusterkv build $src --prefix $P --tokens-per-cluster $t --centroid-dtype $dt -o $D/ckv_t${t}_${dt}.kvi -q --force
    case $ds in synth*) ;; *)
      $N $B/kvtool-clusterkv build $src --prefix $P --tokens-per-cluster $t --centroid-dtype $dt --dense-layers 0-1 -o $D/ckv_t${t}_${dt}_d01.kvi -q --force;;
    esac
  done; done
  for kl in 10,150 8,100 10,75 12,50 6,150 8,50 14,150; do
    $N $B/kvtool-lsh build $src --prefix $P -K ${kl%,*} -L ${kl#*,} -o $D/lsh_K${kl%,*}_L${kl#*,}.kvi -q --force
  done
  for pc in 2 5 10 20; do for cp in 25 50; do
    $N $B/kvtool-squeeze build $src --prefix $P --percent-clusters $pc --coarse-percent $cp -o $D/sq_pc${pc}_cp${cp}.kvi -q --force
  done; done
}

compare_all() {  # $1 ds, $2 prefix, $3 dir, $4 outprefix
  local ds=$1 D=$3 o=$4
  $N $K compare --source $W/$ds.h5 $D/pq_*.kvi  --budget 0.05 --budget 0.1 --budget 0.2 --json -q > $o.cmp_pq.json
  $N $K compare --source $W/$ds.h5 $D/ckv_*.kvi --budget 0.05 --budget 0.1 --budget 0.2 --json -q > $o.cmp_ckv.json
  $N $K compare --source $W/$ds.h5 $D/lsh_*.kvi --min-collisions 1 --min-collisions 2 --min-collisions 4 --json -q > $o.cmp_lsh.json
  $N $K compare --source $W/$ds.h5 $D/sq_*.kvi --json -q > $o.cmp_sq.json
}

decode_all() {  # $1 ds, $2 prefix, $3 dir, $4 outprefix, $5 steps
  local ds=$1 D=$3 o=$4 S=$5 mdl; mdl=$(model_of $ds)
  local ED="$N $K eval-decode --llama2c $mdl --source $W/$ds.h5 --steps $S --json -q"
  local BU="--budget 0.05 --budget 0.1 --budget 0.2"
  $ED $D/pq_*.kvi $BU > $o.ed_pq.json
  $ED $D/ckv_*.kvi $BU > $o.ed_ckv.json
  # baselines (window / exact top-k at the same row count) for the default pq, clusterkv and clusterkv with dense layers 0-1
  $ED $D/pq_m2_b6_f32.kvi $D/ckv_t80_f32.kvi $D/ckv_t80_f32_d01.kvi $BU --baseline window --baseline topk > $o.ed_base.json
  # clusterkv without dense layers at higher budgets: the row counts that dense layers 0-1 select
  $ED $D/ckv_t80_f32.kvi $D/ckv_t20_f16.kvi $D/ckv_t10_f16.kvi $D/ckv_t5_f16.kvi $D/ckv_t4_f16.kvi \
      --budget 0.3 --budget 0.4 --budget 0.5 --budget 0.6 --baseline window --baseline topk > $o.ed_ckv_hi.json
  $ED $D/lsh_*.kvi --min-collisions 1 --min-collisions 2 --min-collisions 4 --baseline window --baseline topk > $o.ed_lsh.json
  $ED $D/sq_*.kvi --baseline window --baseline topk > $o.ed_sq.json
}

one_real() {  # ds prefix steps
  local ds=$1 P=$2 S=$3 D=$W/$1.p$2 o=$R/$1.p$2
  local t0=$SECONDS
  build_all $ds $P $D
  compare_all $ds $P $D $o
  decode_all $ds $P $D $o $S
  echo "$ds p$P done in $((SECONDS-t0)) s" >&2
}

one_synth() {  # T
  local T=$1 ds=synth$1 P=$(( $1 - 128 )); local D=$W/$ds.p$P o=$R/$ds.p$P
  local t0=$SECONDS
  build_all $ds $P $D
  compare_all $ds $P $D $o
  echo "$ds p$P done in $((SECONDS-t0)) s" >&2
}
export -f build_all compare_all decode_all one_real one_synth model_of hd_of
export B K M W R N

real() {
  printf '%s\n' "cheaders 384 64" "stories 384 64" "baby 192 48" "cheaders 128 64" "stories 128 64" "baby 128 48" \
                "cheaders 256 64" "stories 256 64" "cheaders 448 63" "stories 448 63" \
    | xargs -P 2 -L 1 bash -c 'one_real $0 $1 $2'
}
synth() { printf '%s\n' 2048 8192 32768 | xargs -P 2 -L 1 bash -c 'one_synth $0'; }

# ---- extension (added after the first pass): finer PQ subspaces and fixed cluster counts ----
build_extra() {  # $1 ds, $2 prefix, $3 dir
  local ds=$1 P=$2 D=$3 d; d=$(hd_of $ds); mkdir -p $D
  for m in 16 32; do
    [ $m -le $d ] && [ $((d % m)) -eq 0 ] || continue
    for b in 4 5 6 7 8; do
      $N $B/kvtool-pq build $W/$ds.h5 --prefix $P -m $m -b $b --codebook-dtype f16 -o $D/pqx_m${m}_b${b}_f16.kvi -q --force
    done
  done
  for C in 8 16 32 64 128 256; do
    $N $B/kvtool-clusterkv build $W/$ds.h5 --prefix $P --clusters $C --centroid-dtype f16 -o $D/ckvc_C${C}_f16.kvi -q --force
  done
}
one_extra() {  # ds prefix steps(0 = synthetic: no decode)
  local ds=$1 P=$2 S=$3 D=$W/$1.p$2 o=$R/$1.p$2 mdl
  build_extra $ds $P $D
  ls $D/pqx_*.kvi >/dev/null 2>&1 && $N $K compare --source $W/$ds.h5 $D/pqx_*.kvi --budget 0.05 --budget 0.1 --budget 0.2 --json -q > $o.cmp_pqx.json
  $N $K compare --source $W/$ds.h5 $D/ckvc_*.kvi --budget 0.05 --budget 0.1 --budget 0.2 --json -q > $o.cmp_ckvc.json
  if [ "$S" != 0 ]; then
    mdl=$(model_of $ds)
    ls $D/pqx_*.kvi >/dev/null 2>&1 && $N $K eval-decode $D/pqx_*.kvi --llama2c $mdl --source $W/$ds.h5 --steps $S --budget 0.05 --budget 0.1 --budget 0.2 --json -q > $o.ed_pqx.json
    $N $K eval-decode $D/ckvc_*.kvi --llama2c $mdl --source $W/$ds.h5 --steps $S --budget 0.05 --budget 0.1 --budget 0.2 --json -q > $o.ed_ckvc.json
  fi
  echo "extra $ds p$P done" >&2
}
export -f build_extra one_extra
extra() {
  printf '%s\n' "cheaders 384 64" "stories 384 64" "baby 192 48" "cheaders 128 64" "stories 128 64" "baby 128 48" \
                "cheaders 256 64" "stories 256 64" "cheaders 448 63" "stories 448 63" \
                "synth2048 1920 0" "synth8192 8064 0" "synth32768 32640 0" \
    | xargs -P 2 -L 1 bash -c 'one_extra $0 $1 $2'
}

# ---- seed-noise check (KL of one setting over build seeds 1-4; babyllama361, prefix 192) ----
seeds() {
  mkdir -p $W/seeds
  for s in 1 2 3 4; do
    $N $B/kvtool-pq build $W/baby.h5 --prefix 192 -m 2 -b 6 --codebook-dtype f32 --seed $s -o $W/seeds/baby_def_s$s.kvi -q --force
    $N $B/kvtool-pq build $W/baby.h5 --prefix 192 -m 16 -b 5 --codebook-dtype f16 --seed $s -o $W/seeds/baby_m16b5_s$s.kvi -q --force
    $N $B/kvtool-pq build $W/baby.h5 --prefix 192 -m 2 -b 7 --codebook-dtype f16 --seed $s -o $W/seeds/baby_m2b7_s$s.kvi -q --force
  done
  $N $K eval-decode $W/seeds/baby_*.kvi --llama2c $M/babyllama361.bin --source $W/baby.h5 --steps 48 \
     --budget 0.05 --budget 0.1 --budget 0.2 --json -q > $R/baby.p192.seeds_pq.json
}

case "${1:-all}" in
  dumps) dumps;; real) real;; synth) synth;; extra) extra;; seeds) seeds;;
  all) dumps; real; synth; extra; seeds; SWEEP_DIR=$S /usr/bin/python3 $HERE/analyze.py > $S/tables.md; SWEEP_DIR=$S /usr/bin/python3 $HERE/summary.py > $S/summary.md;;
esac
