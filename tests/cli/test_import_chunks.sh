#!/usr/bin/env bash
# kvtool import --format (formats/lmcache.md, formats/sglang-hicache.md): LMCache v1 raw chunks
# (KV_2LTD, KV_T2D, KV_2TD), LMCache FS-connector chunks (28-byte header), LMCache v0 safetensors
# chunks (vllm, huggingface) and SGLang HiCache page files (layer_first, page_first,
# page_first_direct), written byte for byte by tests/cli/make_chunk_fixtures.py as those sources
# write them: several chunks with a partial last one (LMCache), pages in a scattered host pool
# (SGLang). Each import passes verify and equals the original K/V exactly (bf16, f16, f32). Hostile
# files and contradicting options: each its reason code and exit code, and no output file.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
PY=/usr/bin/python3
$PY -c "import numpy, h5py, torch" 2>/dev/null || skip "/usr/bin/python3 lacks numpy, h5py or torch"
$PY "$HERE/make_chunk_fixtures.py" || { fail "make_chunk_fixtures.py failed"; finish; }

GEO=(--layers 3 --kv-heads 2 --head-dim 8)
# check CASE DUMP: verify passes; /kv/k and /kv/v equal truth_CASE.npz bit for bit (the dump keeps
# the source dtype, so the comparison is exact); the --meta identity is there.
check() {
  local case=$1 dump=$2
  expect_exit 0 "$KVTOOL" verify "$dump"
  $PY - "$case" "$dump" <<'PY' || fail "$dump does not hold the K/V of $case"
import sys
import h5py, numpy as np
case, dump = sys.argv[1:]
src = np.load("truth_%s.npz" % case)
f = h5py.File(dump, "r")
def as_f32(ds):
    x = ds[:]
    if ds.attrs.get("dtype") == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)
for name in ("k", "v"):
    got = as_f32(f["kv/" + name])
    if got.shape != src[name].shape or not np.array_equal(got, src[name]):
        sys.exit("%s: /kv/%s differs (shape %s vs %s)" % (dump, name, got.shape, src[name].shape))
if f.attrs["tenant_namespace"] != "team-c":
    sys.exit("%s: the --meta identity was not written" % dump)
PY
}
imp() { expect_exit 0 "$KVTOOL" import "$@" --meta meta.json --json; }

