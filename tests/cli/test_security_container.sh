#!/usr/bin/env bash
# Hostile containers, manifests and signatures through the CLI: artifacts written by a forger who
# knows formats/kvi-v1.md (every digest right) are refused with a reason, in bounded memory.
. "$(dirname "$0")/lib.sh"

# The pinned container-test fixture (fixtures/make_fixtures.sh) is the base of every forgery.
cp "$FIXTURES/container-test.kvi" a.kvi
"$KVTOOL" keygen -o key.pem >/dev/null

# kvi.py: re-packs a.kvi with a new manifest text and sections, fixing every digest and offset.
cat > kvi.py <<'EOF'
import hashlib, json, struct, sys

def parts(path):
    b = open(path, 'rb').read()
    moff, msize, soff, ssize = struct.unpack('<QQQQ', b[-80:-48])
    return b, json.loads(b[moff:moff + msize]), b[moff:moff + msize]

def canon(m):  # what kvtool writes for manifests without floats
    return json.dumps(m, sort_keys=True, separators=(',', ':'), ensure_ascii=False).encode()

def pad(out):
    out += b'\0' * (-len(out) % 64)

def write(path, manifest_text, stored=None):
    out = bytearray(64)
    for s, data in (stored or []):
        pad(out)
        out += data
    pad(out)
    moff = len(out)
    out += manifest_text
    out += struct.pack('<QQQQ', moff, len(manifest_text), 0, 0) + hashlib.sha256(manifest_text).digest()
    out += struct.pack('<IHH', 80, 1, 0) + b'\0' * 4 + b'KVI1'
    out[0:64] = b'KVI1' + struct.pack('<HHIIQ', 1, 0, 0, 64, len(out)) + b'\0' * 40
    open(path, 'wb').write(out)

def rle_frame(raw, fcs=None):  # zstd frame of `raw` zero bytes in 128 KiB RLE blocks
    f = bytearray(b'\x28\xb5\x2f\xfd\xc0' + bytes([10 << 3]) + struct.pack('<Q', raw if fcs is None else fcs))
    done = 0
    while done < raw:
        n = min(128 << 10, raw - done)
        f += struct.pack('<I', (1 if done + n == raw else 0) | 2 | (n << 3))[:3] + b'\0'
        done += n
    return bytes(f)

def note_artifact(src, dst, frame, raw, sha):
    b, m, text = parts(src)
    assert canon(m) == text, 'python serialisation differs from the manifest'
    e = {'name': 'note', 'dtype': 'u8', 'shape': [raw], 'codec': 'zstd', 'offset': 64,
         'stored_size': len(frame), 'raw_size': raw, 'sha256': sha, 'layer': -1, 'kv_head': -1}
    m['sections'] = [e]
    write(dst, canon(m), [(e, frame)])

def zeros_sha(n):
    h, z = hashlib.sha256(), bytes(1 << 20)
    for _ in range(n >> 20):
        h.update(z)
    return h.hexdigest()

cmd = sys.argv[1]
if cmd == 'deep':
    b, m, text = parts(sys.argv[2])
    deep = text.replace(b'"kind_data":{', b'"kind_data":{"deep":' + b'[' * 100000 + b']' * 100000 + b',', 1)
    write(sys.argv[3], deep, [])
elif cmd == 'rle':
    note_artifact(sys.argv[2], sys.argv[3], rle_frame(1 << 30), 1 << 30, zeros_sha(1 << 30))
elif cmd == 'fake':
    frame = rle_frame(0, fcs=1 << 30)[:14] + bytes((i * 131 + 7) % 251 for i in range(9000))
    note_artifact(sys.argv[2], sys.argv[3], frame, 1 << 30, '0' * 64)
elif cmd == 'flip':
    b = bytearray(open(sys.argv[2], 'rb').read())
    off = int(sys.argv[4])
    b[off if off >= 0 else len(b) + off] ^= 1
    open(sys.argv[3], 'wb').write(b)
elif cmd == 'forge-sig':  # identity key, R = identity, S = 0
    b = bytearray(open(sys.argv[2], 'rb').read())
    soff = struct.unpack('<Q', b[-64:-56])[0]
    b[soff + 8:soff + 104] = b'\x01' + b'\0' * 31 + b'\x01' + b'\0' * 63
    open(sys.argv[3], 'wb').write(b)
elif cmd == 'float':  # params.scale spelt as given, params_digest over the given params spelling
    b, m, text = parts(sys.argv[2])
    spelling, digest_spelling = sys.argv[4], sys.argv[5]
    m['params']['scale'] = 0.5
    p = canon(m['params'])
    m['params_digest'] = hashlib.sha256(p.replace(b'0.5', digest_spelling.encode())).hexdigest()
    t = canon(m).replace(b'"scale":0.5', b'"scale":' + spelling.encode())
    stored = [(s, b[s['offset']:s['offset'] + s['stored_size']]) for s in m['sections']]
    write(sys.argv[3], t, stored)
EOF
PY=/usr/bin/python3
peak_kb() { "$PY" -c 'import sys; print(open(sys.argv[1]).read().split()[-1])' "$1"; }

# Finding 3: 100,000 nested arrays in the manifest: BAD_MANIFEST, never a signal.
"$PY" kvi.py deep a.kvi deep.kvi || fail "deep"
[ "$(stat -c %s deep.kvi)" -gt 200000 ] || fail "deep.kvi is too small"
expect_reason 1 BAD_MANIFEST "$KVTOOL" verify deep.kvi
expect_reason 1 BAD_MANIFEST "$KVTOOL" verify deep.kvi --require-signature --pubkey key.pub.pem
expect_reason 1 BAD_MANIFEST "$KVTOOL" load deep.kvi --device cpu
expect_reason 1 BAD_MANIFEST "$KVTOOL" inspect deep.kvi

