#!/usr/bin/env bash
# Unbounded inputs and option values: each is refused with its reason and exit code, quickly and in
# bounded memory, leaving no output: thread counts (--threads, KVTOOL_THREADS, the config file),
# budgets beyond any row count, key files holding several PEM keys, safetensors headers beyond
# their cap, standard input that is no known file or is over --stdin-limit (and whose copy leaves
# nothing behind, even after SIGKILL); tensor layouts read in strided runs import in linear time.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
# An ASan build reserves terabytes of shadow address space at start: `ulimit -v` cannot bound it.
vlimit='ulimit -v 1000000;'
ldd "$KVTOOL" 2>/dev/null | grep -q libasan && vlimit=''

"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 128 --seed 3 -o d.h5 >/dev/null
"$BIN/kvtool-pq" build d.h5 -o p.kvi --bits 4 -q

# Thread counts: at most 1024 wherever a count is taken (flag, environment, config file).
for n in 1025 99999999; do
  expect_reason 2 USAGE "$KVTOOL" synth --layers 1 --kv-heads 1 --q-heads 1 --head-dim 2 --tokens 4 --seed 1 \
    --threads $n -o s.h5
  absent s.h5
  KVTOOL_THREADS=$n expect_reason 2 USAGE "$KVTOOL" synth --layers 1 --kv-heads 1 --q-heads 1 --head-dim 2 \
    --tokens 4 --seed 1 -o s.h5
  absent s.h5
  expect_reason 2 USAGE "$BIN/kvtool-pq" build d.h5 -o x.kvi --bits 4 --threads $n -q
  KVTOOL_THREADS=$n expect_reason 2 USAGE "$BIN/kvtool-pq" build d.h5 -o x.kvi --bits 4 -q
  absent x.kvi
  expect_reason 2 USAGE "$KVTOOL" eval p.kvi --source d.h5 --threads $n
  KVTOOL_THREADS=$n expect_reason 2 USAGE "$KVTOOL" eval p.kvi --source d.h5
  printf 'threads = %s\n' $n > conf
  expect_reason 2 USAGE "$KVTOOL" --config conf eval p.kvi --source d.h5
done
expect_exit 0 "$BIN/kvtool-pq" build d.h5 -o t1024.kvi --bits 4 --threads 1024 -q
cmp -s t1024.kvi p.kvi || fail "--threads 1024 changed the artifact"

# Budgets: a fraction in (0, 1], a percentage up to 100 or a row count up to 2^53, checked when
# parsed by every command that takes one (beyond 2^53 doubles skip integers and int64 overflows).
for b in 1e19 1e300 9007199254740994 0 -1 101% 2.5 nan; do
  expect_reason 2 USAGE "$KVTOOL" query p.kvi --source d.h5 --layer 0 --q-head 0 --position 100 --budget $b
  expect_reason 2 USAGE "$KVTOOL" eval p.kvi --source d.h5 --budget $b
  expect_reason 2 USAGE "$KVTOOL" load p.kvi --source d.h5 --budget $b
done
expect_exit 0 "$KVTOOL" query p.kvi --source d.h5 --layer 0 --q-head 0 --position 127 --budget 9007199254740992
expect_exit 0 "$KVTOOL" query p.kvi --source d.h5 --layer 0 --q-head 0 --position 127 --budget 100%

# Key files: exactly one PEM block. Two keys in one file (either kind, or a private key followed by
# a public one) are refused, not resolved to the first.
"$KVTOOL" keygen -o a.pem >/dev/null
"$KVTOOL" keygen -o b.pem >/dev/null
cat a.pem b.pem > two.pem
cat a.pub.pem b.pub.pem > two.pub.pem
cat a.pem b.pub.pem > mixed.pem
for k in two.pem mixed.pem; do
  expect_reason 1 BAD_KEY "$BIN/kvtool-pq" build d.h5 -o signed.kvi --bits 4 --sign-key $k -q
  contains "$WORK/err" "PEM blocks; a key file must hold exactly one key"
  absent signed.kvi
  cp p.kvi s.kvi
  expect_reason 1 BAD_KEY "$KVTOOL" sign s.kvi --key $k
  cmp -s s.kvi p.kvi || fail "sign with $k changed the artifact"
