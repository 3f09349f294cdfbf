#!/usr/bin/env python3
"""Writes (or with --check, compares) the REASONS section of man/kvtool.1 from the one table of
reason codes, lib/format/include/kvtool/reasons.def. tests/cli/test_basics.sh runs --check and
also compares the table with `kvtool reasons --json`."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
table = root / "lib/format/include/kvtool/reasons.def"
page = root / "man/kvtool.1"
EXIT = {"invalid": 1, "usage": 2, "io": 3, "internal": 4}


def reasons():
    rows = re.findall(r'^KVT_REASON\((\w+), (\w+), "((?:[^"\\]|\\.)*)"\)$', table.read_text(), re.M)
    return [(name, EXIT[cls], meaning) for name, cls, meaning in rows]


def section():
    out = [".SH REASONS", "Each failure carries a stable reason code."]
    for name, code, meaning in reasons():
        out += [".TP", f'.BR {name} " (exit {code})"', meaning.replace("-", "\\-")]
    return "\n".join(out) + "\n"


def main():
    text = page.read_text()
    start, end = text.index(".SH REASONS\n"), text.index(".SH EXAMPLES\n")
    new = text[:start] + section() + text[end:]
    if sys.argv[1:] == ["--check"]:
        if new != text:
            sys.exit("man/kvtool.1: the REASONS section differs from reasons.def (run man/reasons.py)")
        return
    if sys.argv[1:] == ["--json"]:
        import json
        print(json.dumps([{"reason": n, "exit_code": c, "meaning": m} for n, c, m in reasons()]))
        return
    page.write_text(new)


main()
