"""The h5py writer printed in formats/kvdump-v1.md ("Writing a dump with h5py") is extracted from
the page, run as a user would copy it, and its dumps are checked with `kvtool verify` and
`kvtool inspect --json`: the snippet in the normative page cannot rot unnoticed."""
import hashlib
import os
import re

import numpy as np

from common import KVTOOL, check, run_json, workdir

SOURCE = os.environ.get("KVTOOL_SOURCE", os.path.join(os.path.dirname(__file__), "..", ".."))
PAGE = os.path.join(SOURCE, "formats", "kvdump-v1.md")


def extract_snippet():
    """The one fenced ```python block of the page that defines write_kvdump."""
    text = open(PAGE, encoding="utf-8").read()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    found = [b for b in blocks if "def write_kvdump(" in b]
    check(len(found) == 1, f"{PAGE}: expected one ```python block defining write_kvdump, found {len(found)}")
    return found[0]


snippet = extract_snippet()
ns = {}
exec(compile(snippet, PAGE + " (h5py snippet)", "exec"), ns)
write_kvdump = ns["write_kvdump"]

L, H, Hq, T, d, Tq = 2, 2, 4, 48, 16, 8
rng = np.random.default_rng(7)
k = rng.standard_normal((L, H, T, d)).astype(np.float32)
v = rng.standard_normal((L, H, T, d)).astype(np.float32)
q = rng.standard_normal((L, Hq, Tq, d)).astype(np.float32)
k[1, 1, 5, 3] = 9.5  # a known maximum that f16 and bf16 both represent exactly
sha = hashlib.sha256(b"format-snippet-model").hexdigest()
q_map = [h // (Hq // H) for h in range(Hq)]

with workdir() as w:
    for dtype in ("float16", "float32", "bfloat16"):
        p = os.path.join(w, dtype + ".h5")
        # Called as the page documents it, with every optional part filled in.
        write_kvdump(p, k, v, sha, q_map, tenant="snippet-tenant", dtype=dtype, q=q,
                     q_positions=np.arange(T - Tq, T), tokens=np.arange(T))
        ok = run_json(KVTOOL, "verify", p, "--json")
        check(ok.get("ok") is True, f"verify {dtype}: {ok}")
        info = run_json(KVTOOL, "inspect", p, "--json")
        g = info["geometry"]
        want = {"layers": L, "kv_heads": H, "tokens": T, "head_dim": d, "q_heads": Hq, "q_tokens": Tq,
                "dtype": dtype}
        for key, val in want.items():
            check(g.get(key) == val, f"inspect {dtype}: geometry {key} = {g.get(key)!r}, expected {val!r}")
        mk = info["health_summary"]["max_abs_k"]
        check(abs(mk - 9.5) < 1e-6, f"inspect {dtype}: max |K| {mk}, expected 9.5 (the data did not round-trip)")
        print(f"ok: snippet dump {dtype}: verify ok, geometry {g['layers']}x{g['kv_heads']}x{g['tokens']}x"
              f"{g['head_dim']}, max|K| {mk}")

    # The snippet's frontier argument reaches the file: a frontier past T is refused.
    p = os.path.join(w, "frontier.h5")
    write_kvdump(p, k, v, sha, q_map, frontier=T + 1)
    e = run_json(KVTOOL, "verify", p, "--json", expect=1)
    check(e.get("reason") == "FRONTIER_BEYOND_T", f"frontier past T: {e}")

print("ok: formats/kvdump-v1.md h5py snippet")
