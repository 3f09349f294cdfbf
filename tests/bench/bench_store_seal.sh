#!/usr/bin/env bash
# kvtool seal and verify --seal of a 4 GiB store against sha256sum over the same files, in the same
# run (formats/seal-v1.md; the target: seal and verify at >= 0.8x sha256sum's speed). The store is
# vLLM-shaped: 2,048 block files of 2 MiB in hash folders. Both read from the page cache (the files
# were just written; the machine holds them), so the comparison is of hashing and file handling,
# not of the disk. Baselines: one sha256sum over every file (one core, as a user runs it) and two
# sha256sum processes (xargs -P 2: every core), and two `openssl dgst -sha256` processes (OpenSSL's
# SHA-256, with the CPU's SHA extensions: the fastest hashing on the machine, the same library
# kvtool uses). KVTOOL_SEAL_BENCH_GIB sets the size.
set -euo pipefail
KVTOOL=${KVTOOL:?KVTOOL must point at the kvtool binary}
GIB=${KVTOOL_SEAL_BENCH_GIB:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
files=$((GIB * 512))
/usr/bin/python3 - "$files" <<'PY'
import hashlib, json, os, sys
n = int(sys.argv[1])
block = os.urandom(2 << 20)
# A namespace whose rows are 2 MiB: 32 layers x 16 tokens x 8 heads x 2 x 128 x 2 bytes.
fields = {"model_name": "m", "tokens_per_hash": 16, "blocks_per_file": 1, "tp_size": 1, "pp_size": 1, "pcp_size": 1,
          "dcp_size": 1, "dtype": "float16", "inference_engine": "vllm",
          "kv_cache_groups": [{"tokens_per_block": 16, "layer_names": ["l%d" % l for l in range(32)]}]}
ns = "m_" + hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
os.makedirs("store/" + ns)
json.dump(fields, open("store/%s/config.json" % ns, "w"), indent=2, sort_keys=True)
for i in range(n):
    h = hashlib.sha256(b"%d" % i).hexdigest()
    d = "store/%s_r0/%s/%s_g0" % (ns, h[:3], h[3:5])
    os.makedirs(d, exist_ok=True)
    with open("%s/%s.bin" % (d, h), "wb") as f:
        f.write(block[i % 4096:] + block[:i % 4096])  # distinct files, no allocation per file
PY
cat >/dev/null < <(find store -type f -exec cat {} +)  # warm the page cache for every contender
now() { date +%s.%N; }
t0=$(now); find store -type f -print0 | xargs -0 sha256sum >/dev/null; t1=$(now)
find store -type f -print0 | xargs -0 -n 64 -P 2 sha256sum >/dev/null; t2=$(now)
find store -type f -print0 | xargs -0 -n 64 -P 2 openssl dgst -sha256 >/dev/null; t3=$(now)
"$KVTOOL" seal store -o store.seal -q; t4=$(now)
"$KVTOOL" verify store --seal store.seal >/dev/null; t5=$(now)
# The floor: OpenSSL's SHA-256 over 2 MiB buffers already in memory on every core (no files, no
# reads): the hashing alone, in bytes per second ("sha256 <N>k" is N thousand bytes a second).
floor=$(openssl speed -evp sha256 -bytes 2097152 -seconds 1 -multi "$(nproc)" 2>/dev/null | awk '$1 == "sha256" {print $2}' | tr -d k)
/usr/bin/python3 - "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" "$GIB" "$(nproc)" "$floor" <<'PY'
import sys
t0, t1, t2, t3, t4, t5, gib, cores, floor_k = map(float, sys.argv[1:])
one, two, ossl, seal, verify = t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4
gb = gib * (1 << 30) / 1e9
print("store: %d GiB in %d files of 2 MiB; %d cores" % (gib, gib * 512, cores))
for name, s in (("sha256sum (1 process)", one), ("sha256sum (xargs -P 2)", two), ("openssl dgst (xargs -P 2)", ossl),
                ("kvtool seal", seal), ("kvtool verify --seal", verify)):
    print("  %-26s %7.2f s  %6.2f GB/s" % (name, s, gb / s))
print("seal   / sha256sum: %.2fx  (vs sha256sum -P 2: %.2fx, vs openssl -P 2: %.2fx)" % (one / seal, two / seal, ossl / seal))
print("verify / sha256sum: %.2fx  (vs sha256sum -P 2: %.2fx, vs openssl -P 2: %.2fx)" % (one / verify, two / verify, ossl / verify))
floor_s = gib * (1 << 30) / (floor_k * 1000)
print("floor (openssl speed, in memory, %d cores): %.2f s, %.2f GB/s; seal at %.2f of it, verify at %.2f"
      % (cores, floor_s, floor_k / 1e6, floor_s / seal, floor_s / verify))
ok = one / seal >= 0.8 and one / verify >= 0.8
print("target (>= 0.8x sha256sum): %s" % ("met" if ok else "NOT met"))
sys.exit(0 if ok else 1)
PY
