#!/usr/bin/env bash
# The needle tasks (tests/models/needles.py) and their report (needle_report.py):
# deterministic for a seed; each task holds its fact (multivalue: its 4 facts of one key) in the
# document, its question at "ask" and the value (values) at "answer"; and the report runs end to end (GGUF conversion, dumps, builds,
# eval-decode --answer) on a shared character-level model (cheaders: 512-token context).
source "${KVTOOL_SOURCE:?}/tests/cli/lib.sh"
HERE=$KVTOOL_SOURCE/tests/models
PY=/usr/bin/python3
M=$SHARED/models
[ -e "$M/cheaders.bin" ] || skip "no $M/cheaders.bin"
[ -d /usr/include ] || skip "no /usr/include (the tasks' text)"
$PY "$HERE/needles.py" --out a --contexts 480,1024 --depths 0.2,0.8 >/dev/null || fail "needles.py"
$PY "$HERE/needles.py" --out b --contexts 480,1024 --depths 0.2,0.8 >/dev/null || fail "needles.py again"
diff -r a b >/dev/null || fail "needles.py is not deterministic for its seed"
# A task depends on its seed, kind, context and depth only, not on what else the run generated.
$PY "$HERE/needles.py" --out c --contexts 1024 --depths 0.8 --kinds multikey >/dev/null || fail "needles.py, one task"
cmp -s a/multikey-1024-80.json c/multikey-1024-80.json || fail "a task changed with the other tasks of its run"
$PY - a <<'EOF2' || fail "the tasks"
import glob, json, sys
names = sorted(glob.glob(sys.argv[1] + "/*-*.json"))
tasks = [n for n in names if not n.endswith(".ids.json")]
assert len(tasks) == 12, tasks
for n in tasks:
    t = json.load(open(n))
    ids = t["token_ids"]
    assert len(ids) == t["context"] and ids[0] == 1, (n, len(ids))
    text = bytes(ids[1:]).decode("ascii")
    a0, a1 = t["answer"]
    assert bytes(ids[a0:a1]).decode() == t["value"], n
    assert bytes(ids[t["ask"]:a0]).decode() == "/* ask %s = " % t["key"], n
    values = t["value"].split(" ")
    assert len(values) == (4 if t["kind"] == "multivalue" else 1), n
    last = -1
    for v in values:  # each in the document, before the question, in the answer's order
        at = text.find("/* fact %s = %s */" % (t["key"], v))
        assert last < at < t["ask"] - 1, n
        last = at
    assert text.count("/* fact %s = " % t["key"]) == len(values), n
    assert json.load(open(n[:-5] + ".ids.json")) == ids, n
EOF2
$PY "$HERE/needle_report.py" --kvtool "$KVTOOL" --work r --model "$M/cheaders.bin" --tokenizer "$M/tok128c.bin" \
  --contexts 480 --depths 0.5 --kinds single,multikey --variant pq --variant clusterkv --budgets 0.05 >table.md ||
  fail "needle_report.py"
cat table.md
grep -q "^| 480 | pq | 0.05 | " table.md || fail "the report has no pq row"
# Each build's baselines have its row count: the top-k, window and heavy-hitter columns are filled.
grep "^| 480 | clusterkv | 0.05 | " table.md | grep -Eq "\| [0-9]+, [0-9.e-]+ \| [0-9]+, [0-9.e-]+ \| [0-9]+, [0-9.e-]+ \|$" ||
  fail "the clusterkv row lacks its baselines"
# needle_rows.py on the report's files: one line per answer step, layer and query head.
$PY "$HERE/needle_rows.py" --kvtool "$KVTOOL" --task r/tasks-7/single-480-50.json --dump r/single-480-50.h5 \
  --artifact r/single-480-50.pq.kvi --budget 0.05 >rows.txt || fail "needle_rows.py"
want=$($PY -c "import h5py, json, sys; t = json.load(open(sys.argv[1])); q = h5py.File(sys.argv[2])['kv/q']
print((t['answer'][1] - t['answer'][0]) * q.shape[0] * q.shape[1])" r/tasks-7/single-480-50.json r/single-480-50.h5)
[ "$(grep -cE '^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ +(yes|no)$' rows.txt)" = "$want" ] ||
  fail "needle_rows.py printed $(wc -l <rows.txt) lines, not a header and $want rows"
finish