# Finding 4: an 11 KB artifact whose frame header claims 1 GiB, and a valid 32 KB RLE frame of
# 1 GiB: verify stays within 100 MB of what verifying the small good artifact takes (the baseline
# absorbs the build: a sanitizer build is several times larger resident).
expect_exit 0 /usr/bin/time -f "%M" -o base.rss "$KVTOOL" verify a.kvi
limit_kb=$(($(peak_kb base.rss) + 102400))
"$PY" kvi.py fake a.kvi fake.kvi || fail "fake"
"$PY" kvi.py rle a.kvi rle.kvi || fail "rle"
[ "$(stat -c %s fake.kvi)" -lt 12000 ] && [ "$(stat -c %s rle.kvi)" -lt 45000 ] || fail "bomb sizes"
expect_reason 1 DECOMPRESS_FAILED /usr/bin/time -f "%M" -o fake.rss "$KVTOOL" verify fake.kvi
[ "$(peak_kb fake.rss)" -lt "$limit_kb" ] || fail "verify of the fake frame peaked at $(peak_kb fake.rss) KB"
expect_exit 0 /usr/bin/time -f "%M" -o rle.rss "$KVTOOL" verify rle.kvi
[ "$(peak_kb rle.rss)" -lt "$limit_kb" ] || fail "verify of the 1 GiB RLE frame peaked at $(peak_kb rle.rss) KB"
expect_reason 1 DECOMPRESS_FAILED /usr/bin/time -f "%M" -o load.rss "$KVTOOL" load fake.kvi --device cpu
[ "$(peak_kb load.rss)" -lt "$limit_kb" ] || fail "load of the fake frame peaked at $(peak_kb load.rss) KB"
# A materializing read beyond the reader's budget is refused before allocating.
KVTOOL_READ_BUDGET=64M expect_reason 3 OUT_OF_MEMORY /usr/bin/time -f "%M" -o exp.rss "$KVTOOL" export rle.kvi -o x.h5
[ "$(peak_kb exp.rss)" -lt "$limit_kb" ] || fail "export over budget peaked at $(peak_kb exp.rss) KB"
KVTOOL_READ_BUDGET=lots expect_reason 2 USAGE "$KVTOOL" export rle.kvi -o y.h5

# Finding 10: header minor version, flags and reserved bytes, padding, footer minor and reserved
# bytes: each single flipped bit is refused.
moff=$("$PY" -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read()[-80:-72])[0])' a.kvi)
for spec in 6:UNSUPPORTED_VERSION 8:BAD_LAYOUT 11:BAD_LAYOUT 24:BAD_LAYOUT 63:BAD_LAYOUT \
  -10:UNSUPPORTED_VERSION -8:BAD_LAYOUT -5:BAD_LAYOUT $((moff - 1)):BAD_LAYOUT; do
  "$PY" kvi.py flip a.kvi flip.kvi "${spec%%:*}"
  expect_reason 1 "${spec#*:}" "$KVTOOL" verify flip.kvi
done

# Finding 11: --require-signature needs a trust anchor; a no-private-key signature is refused.
expect_reason 2 USAGE "$KVTOOL" verify a.kvi --require-signature
contains "$WORK/err" "only means something"
expect_reason 2 USAGE "$KVTOOL" load a.kvi --require-signature --device cpu
cp a.kvi s.kvi
"$KVTOOL" sign s.kvi --key key.pem >/dev/null || fail "sign"
expect_exit 0 "$KVTOOL" verify s.kvi --require-signature --pubkey key.pub.pem
"$PY" kvi.py forge-sig s.kvi forged.kvi
expect_reason 1 BAD_SIGNATURE "$KVTOOL" verify forged.kvi
expect_reason 1 BAD_SIGNATURE "$KVTOOL" load forged.kvi --device cpu
{
  echo "-----BEGIN PUBLIC KEY-----"
  printf '302a300506032b6570032100%s' "01$(printf '0%.0s' $(seq 62))" | xxd -r -p | base64
  echo "-----END PUBLIC KEY-----"
} > identity.pub.pem
expect_reason 1 BAD_KEY "$KVTOOL" verify forged.kvi --require-signature --pubkey identity.pub.pem

# Finding 16: the shortest spelling verifies; the 0.1.0 (Grisu2) spelling, with its params digest,
# still verifies; any other spelling of the same double does not.
"$PY" kvi.py float a.kvi short.kvi 0.007559482473880053 0.007559482473880053
expect_exit 0 "$KVTOOL" verify short.kvi
"$PY" kvi.py float a.kvi legacy.kvi 0.0075594824738800526 0.0075594824738800526
expect_exit 0 "$KVTOOL" verify legacy.kvi
"$PY" kvi.py float a.kvi other.kvi 0.00755948247388005260 0.00755948247388005260
expect_reason 1 BAD_MANIFEST "$KVTOOL" verify other.kvi
"$PY" kvi.py float a.kvi mixed.kvi 0.0075594824738800526 0.007559482473880053
expect_reason 1 PARAMS_DIGEST "$KVTOOL" verify mixed.kvi
# Artifacts written before this change (the committed fixtures) keep verifying.
expect_exit 0 "$KVTOOL" verify "$FIXTURES/container-test-signed.kvi" --pubkey "$FIXTURES/fixture-signing.pub.pem"
expect_exit 0 "$KVTOOL" verify "$FIXTURES/container-test.kvi"
finish