done
"$KVTOOL" sign s.kvi --key a.pem >/dev/null
expect_reason 1 BAD_KEY "$KVTOOL" verify s.kvi --pubkey two.pub.pem
mkdir keys && cp two.pub.pem keys/
expect_reason 1 BAD_KEY "$KVTOOL" verify s.kvi --trusted-keys keys
expect_exit 0 "$KVTOOL" verify s.kvi --pubkey a.pub.pem

# Safetensors headers: at most 16 MiB and 2^20 JSON values, whatever the format itself allows;
# checked before the header is parsed, so memory stays bounded.
$PY - <<'PY'
import json, struct
import numpy as np
k = np.arange(2 * 2 * 6 * 4, dtype=np.float32).reshape(2, 2, 6, 4)
def safetensors(path, header, data=b""):
    h = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
n = k.nbytes
good = {"k": {"dtype": "F32", "shape": list(k.shape), "data_offsets": [0, n]},
        "v": {"dtype": "F32", "shape": list(k.shape), "data_offsets": [n, 2 * n]}}
safetensors("good.safetensors", good, k.tobytes() + (k + 1).tobytes())
big = dict(good, __metadata__={"pad": "x" * (60 << 20)})          # a 60 MiB header
safetensors("big_header.safetensors", big, k.tobytes() + (k + 1).tobytes())
many = dict(good, __metadata__={"k%d" % i: "" for i in range(600000)})  # 1.2M values in 9 MiB
safetensors("many_values.safetensors", many, k.tobytes() + (k + 1).tobytes())
# A header length field of 2^40: refused before any allocation.
raw = bytearray(open("good.safetensors", "rb").read()); raw[:8] = struct.pack("<Q", 1 << 40)
open("huge_len.safetensors", "wb").write(bytes(raw))
json.dump({"model_artifact_sha256": "ab" * 32, "rope_config": {"theta": 10000.0}}, open("meta.json", "w"))
PY
expect_exit 0 "$KVTOOL" import good.safetensors --meta meta.json -o good.h5
for f in big_header many_values huge_len; do
  rm -f bad.h5
  expect_reason 1 BAD_TENSOR_FILE timeout 20 bash -c "$vlimit"' exec "$0" import "$1" --meta meta.json -o bad.h5' \
    "$KVTOOL" $f.safetensors
  absent bad.h5
done
no_temps .

# Standard input: the first bytes must be a known magic (refused before anything is copied, so
# /dev/zero ends at once); the copy stops at --stdin-limit; the copy has no name in TMPDIR at any
# time, so SIGKILL leaves nothing.
mkdir tmp
export TMPDIR=$WORK/tmp
for cmd in inspect verify; do
  expect_reason 1 UNKNOWN_FILE_TYPE timeout 10 bash -c 'cat /dev/zero | "$0" '$cmd' -' "$KVTOOL"
  contains "$WORK/err" "standard input does not start like"
  expect_reason 3 IO_ERROR timeout 20 bash -c '{ printf KVI1; cat /dev/zero; } | "$0" '$cmd' - --stdin-limit 1M' \
    "$KVTOOL"
  contains "$WORK/err" "over 1048576 bytes (--stdin-limit)"
  expect_reason 3 IO_ERROR timeout 20 bash -c \
    '{ printf "\211HDF\r\n\032\n"; cat /dev/zero; } | "$0" '$cmd' - --stdin-limit 2M' "$KVTOOL"
  expect_reason 2 USAGE bash -c 'cat "$1" | "$0" '$cmd' - --stdin-limit 0' "$KVTOOL" p.kvi
  expect_exit 0 bash -c 'cat "$1" | "$0" '$cmd' - --stdin-limit 1M' "$KVTOOL" p.kvi
  expect_exit 0 bash -c 'cat "$1" | "$0" '$cmd' -' "$KVTOOL" d.h5
  expect_exit 0 "$KVTOOL" $cmd - --stdin-limit 1K < p.kvi  # a redirected file is read in place
