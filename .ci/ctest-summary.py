#!/usr/bin/python3
"""Prints a one-paragraph summary of a ctest JUnit report: counts, and every skipped test with the
reason it printed (a skip is a skip: ctest marks SKIP_RETURN_CODE 77 as "Skipped", not "Passed")."""
import sys
import xml.etree.ElementTree as ET

def main(path, label):
    root = ET.parse(path).getroot()
    cases = root.iter("testcase")
    passed, failed, skipped = [], [], []
    for c in cases:
        status = c.get("status", "")
        if c.find("skipped") is not None or status == "notrun" and c.find("failure") is None:
            out = (c.findtext("system-out") or "").strip().splitlines()
            reason = next((l for l in reversed(out) if "skip" in l.lower()), out[-1] if out else "")
            skipped.append((c.get("name"), reason.strip()))
        elif c.find("failure") is not None or status in ("fail", "failed"):
            failed.append(c.get("name"))
        else:
            passed.append(c.get("name"))
    print(f"{label}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    for name, reason in skipped:
        print(f"  skipped: {name}" + (f" — {reason}" if reason else ""))
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "ctest"))
