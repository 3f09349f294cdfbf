"""Helpers for the interop tests: locate kvtool and the shared models, run commands."""
import json
import os
import subprocess
import sys
import tempfile

KVTOOL = os.environ["KVTOOL"]
BIN = os.environ.get("KVTOOL_BIN_DIR", os.path.dirname(KVTOOL))
SHARED = os.environ.get("KVTOOL_SHARED", "../shared")
MODELS = os.path.join(SHARED, "models")


def run(*args, expect=0):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"FAIL: {' '.join(map(str, args))} exited {p.returncode} (expected {expect})\n{p.stderr}")
    return p


def run_json(*args, expect=0):
    return json.loads(run(*args, expect=expect).stdout)


def workdir():
    return tempfile.TemporaryDirectory(prefix="kvtool-interop-")


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)
