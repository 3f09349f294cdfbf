#!/usr/bin/env bash
# kvtool inspect / verify / seal of cache store directories (formats/cache-stores.md,
# formats/seal-v1.md): vLLM filesystem offload, LMCache local-disk and FS-connector chunks and SGLang
# HiCache pages, written byte for byte by tests/cli/make_store_fixtures.py as those stacks lay them
# out. Clean stores verify, and their per-(layer, head) max|x| equals the true K/V's; the folder
# digest equals vLLM's own test vector; then one defect at a time is planted in a copy and the check
# that must catch it names it (reason code and file), exit 1.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
PY=/usr/bin/python3
$PY -c "import numpy" 2>/dev/null || skip "/usr/bin/python3 lacks numpy"
$PY "$HERE/make_store_fixtures.py" || { fail "make_store_fixtures.py failed"; finish; }
M=(--model model/config.json)

# caught STORE REASON [PATH_PART] [OPTIONS...]: verify exits 1 and reports REASON (on a path
# containing PATH_PART).
caught() {
  local store=$1 reason=$2 part=${3:-}
  shift 3 2>/dev/null || shift $#
  "$KVTOOL" verify "$store" "$@" --json >"$WORK/v.json" 2>"$WORK/err"
  local rc=$?
  [ "$rc" = 1 ] || fail "verify $store $*: exit $rc, expected 1 ($(head -c 300 "$WORK/err"))"
  $PY - "$WORK/v.json" "$reason" "$part" <<'PY' || fail "verify $store: no $reason finding on '$part'"
import json, sys
r = json.load(open(sys.argv[1]))
if r["ok"] or not any(f["reason"] == sys.argv[2] and sys.argv[3] in f["path"] and not f["warning"] for f in r["findings"]):
    sys.exit("findings: %s" % [(f["reason"], f["path"]) for f in r["findings"]])
PY
}