# LMCache v1 local disk backend: headerless chunks of 16, 16 and 5 tokens.
imp raw2ltd_bf16/* --format lmcache-raw --memory-format KV_2LTD "${GEO[@]}" --src-dtype bf16 --chunk-tokens 16 -o a.h5
[ "$(json_get "$WORK/out" '["tokens"]')" = 37 ] || fail "KV_2LTD: T is not 16 + 16 + 5: $(cat "$WORK/out")"
check raw2ltd_bf16 a.h5
imp raw2ltd_f32/* --format lmcache-raw --memory-format KV_2LTD "${GEO[@]}" --src-dtype f32 --chunk-tokens 16 -o a32.h5
check raw2ltd_f32 a32.h5
# KV_T2D / KV_2TD: one file per (chunk, layer), chunk-major.
imp rawt2d_f16/* --format lmcache-raw --memory-format KV_T2D "${GEO[@]}" --src-dtype f16 --chunk-tokens 16 -o t2d.h5
check rawt2d_f16 t2d.h5
imp raw2td_f32/* --format lmcache-raw --memory-format KV_2TD "${GEO[@]}" --src-dtype f32 --chunk-tokens 16 -o 2td.h5
check raw2td_f32 2td.h5
# 111 files (chunks of 1 token x 3 layers) under a limit of 40 open files: a file is open only
# while it is read.
(ulimit -n 40 && "$KVTOOL" import rawt2d_many_f16/* --format lmcache-raw --memory-format KV_T2D "${GEO[@]}" \
  --src-dtype f16 --chunk-tokens 1 --meta meta.json -o many.h5 -q) || fail "111 chunk files under ulimit -n 40"
check rawt2d_many_f16 many.h5
# A chunk named twice (or under a second name) would import its rows at two token ranges.
set -- raw2ltd_bf16/*
ln -s "$(pwd)/$1" again.bin
for twice in "$1" again.bin; do
  expect_reason 2 USAGE "$KVTOOL" import "$@" "$twice" --format lmcache-raw --memory-format KV_2LTD "${GEO[@]}" \
    --src-dtype bf16 --chunk-tokens 16 --meta meta.json -o twice.h5
  contains "$WORK/err" "given twice"
  [ ! -e twice.h5 ] || fail "a chunk named twice left twice.h5"
done
# The same bytes read with the wrong memory format are not the same K/V (the test can fail).
"$KVTOOL" import raw2td_f32/* --format lmcache-raw --memory-format KV_T2D "${GEO[@]}" --src-dtype f32 \
  --chunk-tokens 16 --meta meta.json -o wrong.h5 -q || fail "KV_T2D over KV_2TD bytes should import"
$PY -c "
import h5py, numpy as np, sys
sys.exit(np.array_equal(h5py.File('wrong.h5')['kv/k'][:], np.load('truth_raw2td_f32.npz')['k']))" ||
  fail "KV_2TD bytes read as KV_T2D gave the right K: the layouts are not told apart"

# FS connector: the header gives layers, tokens, hidden and dtype; --kv-heads splits hidden.
imp fs_f16/* --format lmcache-fs --kv-heads 2 --chunk-tokens 16 -o fs.h5
check fs_f16 fs.h5
imp fs_bf16/* --format lmcache-fs --head-dim 8 --layers 3 --src-dtype bf16 --memory-format KV_2LTD \
  --chunk-tokens 16 -o fsb.h5
check fs_bf16 fsb.h5

# LMCache v0 safetensors kv_chunk, both engine formats.
imp v0_vllm_f32/* --format lmcache-v0 --chunk-tokens 16 -o v0.h5
check v0_vllm_f32 v0.h5
imp v0_hf_bf16/* --format lmcache-v0 --memory-format huggingface --chunk-tokens 16 "${GEO[@]}" -o v0hf.h5
check v0_hf_bf16 v0hf.h5

# SGLang HiCacheFile pages of 4 tokens, one per host pool layout.
for c in layer_first:f16 page_first:bf16 page_first_direct:f32; do
  lay=${c%:*} dt=${c#*:}
  imp sgl_${lay}_$dt/* --format sglang-page --memory-format "$lay" --page-size 4 "${GEO[@]}" --src-dtype "$dt" \
    -o "sgl_$lay.h5"
  check "sgl_${lay}_$dt" "sgl_$lay.h5"
done
# --dtype converts on the way (f16 pages into an f32 dump; every f16 value is exact in f32).
imp sgl_layer_first_f16/* --format sglang-page --memory-format layer_first --page-size 4 "${GEO[@]}" \
  --src-dtype f16 --dtype f32 -o sgl32.h5
check sgl_layer_first_f16 sgl32.h5

# Refusals: CODE REASON ARGS... -- exit code, reason, and no output file.
refuse() {
  local code=$1 reason=$2; shift 2
  expect_reason "$code" "$reason" "$KVTOOL" import "$@" --meta meta.json -o bad.h5
  absent bad.h5
  rm -f bad.h5  # one failure, not a cascade of OUTPUT_EXISTS
}
RAW=(--format lmcache-raw --memory-format KV_2LTD "${GEO[@]}" --src-dtype bf16 --chunk-tokens 16)
R=raw2ltd_bf16
refuse 1 BAD_LAYOUT "${RAW[@]}" $R/c000.pt bad/raw_odd.pt $R/c002.pt          # not whole tokens
refuse 1 SHAPE_MISMATCH "${RAW[@]}" $R/c000.pt bad/raw_short.pt $R/c002.pt    # a short middle chunk
refuse 1 SHAPE_MISMATCH "${RAW[@]}" $R/c000.pt $R/c002.pt $R/c001.pt          # out of order
refuse 1 SHAPE_MISMATCH "${RAW[@]:0:12}" --chunk-tokens 8 $R/c000.pt         # chunk > --chunk-tokens
refuse 2 USAGE --format lmcache-raw --memory-format KV_2LTD --src-dtype bf16 $R/c000.pt   # no geometry
refuse 2 USAGE --format lmcache-raw "${GEO[@]}" --src-dtype bf16 $R/c000.pt   # no memory format
refuse 1 UNSUPPORTED_CACHE --format lmcache-raw --memory-format KV_MLA_FMT "${GEO[@]}" --src-dtype bf16 $R/c000.pt
refuse 2 USAGE "${RAW[@]}" --page-size 4 $R/c000.pt                           # a SGLang option
refuse 2 USAGE --format lmcache-raw --memory-format KV_2LTD "${GEO[@]}" --src-dtype f8 $R/c000.pt
refuse 2 USAGE --format vllm-raw $R/c000.pt
refuse 2 USAGE --memory-format KV_2LTD $R/c000.pt                              # no --format
refuse 2 USAGE --format lmcache-raw                                             # no files
refuse 2 USAGE "${RAW[@]}" --layout T,H,d $R/c000.pt                          # tensor-file options
refuse 2 USAGE "${RAW[@]}" --kv kv_cache $R/c000.pt
refuse 3 IO_ERROR "${RAW[@]}" $R/c000.pt missing.pt
T2D=(--format lmcache-raw --memory-format KV_T2D "${GEO[@]}" --src-dtype f16 --chunk-tokens 16)
refuse 1 SHAPE_MISMATCH "${T2D[@]}" rawt2d_f16/c000_l00.pt rawt2d_f16/c000_l01.pt   # not chunks x L files
refuse 1 SHAPE_MISMATCH "${T2D[@]}" rawt2d_f16/c000_l00.pt rawt2d_f16/c000_l01.pt rawt2d_f16/c002_l02.pt

FS=(--format lmcache-fs --kv-heads 2 --chunk-tokens 16)
refuse 1 TRUNCATED "${FS[@]}" bad/fs_short_header.data
refuse 1 TRUNCATED "${FS[@]}" bad/fs_truncated.data
refuse 1 TRUNCATED "${FS[@]}" bad/fs_claims_more.data                # the header claims more than the file
refuse 1 BAD_LAYOUT "${FS[@]}" bad/fs_trailing.data
refuse 1 BAD_TENSOR_FILE "${FS[@]}" bad/fs_length_lie.data
refuse 1 BAD_TENSOR_FILE "${FS[@]}" bad/fs_huge.data                 # 2^31 x 2^31 x 2^31: nothing allocated
refuse 1 BAD_TENSOR_FILE "${FS[@]}" bad/fs_fmt9.data
refuse 1 BAD_TENSOR_FILE "${FS[@]}" bad/fs_dtype0.data
refuse 1 BAD_TENSOR_FILE "${FS[@]}" bad/fs_shape0.data
refuse 1 UNSUPPORTED_CACHE "${FS[@]}" bad/fs_mla.data
refuse 1 UNSUPPORTED_CACHE "${FS[@]}" bad/fs_fp8.data
refuse 1 SHAPE_MISMATCH "${FS[@]}" --layers 4 fs_f16/c000.data          # options contradict the header
refuse 1 SHAPE_MISMATCH "${FS[@]}" --src-dtype bf16 fs_f16/c000.data
refuse 1 SHAPE_MISMATCH "${FS[@]}" --memory-format KV_T2D fs_f16/c000.data
refuse 1 SHAPE_MISMATCH --format lmcache-fs --kv-heads 3 fs_f16/c000.data
refuse 1 SHAPE_MISMATCH "${FS[@]}" fs_f16/c000.data fs_bf16/c001.data   # chunks disagree (dtype)
refuse 1 SHAPE_MISMATCH "${FS[@]}" fs_f16/c002.data fs_f16/c000.data    # the partial chunk is not last
refuse 2 USAGE --format lmcache-fs fs_f16/c000.data                     # hidden cannot be split

V0=(--format lmcache-v0 --chunk-tokens 16)
refuse 1 BAD_TENSOR_FILE "${V0[@]}" bad/v0_name.pt
refuse 1 BAD_TENSOR_FILE "${V0[@]}" bad/v0_two.pt
refuse 1 BAD_TENSOR_FILE "${V0[@]}" bad/v0.npy
refuse 1 SHAPE_MISMATCH "${V0[@]}" bad/v0_rank.pt
refuse 1 UNSUPPORTED_DTYPE "${V0[@]}" bad/v0_int.pt
refuse 1 SHAPE_MISMATCH "${V0[@]}" v0_vllm_f32/c000.pt bad/v0_heads.pt
refuse 1 SHAPE_MISMATCH "${V0[@]}" --kv-heads 4 v0_vllm_f32/c000.pt
refuse 2 USAGE "${V0[@]}" --memory-format KV_2LTD v0_vllm_f32/c000.pt

SG=(--format sglang-page --memory-format layer_first --page-size 4 "${GEO[@]}" --src-dtype f16)
P=sgl_layer_first_f16
refuse 1 TRUNCATED "${SG[@]}" $P/p000.bin bad/sgl_short.bin
refuse 1 BAD_LAYOUT "${SG[@]}" $P/p000.bin bad/sgl_long.bin
refuse 1 TRUNCATED "${SG[@]}" bad/sgl_empty.bin
refuse 1 NON_FINITE "${SG[@]}" bad/sgl_nan.bin
refuse 1 TRUNCATED "${SG[@]:0:4}" --page-size 8 "${SG[@]:6}" $P/p000.bin   # a page of 8 is more than the file
refuse 2 USAGE --format sglang-page --memory-format layer_first "${GEO[@]}" --src-dtype f16 $P/p000.bin
refuse 2 USAGE --format sglang-page --memory-format page_last --page-size 4 "${GEO[@]}" --src-dtype f16 $P/p000.bin
refuse 2 USAGE "${SG[@]}" --chunk-tokens 16 $P/p000.bin
# f16 dump of values beyond float16: refused, not saturated.
refuse 1 NON_FINITE --format lmcache-raw --memory-format KV_2LTD "${GEO[@]}" --src-dtype f32 --chunk-tokens 16 \
  --dtype f16 bad/raw_big.pt
finish
