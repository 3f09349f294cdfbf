#!/usr/bin/python3
"""The adversarial corpus test: generates the corpus (generate.py) into a temporary
directory and runs `kvtool verify`, `inspect`, `query`, `eval` and `load` on every file of it.
Each run must exit with a code the case accepts (1: validation failed, reason printed; man/kvtool.1
EXIT STATUS), print the reason code the case expects and a message holding the case's fragment (the
sentence of the one check the case was made for: generic reasons are raised at dozens of places),
end without a signal, stay under a peak RSS and a wall time.

Environment: KVTOOL (the binary; default build/bin/kvtool), KVTOOL_ADV_RSS_MB (default 256),
KVTOOL_ADV_SECONDS (default 30), KVTOOL_ADV_KEEP (keep the corpus in this directory),
KVTOOL_ADV_ONLY (comma-separated case names). Prints a table: case, command, exit, reason, RSS,
seconds; exits 1 when any run fails.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KVTOOL = os.environ.get("KVTOOL", os.path.join(HERE, "..", "..", "build", "bin", "kvtool"))
RSS_MB = float(os.environ.get("KVTOOL_ADV_RSS_MB", "256"))
SECONDS = float(os.environ.get("KVTOOL_ADV_SECONDS", "30"))
REASON_RE = re.compile(r'"reason"\s*:\s*"([A-Z0-9_]+)"|error \[([A-Z0-9_]+)\]')
# The sentence: a JSON "message" (--json) or the rest of the "kvtool: error [REASON]: " line.
MESSAGE_RE = re.compile(r'"message"\s*:\s*("(?:[^"\\]|\\.)*")|error \[[A-Z0-9_]+\]: ([^\n]*)')


def measure(argv):
    """Runs argv; returns (exit code or -signal, stdout+stderr, peak RSS in MB, seconds)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > SECONDS:
                os.killpg(p.pid, signal.SIGKILL)
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        p.returncode = 0  # reaped here, not by Popen
        seconds = time.monotonic() - t0
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return code, text, usage.ru_maxrss / 1024.0, seconds


def commands(case, good):
    """The five commands on a case: an artifact with the good dump, or a good artifact with a dump."""
    pq = good["artifacts"]["pq"]
    if case["type"] == "artifact":
        art, dump = case["file"], good["dump"]
        # verify without --source: the structure and the binding's own consistency (finding 14) must
        # be rejected without a dump to compare with.
        runs = [("verify", ["verify", art] + (["--source", dump] if case["exits"] == [0] else [])),
                ("inspect", ["inspect", art])]
    else:
        art, dump = pq, case["file"]
        runs = [("verify", ["verify", dump]), ("inspect", ["inspect", dump])]
    position = str(good["position"])
    runs += [
        ("query", ["query", art, "--source", dump, "--layer", "0", "--q-head", "0", "--position", position]),
        ("eval", ["eval", art, "--source", dump]),
        ("load", ["load", art, "--source", dump, "--device", "cpu"]),
    ]
    if case["type"] == "dump":  # builds apply verify's dump validation (finding 13)
        runs.append(("build", ["build", "pq", dump, "-o", os.path.join(good["tmp"], "out.kvi"), "-q", "-b", "4",
                               "--iters", "2", "--threads", "1"]))
    return [(name, [KVTOOL] + argv + ["--json"] * (name != "build")) for name, argv in runs]


def message_of(text):
    m = MESSAGE_RE.search(text)
    if not m:
        return ""
    return json.loads(m.group(1)) if m.group(1) else m.group(2)


def judge(case, command, code, text, rss, seconds):
    """'ok' or what is wrong with one run."""
    m = REASON_RE.search(text)
    reason = (m.group(1) or m.group(2)) if m else ""
    problems = []
    if code > 0 and case.get("reason"):
        if reason != case["reason"]:
            problems.append("reason %s, expected %s" % (reason or "none", case["reason"]))
        message = message_of(text)
        if case["message"] not in message:
            problems.append("message %r lacks %r" % (message[:200], case["message"]))
    if seconds >= SECONDS:
        problems.append("timeout (killed after %.0f s)" % SECONDS)
    elif code < 0:
        problems.append("signal %d" % -code)
    elif code not in (case.get("inspect_exits", case["exits"]) if command == "inspect" else case["exits"]):
        problems.append("exit %d" % code)
    if code > 0 and not reason:
        problems.append("no reason")
    if rss > RSS_MB:
        problems.append("RSS %.0f MB" % rss)
    return reason, ", ".join(problems) or "ok"


def main():
    keep = os.environ.get("KVTOOL_ADV_KEEP")
    tmp = keep or tempfile.mkdtemp(prefix="kvtool-adv-")
    if not os.path.exists(os.path.join(tmp, "cases.json")):
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "generate.py"), KVTOOL, tmp], check=True)
    spec = json.load(open(os.path.join(tmp, "cases.json")))
    good = dict(dump=spec["dump"], artifacts=spec["artifacts"], tmp=tmp, position=159)
    only = set(filter(None, os.environ.get("KVTOOL_ADV_ONLY", "").split(",")))
    failed = []
    print("%-34s %-8s %5s %-26s %8s %7s  %s" % ("case", "command", "exit", "reason", "RSS MB", "seconds", "result"))
    # Controls: the untouched dump and artifacts must pass every command, or the cases below would
    # fail for some other reason than the one each was made for.
    controls = [dict(name="good-" + k, file=a, type="artifact", finding="-", exits=[0]) for k, a in good["artifacts"].items()]
    for case in controls + spec["cases"]:
        if only and case["name"] not in only and case["finding"] != "-":
            continue
        for name, argv in commands(case, good):
            code, text, rss, seconds = measure(argv)
            reason, verdict = judge(case, name, code, text, rss, seconds)
            print("%-34s %-8s %5d %-26s %8.0f %7.2f  %s" % (case["name"], name, code, reason, rss, seconds, verdict),
                  flush=True)
            if verdict != "ok":
                failed.append((case["name"], name, case["finding"], verdict))
    print("\n%d failing runs" % len(failed))
    for name, cmd, finding, verdict in failed:
        print("FAIL %s %s (finding %s): %s" % (name, cmd, finding, verdict))
    if not keep:
        subprocess.run(["rm", "-rf", tmp])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
