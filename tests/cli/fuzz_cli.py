#!/usr/bin/python3
"""Every kvtool command with hostile bytes in its arguments (docs/threat-model.md, "Bytes from input
in what kvtool prints"): paths, option values, metadata strings and the names of real files hold
random bytes (control bytes, escape sequences, bytes that are not UTF-8), with and without --json.

Each run must end with exit 0, 1, 2 or 3 (never a signal, never exit 4), within TIMEOUT seconds;
with --json its stdout is one JSON document in valid UTF-8 (on failure {"ok": false, "reason":
...}); everything else it prints is valid UTF-8 without control bytes other than newline and tab;
a failed run leaves no new file behind. Deterministic for a seed.

Usage: fuzz_cli.py KVTOOL WORKDIR [TRIALS [SEED]]   (env KVTOOL_SHARED: the shared models folder)
"""
import json
import os
import random
import resource
import shutil
import subprocess
import sys

TIMEOUT = 20
MAX_RSS_MIB = 512

kvtool, work = sys.argv[1], sys.argv[2]
trials = int(sys.argv[3]) if len(sys.argv) > 3 else 200
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
source = os.environ.get("KVTOOL_SOURCE", os.path.join(os.path.dirname(__file__), "..", ".."))
rng = random.Random(seed)
os.makedirs(work, exist_ok=True)
os.chdir(work)

HOSTILE = [b"\xff", b"\x1b[31m", b"\x1b]0;title\x07", b"\xc3", b"\xe2\x80", b"\x01", b"\x7f", b"\xc2\x9b", b"\n",
           b"\t", b"%s%n", b"\\u0000", b"\"", b"'", b"\xf4\x90\x80\x80", b"\xed\xa0\x80", "é".encode(), b"-"]


def hostile_bytes(n=None):
    n = n if n is not None else rng.randint(1, 6)
    out = b"".join(rng.choice(HOSTILE) if rng.random() < 0.6 else bytes([rng.randint(0x20, 0x7e)]) for _ in range(n))
    return out.replace(b"/", b"?").replace(b"\0", b"?")


def run(argv, check=True):
    r = subprocess.run([os.fsencode(a) if isinstance(a, str) else a for a in argv], capture_output=True,
                       timeout=TIMEOUT)
    if check and r.returncode != 0:
        sys.exit(f"setup failed: {argv}: {r.stderr[-400:]!r}")
    return r


# Valid inputs the hostile ones are made from: a dump, artifacts of two kinds, a key, a llama.cpp
# state file with the GGUF of its model, and copies of each under a hostile name.
run([kvtool, "synth", "-o", "d.h5", "--layers", "2", "--kv-heads", "1", "--q-heads", "2", "--head-dim", "16",
     "--tokens", "96", "--seed", "3", "--query-count", "8", "-q"])
run([kvtool, "build", "pq", "d.h5", "--prefix", "80", "-o", "pq.kvi", "-q"])
run([kvtool, "build", "clusterkv", "d.h5", "--prefix", "80", "-o", "ckv.kvi", "-q"])
run([kvtool, "keygen", "-o", "key.pem"])
corpus = os.path.join(source, "fuzz", "corpus", "llama_state")
shutil.copy(os.path.join(corpus, "stories-f16.ggsq"), "s.ggsq")
shutil.copy(os.path.join(corpus, "stories-metadata.gguf"), "m.gguf")
os.makedirs("store", exist_ok=True)
with open("meta.json", "w") as f:
    json.dump({"model_artifact_sha256": "a" * 64}, f)
valid = {"DUMP": b"d.h5", "ART": b"pq.kvi", "ART2": b"ckv.kvi", "KEY": b"key.pem", "STATE": b"s.ggsq",
         "GGUF": b"m.gguf", "META": b"meta.json", "PUB": b"key.pem.pub"}
if not os.path.exists("key.pem.pub"):
    valid["PUB"] = b"key.pem"
named = {}
for k, v in valid.items():
    name = hostile_bytes(4) + b"." + v
    shutil.copy(v, name)
    named[k] = name

# A GGUF whose strings are hostile (general.name, the architecture) and one with a hostile
# rope.scaling.type: what reaches inspect's text and JSON from inside a file.
def gguf(strs):
    import struct
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(strs) + 4)
    def s(x):
        return struct.pack("<Q", len(x)) + x
    for k, v in strs:
        out += s(k) + struct.pack("<I", 8) + s(v)
    for k, v in ((b"llama.block_count", 5), (b"llama.embedding_length", 64), (b"llama.attention.head_count", 8),
                 (b"llama.attention.head_count_kv", 4)):
        out += s(k) + struct.pack("<I", 4) + struct.pack("<I", v)
    return out


with open("hostile.gguf", "wb") as f:
    f.write(gguf([(b"general.architecture", b"llama"), (b"general.name", b"\x1b[2J\xff" + hostile_bytes(8))]))
with open("scaling.gguf", "wb") as f:
    f.write(gguf([(b"general.architecture", b"llama"), (b"llama.rope.scaling.type", hostile_bytes(8))]))


def pick(kind):
    """A value for a placeholder: the valid file, its hostile-named copy, a missing hostile path,
    or hostile text."""
    r = rng.random()
    if kind in valid:
        if r < 0.4:
            return valid[kind]
        if r < 0.75:
            return named[kind]
        return b"missing-" + hostile_bytes()
    if kind == "OUT":
        return b"out-" + hostile_bytes() + b".h5"
    if kind == "GGUFX":
        return rng.choice([b"hostile.gguf", b"scaling.gguf", valid["GGUF"], named["GGUF"]])
    if kind == "NUM":
        return rng.choice([b"0", b"1", b"-1", b"nan", b"inf", b"0x10", b"1e999", b"9007199254740992", b"0.1", b"100%",
                           b"2", b" 3", b"4 "]) if r < 0.7 else hostile_bytes()
    return hostile_bytes()  # STR


