"""Manifests of committed fixtures and of freshly written artifacts validate against the JSON Schema."""
import json
import os

import jsonschema

from common import BIN, KVTOOL, check, run, run_json, workdir

src = os.environ.get("KVTOOL_SOURCE", ".")
schema = json.load(open(os.path.join(src, "manifests/kvi-manifest-v1.schema.json")))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
v.validate(json.load(open(os.path.join(src, "manifests/example-container-test.json"))))
for name in ("container-test.kvi", "container-test-signed.kvi"):
    v.validate(run_json(KVTOOL, "inspect", os.path.join(src, "fixtures", name), "--json")["manifest"])
pinned = os.path.join(src, "fixtures", "pinned")  # one artifact of every kind, clusterkv also with i8 centroids
for name in sorted(n for n in os.listdir(pinned) if n.endswith(".kvi")):
    v.validate(run_json(KVTOOL, "inspect", os.path.join(pinned, name), "--json")["manifest"])
with workdir() as w:
    d, a = os.path.join(w, "d.h5"), os.path.join(w, "a.kvi")
    run(KVTOOL, "synth", "--layers", 1, "--kv-heads", 1, "--q-heads", 2, "--head-dim", 8, "--tokens", 20, "--seed", 1, "-o", d, "-q")
    run(os.path.join(BIN, "kvtool-testgen"), d, "-o", a)
    m = run_json(KVTOOL, "inspect", a, "--json")["manifest"]
    v.validate(m)
    bad = dict(m, semantics="keys")
    check(not v.is_valid(bad), "schema must reject other semantics")
print("ok")
