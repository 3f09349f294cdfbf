#!/usr/bin/python3
"""The decode gate of test_decode_quality.sh: decode_gate.py REPORT.json NAME [--gap KIND ...]

REPORT is `kvtool eval-decode ... --baseline window --baseline heavy --baseline topk --json`.
For every artifact row: KL at most the better floor's (window or static heavy hitters of the same
row count) and top-1 agreement at least the better floor's less one step. Prints every row with
its floors and the exact top-k beside it; exits 1 when a gate fails. A kind named by --gap is a
measured gap: gated against the heavy-hitter floor only, and it fails when the kind meets the full
gate (the gap closed: take it off the list). pq and clusterkv are also held to docs/quality.md's
aim: KL within 2x of the exact top-k's of the same row count.
"""
import json
import sys

FLOORS = ("window", "heavy")
WITHIN_TOPK = {"pq": 2.0, "clusterkv": 2.0}  # docs/reports/quality-runs.md, "What the numbers say": the aim at 10 %


def main():
    report, name = json.load(open(sys.argv[1])), sys.argv[2]
    gaps = [sys.argv[i + 1] for i in range(3, len(sys.argv) - 1) if sys.argv[i] == "--gap"]
    rows, failed = report["results"], []
    arts = [r for r in rows if r["kind"] not in FLOORS + ("topk",)]
    for a in arts:
        base = {r["kind"]: r for r in rows
                if r["artifact"] == a["artifact"] and r["setting"] == a["setting"] and r["kind"] in FLOORS + ("topk",)}
        missing = [k for k in FLOORS + ("topk",) if k not in base]
        if missing:
            failed.append("%s %s: no %s baseline" % (a["kind"], a["setting"], ", ".join(missing)))
            continue
        floor_kl = min(base[k]["mean_kl"] for k in FLOORS)
        floor_top1 = max(base[k]["top1_agreement"] for k in FLOORS)
        step = 1.0 / a["steps"]
        ok_kl = a["mean_kl"] <= floor_kl
        ok_top1 = a["top1_agreement"] >= floor_top1 - step - 1e-12
        if a["kind"] in gaps:
            if ok_kl and ok_top1:
                failed.append("%s %s: the gap closed (it meets the full gate): remove --gap %s" % (
                    name, a["kind"], a["kind"]))
            floor_kl, floor_top1 = base["heavy"]["mean_kl"], base["heavy"]["top1_agreement"]
            ok_kl = a["mean_kl"] <= floor_kl
            ok_top1 = a["top1_agreement"] >= floor_top1 - step - 1e-12
        aim = WITHIN_TOPK.get(a["kind"])
        ok_aim = not aim or a["mean_kl"] <= aim * base["topk"]["mean_kl"]
        print("  %-13s %-9s %-9s sel %.3f  KL %.4f (floor %.4f: window %.4f heavy %.4f; topk %.4f)  "
              "top-1 %.3f (floor %.3f)  %s" % (
                  name, a["kind"], a["setting"], a["selected_fraction"], a["mean_kl"], floor_kl,
                  base["window"]["mean_kl"], base["heavy"]["mean_kl"], base["topk"]["mean_kl"],
                  a["top1_agreement"], floor_top1,
                  ("ok" if ok_kl and ok_top1 and ok_aim else "FAIL") + (" (gap: heavy floor only)" if a["kind"] in gaps else "")))
        if not ok_kl:
            failed.append("%s %s %s: KL %.4f above the floor's %.4f" % (name, a["kind"], a["setting"], a["mean_kl"],
                                                                       floor_kl))
        if not ok_aim:
            failed.append("%s %s %s: KL %.4f above %gx the exact top-k's %.4f" % (
                name, a["kind"], a["setting"], a["mean_kl"], aim, base["topk"]["mean_kl"]))
        if not ok_top1:
            failed.append("%s %s %s: top-1 %.3f below the floor's %.3f less one step" % (
                name, a["kind"], a["setting"], a["top1_agreement"], floor_top1))
    if not arts:
        failed.append("%s: no artifact rows" % name)
    for f in failed:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