TEMPLATES = [
    "inspect DUMP", "inspect ART", "inspect STATE --gguf GGUFX", "inspect STATE", "inspect STR",
    "verify DUMP", "verify ART", "verify STATE --gguf GGUFX", "verify ART --source DUMP", "verify STATE --gguf GGUF --seq-id NUM",
    "export ART -o OUT", "keygen -o OUT", "sign ART --key KEY",
    "synth -o OUT --layers NUM --kv-heads 1 --q-heads 1 --head-dim 8 --tokens 16 --seed 1 --tenant STR",
    "import DUMP -o OUT", "import STATE --gguf GGUFX -o OUT --meta META", "import STATE --gguf GGUF --seq-id NUM -o OUT",
    "import STATE --gguf GGUF -o OUT --meta STR", "import STATE --gguf GGUF --llama-rotation STR -o OUT",
    "import STR --format lmcache-raw --chunk-tokens NUM -o OUT",
    "import STR --format STR -o OUT", "import STATE --gguf GGUF --dtype STR -o OUT",
    "query ART --source DUMP --layer NUM --q-head 0 --position 90 --budget NUM",
    "query ART --source DUMP --layer 0 --q-head 0 --position 90 --rerank NUM",
    "query ART2 --source DUMP --layer 0 --q-head 0 --position NUM -o STR",
    "query ART --source DUMP --layer 0 --q-head 0 --vector STR",
    "eval ART --source DUMP --budget NUM", "eval ART --source DUMP --positions STR", "eval ART --source DUMP --csv STR",
    "eval ART --source DUMP -o STR", "eval ART2 --source DUMP --quantile NUM",
    "compare ART ART2 --source DUMP --budget NUM", "compare ART STR --source DUMP",
    "merge ART ART2 -o OUT", "merge ART STR -o OUT",
    "build pq DUMP -o OUT --prefix NUM", "build clusterkv DUMP -o OUT --layers STR", "build STR DUMP -o OUT",
    "build lsh DUMP -o OUT --tables NUM", "build squeeze DUMP -o OUT -q --centroids NUM",
    "store put ART --store store", "store get --store store --tenant STR --model STR --adapter STR --prefix-hash STR --kind pq",
    "store ls --store STR --tenant STR", "store rm --store store --tenant default --model STR --adapter STR --prefix-hash STR --kind STR",
    "load ART --source DUMP --host-budget STR", "load ART --tenant STR", "reasons STR",
    "STR", "inspect DUMP --STR", "verify --config STR DUMP", "eval-decode ART --llama2c STR --source DUMP",
    "dump --llama2c STR --tokens NUM -o OUT",
]


def fill(template):
    argv = [kvtool.encode()]
    for word in template.split():
        argv.append(pick(word) if word.isupper() else word.encode())
    if rng.random() < 0.6:
        argv.append(b"--json")
    return argv


def printable_text(b):
    try:
        t = b.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 at byte {e.start}"
    bad = [c for c in t if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f]
    return f"control character {bad[0]!r}" if bad else None


failures = 0
for trial in range(trials):
    template = rng.choice(TEMPLATES)
    argv = fill(template)
    before = set(os.listdir(b"."))
    try:
        r = subprocess.run(argv, capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        print(f"trial {trial}: {argv!r}: over {TIMEOUT} s")
        failures += 1
        continue
    problems = []
    if r.returncode < 0 or r.returncode >= 4:
        problems.append(f"exit {r.returncode}")
    as_json = b"--json" in argv
    if as_json and r.stdout.strip():
        try:
            doc = json.loads(r.stdout.decode("utf-8"))
            if r.returncode != 0 and not (isinstance(doc, dict) and doc.get("ok") is False and "reason" in doc):
                problems.append("a failure's JSON lacks ok=false and a reason")
        except (UnicodeDecodeError, ValueError) as e:
            problems.append(f"--json stdout is not one UTF-8 JSON document ({e})")
    elif as_json and r.returncode != 0:
        problems.append("--json failure printed no JSON")
    if not as_json:
        if (p := printable_text(r.stdout)):
            problems.append(f"stdout: {p}")
    if (p := printable_text(r.stderr)):
        problems.append(f"stderr: {p}")
    new = set(os.listdir(b".")) - before
    if r.returncode != 0 and new:
        problems.append(f"a failed run left {sorted(new)!r}")
    for n in new:  # what a successful run wrote is not an input of the next
        (shutil.rmtree if os.path.isdir(n) else os.remove)(n)
    if problems:
        failures += 1
        print(f"trial {trial}: {argv!r}\n  {'; '.join(problems)}\n  stderr: {r.stderr[-300:]!r}")
rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
limit = float(os.environ.get("KVTOOL_FUZZ_CLI_RSS_MIB", MAX_RSS_MIB))
if rss_mib > limit:
    print(f"a run used {rss_mib:.0f} MiB (limit {limit:.0f})")
    failures += 1
print(f"fuzz_cli: {trials} trials (seed {seed}), {failures} failed, largest run {rss_mib:.0f} MiB")
sys.exit(1 if failures else 0)