# 1. Clean stores: exit 0, no findings, every block read, max|x| per (layer, head) equal to the true
# K/V's over the tokens each store holds (vLLM 3 blocks of 12, LMCache 37, SGLang 9 pages of 4).
for case in vllm:36 lmcache:37 lmcache_fs:37 sglang:36 sglang_tp2:36; do
  store=${case%%:*} tokens=${case#*:}
  expect_exit 0 "$KVTOOL" verify "$store" "${M[@]}" --block-tokens "$([ "${store#sglang}" != "$store" ] && echo 4 || echo 16)" --json
  $PY - "$WORK/out" "$tokens" <<'PY' || fail "verify $store: wrong values or findings"
import json, sys
import numpy as np
r = json.load(open(sys.argv[1])); T = int(sys.argv[2])
t = np.load("truth.npz"); k, v = t["k"][:, :, :T], t["v"][:, :, :T]
assert r["ok"] and not r["findings"], r["findings"]
assert r["counts"]["blocks_read"] == r["counts"]["blocks"] > 0, r["counts"]
seen = {}
for h in r["health"]:
    seen[(h["layer"], h["head"])] = max(seen.get((h["layer"], h["head"]), 0), h["max_abs"])
    assert h["nonfinite"] == 0
for (l, hd), m in seen.items():
    want = float(max(np.abs(k[l, hd]).max(), np.abs(v[l, hd]).max()))
    assert abs(m - want) < 1e-6, (l, hd, m, want)
assert len(seen) == k.shape[0] * k.shape[1], sorted(seen)
PY
done
# Older LMCache keys (engine format first) and layerwise chunks: recognised, every block read.
for case in lmcache_old:3 lmcache_layer:6; do
  store=${case%%:*}
  expect_exit 0 "$KVTOOL" verify "$store" "${M[@]}" --block-tokens 16 --json
  [ "$(json_get "$WORK/out" '["counts"]["blocks_read"]')" = "${case#*:}" ] || fail "$store: not every chunk was read"
done
[ "$(json_get "$WORK/out" '["health"][0]["max_abs"]')" != 0 ] || fail "lmcache_layer: no values"
$PY - "$WORK/out" <<'PY' || fail "lmcache_layer's values are not the true K/V"
import json, sys
import numpy as np
r = json.load(open(sys.argv[1])); t = np.load("truth.npz")
for h in r["health"]:
    want = max(np.abs(t["k"][h["layer"], h["head"]]).max(), np.abs(t["v"][h["layer"], h["head"]]).max())
    assert abs(h["max_abs"] - want) < 1e-6, (h, want)
PY
expect_exit 0 "$KVTOOL" inspect lmcache_old --json
[ "$(json_get "$WORK/out" '["namespaces"][0]["config"]["format"]')" = vllm ] || fail "the engine format of old keys"
# vLLM's test vector (tests/v1/kv_offload/test_file_mapper.py): the folder name is the digest.
expect_exit 0 "$KVTOOL" inspect vllm_vector --json
[ "$(json_get "$WORK/out" '["findings"]')" = "[]" ] || fail "the test-vector namespace's digest is not vLLM's"
[ "$(json_get "$WORK/out" '["kind"]')" = "vllm" ] || fail "vllm_vector is not recognised as a vLLM store"
# inspect reports, verify fails: the same store with a foreign file.
cp -r sglang fx && echo hi >fx/notes.txt
expect_exit 0 "$KVTOOL" inspect fx
contains "$WORK/out" "FOREIGN_FILE notes.txt"
caught fx FOREIGN_FILE notes.txt
expect_reason 1 STORE_UNRECOGNIZED "$KVTOOL" inspect model
expect_reason 2 USAGE "$KVTOOL" inspect truth.npz --model model/config.json

# plant STORE NAME PYTHON: a copy of STORE as NAME, changed by PYTHON (run inside it).
plant() { rm -rf "$2" && cp -r "$1" "$2" && (cd "$2" && $PY -c "$3") || fail "planting $2"; }
VBLK='import glob; b = sorted(glob.glob("*_r0/*/*/*.bin"))'
VCFG='import glob, json; c = glob.glob("*/config.json")[0]; j = json.load(open(c))'

# 2. Wrong tensor-parallel split.
plant vllm v_tp 'import glob, os; d = glob.glob("*_r0")[0]; os.rename(d, d[:-1] + "1")'
caught v_tp STORE_CONFIG_MISMATCH _r1/ "${M[@]}"
plant lmcache l_tp 'import glob, os; [os.rename(f, f.replace("@1@0@", "@2@0@")) for f in glob.glob("*.pt")]'
caught l_tp BLOCK_SIZE_MISMATCH @2@0@ "${M[@]}" --block-tokens 16
caught l_tp ORPHAN_BLOCK @2@0@
plant sglang s_tp 'import glob, os; [os.rename(f, f.replace("_0_1.bin", "_0_2.bin")) for f in glob.glob("*.bin")]'
caught s_tp BLOCK_SIZE_MISMATCH _0_2 "${M[@]}" --block-tokens 4
# 3. Wrong layout.
plant vllm v_lay "$VCFG"'; j["canonical_format"] = "v1-hnd"; json.dump(j, open(c, "w"), indent=2, sort_keys=True)'
caught v_lay STORE_CONFIG_MISMATCH config.json
plant lmcache_fs l_lay 'import glob, struct; f = sorted(glob.glob("*.data"))[0]; b = bytearray(open(f, "rb").read()); b[4:8] = struct.pack("i", 2); open(f, "wb").write(b)'
caught l_lay STORE_CONFIG_MISMATCH .data "${M[@]}"
# 4. Wrong revision or model: another model's config in the namespace; --model-name.
plant vllm v_rev "$VCFG"'; j["model_name"] = "org/tiny-v2"; json.dump(j, open(c, "w"), indent=2, sort_keys=True)'
caught v_rev STORE_CONFIG_MISMATCH config.json
caught vllm STORE_CONFIG_MISMATCH config.json --model-name org/other
caught lmcache STORE_CONFIG_MISMATCH "" --model-name org/other
caught sglang STORE_CONFIG_MISMATCH "" --model-name org/other
caught vllm_vector STORE_CONFIG_MISMATCH config.json "${M[@]}"  # 0 layers named; the model has 2
# 5. Wrong dtype: a namespace that says f32 over f16 blocks; keys that say "float"; --store-dtype.
plant vllm v_dt "$VCFG"'; j["dtype"] = "float32"; json.dump(j, open(c, "w"), indent=2, sort_keys=True)'
caught v_dt BLOCK_SIZE_MISMATCH .bin "${M[@]}"
plant lmcache l_dt 'import glob, os; [os.rename(f, f.replace("@half", "@float")) for f in glob.glob("*.pt")]'
caught l_dt BLOCK_SIZE_MISMATCH @float "${M[@]}" --block-tokens 16
caught sglang BLOCK_SIZE_MISMATCH .bin "${M[@]}" --block-tokens 4 --store-dtype f32
caught lmcache STORE_CONFIG_MISMATCH "" --store-dtype bf16
# 6. Flipped bytes: into a NaN (every store's value check), and a quiet bit (the seal; vLLM's CRC32C).
for s in vllm lmcache lmcache_fs sglang; do
  expect_exit 0 "$KVTOOL" seal "$s" -o "$s.seal"
  plant "$s" "${s}_nan" 'import glob; f = sorted(g for g in glob.glob("**/*", recursive=True) if g.endswith((".bin", ".pt", ".data")))[0]
b = bytearray(open(f, "rb").read()); o = 28 if f.endswith(".data") else 0; b[o:o + 2] = b"\x00\x7e"; open(f, "wb").write(b)'
  caught "${s}_nan" NON_FINITE "" "${M[@]}" --block-tokens "$([ "$s" = sglang ] && echo 4 || echo 16)"
  plant "$s" "${s}_flip" 'import glob; f = sorted(g for g in glob.glob("**/*", recursive=True) if g.endswith((".bin", ".pt", ".data")))[-1]
b = bytearray(open(f, "rb").read()); b[len(b) // 2] ^= 1; open(f, "wb").write(b)'
  expect_exit 0 "$KVTOOL" verify "${s}_flip"  # no stack's check sees one bit
  caught "${s}_flip" SEAL_MISMATCH "" --seal "$s.seal"
done
plant vllm v_crc "$VBLK"'
import os, struct
def crc32c(data):
    crc = 0xFFFFFFFF
    for x in data:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF
for f in b:
    os.setxattr(f, "user.vllm.kv_crc32c", crc32c(open(f, "rb").read()).to_bytes(4, "big"))
x = bytearray(open(b[0], "rb").read()); x[7] ^= 4; open(b[0], "r+b").write(x)'
caught v_crc CHECKSUM_MISMATCH "$(cd v_crc && ls -d *_r0/*/*/*.bin | sort | head -1)"
expect_exit 1 "$KVTOOL" verify v_crc --json
[ "$(json_get "$WORK/out" '["findings"].__len__()')" = 1 ] || fail "the blocks whose CRC32C matches were reported too"
# 7. Truncated blocks.
plant vllm v_cut "$VBLK"'; open(b[0], "r+b").truncate(4000)'
caught v_cut BLOCK_SIZE_MISMATCH .bin "${M[@]}"
plant lmcache l_cut 'import glob; f = sorted(glob.glob("*.pt"))[0]; open(f, "r+b").truncate(1000)'
caught l_cut BLOCK_SIZE_MISMATCH .pt "${M[@]}" --block-tokens 16
plant sglang s_cut 'import glob; f = sorted(glob.glob("*.bin"))[0]; open(f, "r+b").truncate(0)'
caught s_cut FOREIGN_FILE .bin
# 8. Foreign entries: links, FIFOs, hard links, stale temporaries (a fresh one is a warning only).
plant vllm v_lnk "$VBLK"'; import os; os.symlink("/etc/passwd", b[0] + ".x"); os.mkfifo(b[1][:-4] + "0" * 0 + ".fifo"); os.link(b[2], b[2][:-5] + "0.bin")'
caught v_lnk FOREIGN_FILE .x "${M[@]}"
caught v_lnk FOREIGN_FILE .fifo "${M[@]}"
caught v_lnk DUPLICATE_BLOCK .bin "${M[@]}"
plant lmcache l_tmp 'import glob, os; f = sorted(glob.glob("*.pt"))[0]; open(f[:-3] + ".tmp", "wb").write(b"x")'
expect_exit 0 "$KVTOOL" verify l_tmp "${M[@]}"
contains "$WORK/out" "warning FOREIGN_FILE"
(cd l_tmp && touch -d '2 hours ago' ./*.tmp)
caught l_tmp FOREIGN_FILE .tmp
plant lmcache_fs l_dup 'import glob, shutil; f = sorted(glob.glob("*.data"))[0]; shutil.copy(f, f.replace("-SEP-", "-"))'
caught l_dup DUPLICATE_BLOCK .data
plant sglang_tp2 s_orph 'import glob, os; os.remove(sorted(glob.glob("*_1_2.bin"))[0])'
caught s_orph ORPHAN_BLOCK _0_2.bin
plant vllm v_orph 'import glob, shutil; shutil.rmtree(glob.glob("*/config.json")[0].split("/")[0])'
caught v_orph ORPHAN_BLOCK .bin
# 9. A block of another prompt renamed into the store passes every check but the seal ("added").
plant vllm v_other "$VBLK"'; import os, shutil; x = "f" * 64; d = b[0].split("/")[0] + "/fff/ff_g0"; os.makedirs(d); shutil.copy(b[0], d + "/" + x + ".bin")'
expect_exit 0 "$KVTOOL" verify v_other "${M[@]}"
caught v_other SEAL_MISMATCH ffff --seal vllm.seal

# 10. Seals: a single file; signed seals; shards merge to the whole seal; hostile seals.
f=$(ls lmcache/*.pt | head -1)
expect_exit 0 "$KVTOOL" seal "$f" -o one.seal
expect_exit 0 "$KVTOOL" verify "$f" --seal one.seal
cp "$f" one.pt && printf '\x01' | dd of=one.pt bs=1 seek=5 conv=notrunc 2>/dev/null
cp one.seal one2.seal && $PY -c "import json; j = json.load(open('one2.seal')); j['name'] = 'one.pt'; j['files'][0]['path'] = 'one.pt'; json.dump(j, open('one2.seal', 'w'))"
expect_exit 1 "$KVTOOL" verify one.pt --seal one2.seal
contains "$WORK/out" SEAL_MISMATCH
expect_exit 0 "$KVTOOL" keygen -o k.pem
expect_exit 0 "$KVTOOL" keygen -o other.pem
expect_exit 0 "$KVTOOL" seal sglang -o signed.seal --sign-key k.pem
expect_exit 0 "$KVTOOL" verify sglang --seal signed.seal --pubkey k.pub.pem
expect_reason 1 BAD_SEAL "$KVTOOL" verify sglang --seal signed.seal --pubkey other.pub.pem
expect_reason 1 BAD_SEAL "$KVTOOL" verify sglang --seal sglang.seal --pubkey k.pub.pem
$PY -c "import json; j = json.load(open('signed.seal')); j['files'].pop(); json.dump(j, open('cut.seal', 'w'))"
expect_reason 1 BAD_SEAL "$KVTOOL" verify sglang --seal cut.seal --pubkey k.pub.pem
expect_exit 1 "$KVTOOL" verify sglang --seal cut.seal  # unsigned check: the dropped file is "added"
contains "$WORK/out" "added since the seal was made"
for i in 0 1 2; do expect_exit 0 "$KVTOOL" seal vllm -o "part$i.seal" --shard "$i/3"; done
expect_exit 0 "$KVTOOL" seal --merge part0.seal part1.seal part2.seal -o merged.seal
$PY -c "import json; a, b = (json.load(open(p)) for p in ('merged.seal', 'vllm.seal')); assert a['files'] == b['files']" ||
  fail "the merged shard seals differ from the whole seal"
expect_reason 1 BAD_SEAL "$KVTOOL" seal --merge part0.seal part1.seal -o m2.seal
absent m2.seal
expect_reason 1 BAD_SEAL "$KVTOOL" seal --merge part0.seal part0.seal part2.seal -o m2.seal
expect_exit 0 "$KVTOOL" verify vllm --seal part1.seal
# verify --shard: each shard of the whole seal alone; a flipped byte fails only its file's shard.
for i in 0 1 2; do expect_exit 0 "$KVTOOL" verify vllm --seal vllm.seal --shard "$i/3"; done
bad=0
for i in 0 1 2; do
  "$KVTOOL" verify vllm_flip --seal vllm.seal --shard "$i/3" >/dev/null 2>&1 || bad=$((bad + 1))
done
[ "$bad" = 1 ] || fail "a flipped byte failed $bad of 3 shards, expected exactly 1"
expect_reason 1 BAD_SEAL "$KVTOOL" verify vllm --seal part1.seal --shard 0/3
expect_reason 2 USAGE "$KVTOOL" verify vllm --shard 0/3
# --resume: an interrupted seal (a journal with half its lines and a torn one) resumes to the same
# seal; a digest the journal recorded at a file's present size and mtime is reused, not recomputed.
expect_exit 0 "$KVTOOL" seal vllm -o again.seal
absent again.seal.partial
cmp -s again.seal vllm.seal || fail "two seals of one store differ"
"$KVTOOL" seal vllm -o r.seal -q && mv r.seal r.keep
$PY - vllm <<'PY' || fail "writing a journal"
import json, os, sys
seal = json.load(open("r.keep"))
lines = []
for f in seal["files"][:2]:
    st = os.stat(os.path.join(sys.argv[1], f["path"]))
    lines.append(json.dumps({"path": f["path"], "size": f["size"], "mtime_ns": st.st_mtime_ns, "sha256": f["sha256"]}))
lines[1] = lines[1].replace(json.loads(lines[1])["sha256"], "0" * 64)  # a recorded digest is trusted as recorded
open("r.seal.partial", "w").write("\n".join(lines) + '\n{"path": "torn')
PY
expect_exit 0 "$KVTOOL" seal vllm -o r.seal --resume
absent r.seal.partial
$PY -c "import json; a, b = json.load(open('r.seal')), json.load(open('r.keep')); d = [x['path'] for x, y in zip(a['files'], b['files']) if x != y]; assert len(d) == 1 and a['files'][1]['sha256'] == '0' * 64, d" ||
  fail "--resume did not reuse the journal's digests"
expect_exit 1 "$KVTOOL" verify vllm --seal r.seal
contains "$WORK/out" SEAL_MISMATCH
printf '{"kvtool_seal": 1}' >bad.seal
expect_reason 1 BAD_SEAL "$KVTOOL" verify vllm --seal bad.seal
printf '[[[[' >bad.seal
expect_reason 1 BAD_SEAL "$KVTOOL" verify vllm --seal bad.seal
expect_reason 1 BAD_SEAL "$KVTOOL" verify "$f" --seal vllm.seal
expect_reason 3 OUTPUT_EXISTS "$KVTOOL" seal vllm -o vllm.seal
expect_reason 3 IO_ERROR "$KVTOOL" seal missing-dir -o x.seal
absent x.seal
# Regressions of an adversarial review: each once hung, read without bound, passed or crashed.
mkfifo fifo.seal.partial
expect_reason 3 IO_ERROR timeout 20 "$KVTOOL" seal vllm -o fifo.seal
ln -s /dev/zero zero.seal.partial
expect_reason 3 IO_ERROR timeout 20 "$KVTOOL" seal vllm -o zero.seal --resume
mkfifo fifo.json
expect_reason 1 BAD_SEAL timeout 20 "$KVTOOL" verify vllm --seal fifo.json
cp "$f" one3.pt && "$KVTOOL" seal one3.pt -o one3.keep -q
printf '{"path": "one3.pt", "size": %s, "mtime_ns": 0, "sha256": "%s"}\n' "$(stat -c %s one3.pt)" "$(printf 'e%.0s' $(seq 64))" >one3.seal.partial
expect_exit 0 "$KVTOOL" seal one3.pt -o one3.seal --resume
cmp -s one3.seal one3.keep || fail "--resume took a journal digest of another modification time for a single file"
mkdir plain && echo a >plain/a.txt && mkdir plain/sub && echo b >plain/sub/b.txt
expect_exit 0 "$KVTOOL" seal plain -o plain.seal
expect_exit 0 "$KVTOOL" verify plain --seal plain.seal
echo c >>plain/sub/b.txt
expect_exit 1 "$KVTOOL" verify plain --seal plain.seal
contains "$WORK/out" SEAL_MISMATCH
$PY -c "
import json
a = json.load(open('part0.seal')); b = json.load(open('part1.seal'))
f = dict(a['files'][0]); f['sha256'] = '0' * 64
b['files'] = sorted(b['files'] + [f], key=lambda x: x['path']); b['shard']['index'] = 1
json.dump(b, open('conflict.seal', 'w'))
c = json.load(open('vllm.seal')); c['files'][0]['path'] = '../' + c['files'][0]['path']; json.dump(c, open('dotdot.seal', 'w'))"
expect_reason 1 BAD_SEAL "$KVTOOL" seal --merge part0.seal conflict.seal part2.seal -o m3.seal
expect_reason 1 BAD_SEAL "$KVTOOL" verify vllm --seal dotdot.seal
expect_reason 2 USAGE "$KVTOOL" seal vllm -o vllm/inside.seal
absent vllm/inside.seal
plant lmcache_layer l_l9 'import glob, os; f = sorted(glob.glob("*@1.data"))[0]; os.rename(f, f[:-7] + "@9.data")'
caught l_l9 STORE_CONFIG_MISMATCH @9.data "${M[@]}"
plant vllm v_null "$VCFG"'; open(c, "w").write("null")'
caught v_null STORE_CONFIG_MISMATCH config.json
plant vllm v_crc3 "$VBLK"'; import os; os.setxattr(b[0], "user.vllm.kv_crc32c", b"abc")'
caught v_crc3 CHECKSUM_MISMATCH .bin
no_temps .
finish