done
# A stream killed with SIGKILL while it is copied: a kvi stream's copy never has a name; an HDF5
# stream's (libhdf5 needs a name) is removed by a helper process once kvtool is gone.
kill_while_copying() {  # kill_while_copying MAGIC
  rm -f slow && mkfifo slow
  ( exec 3>slow; printf "$1" >&3; head -c 100000 /dev/zero >&3; exec sleep 30 ) >/dev/null 2>&1 &
  local writer=$! reader
  "$KVTOOL" inspect - < slow >/dev/null 2>&1 &
  reader=$!
  sleep 1
  kill -KILL $reader
  wait $reader 2>/dev/null
  kill $writer 2>/dev/null
  wait $writer 2>/dev/null
  for _ in $(seq 50); do [ -z "$(ls -A tmp)" ] && break; sleep 0.1; done
  [ -z "$(ls -A tmp)" ] || fail "SIGKILL left standard input's copy in TMPDIR: $(ls -A tmp)"
}
rm -f slow && mkfifo slow
( exec 3>slow; printf KVI1 >&3; head -c 100000 /dev/zero >&3; exec sleep 30 ) >/dev/null 2>&1 &
writer=$!
"$KVTOOL" inspect - < slow >/dev/null 2>&1 &
reader=$!
sleep 1
[ -z "$(ls -A tmp)" ] || fail "a kvi stream's copy has a name in TMPDIR: $(ls -A tmp)"
kill -KILL $reader
wait $reader 2>/dev/null
kill $writer 2>/dev/null
wait $writer 2>/dev/null
kill_while_copying KVI1
kill_while_copying '\211HDF\r\n\032\n'
unset TMPDIR

# Layouts read in short strided runs (L or 2 after d) from deflated .npz members, .npy and
# safetensors: each tensor is read (inflated) once, not once per layer. A 64 KB .npz of 1,024
# layers took minutes when every layer restarted the inflation; the dump equals the one imported
# from the same values in the L,H,T,d layout.
$PY - <<'PY'
import json, struct
import numpy as np
T, H, d, L = 128, 2, 32, 1024
k = np.zeros((T, H, d, L), np.float32)
k[5, 1, 3, :] = np.arange(L)  # something to compare, and a distinct value per layer
np.savez_compressed("wide.npz", k=k, v=k + 1)
np.save("wk.npy", k); np.save("wv.npy", k + 1)
np.savez("wide_lhtd.npz", k=np.ascontiguousarray(k.transpose(3, 1, 0, 2)),
         v=np.ascontiguousarray((k + 1).transpose(3, 1, 0, 2)))
h = json.dumps({"k": {"dtype": "F32", "shape": list(k.shape), "data_offsets": [0, k.nbytes]},
                "v": {"dtype": "F32", "shape": list(k.shape), "data_offsets": [k.nbytes, 2 * k.nbytes]}}).encode()
open("wide.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + k.tobytes() + (k + 1).tobytes())
PY
expect_exit 0 "$KVTOOL" import wide_lhtd.npz --meta meta.json -o ref.h5
expect_exit 0 timeout 60 "$KVTOOL" import wide.npz --layout T,H,d,L --meta meta.json -o w1.h5
expect_exit 0 timeout 60 "$KVTOOL" import wk.npy wv.npy --k wk --v wv --layout T,H,d,L --meta meta.json -o w2.h5
expect_exit 0 timeout 60 "$KVTOOL" import wide.safetensors --layout T,H,d,L --meta meta.json -o w3.h5
for f in w1 w2 w3; do cmp -s $f.h5 ref.h5 || fail "$f.h5 (T,H,d,L) differs from the L,H,T,d import"; done
# A FIFO given as an input is refused at once (nothing waits for a writer), whatever reads it.
mkfifo fifo
for cmd in "inspect fifo" "verify fifo" "inspect fifo --gguf fifo" "import fifo --layout L,H,T,d --meta meta.json -o f.h5" \
  "seal fifo -o f.json"; do
  # shellcheck disable=SC2086
  expect_reason 3 IO_ERROR timeout 20 "$KVTOOL" $cmd
done
absent f.h5
absent f.json
finish
