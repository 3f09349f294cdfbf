"""A small kvi v1 reader and re-packer (formats/kvi-v1.md), for tests and fuzz seeds only.

`read` splits an artifact into its manifest (floats kept as the exact text the writer chose, so a
re-packed manifest differs from the original only where a test changes it) and its raw sections.
`write` lays out a new artifact from a manifest and raw sections: sections stored uncompressed
(codec "none"), every section SHA-256, raw_size, offset, the params digest, the manifest digest and
the footer recomputed, so that only what the caller changed is wrong.
"""

import hashlib
import json
import struct

MAGIC = b"KVI1"
ALIGN = 64
DTYPE_SIZE = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i32": 4, "i64": 8, "f16": 2, "f32": 4}


class RawNumber(str):
    """A JSON number kept as its original text (canonical form is the writer's business)."""


def parse_json(text):
    return json.loads(text, parse_float=RawNumber)


def canonical(value):
    """Canonical JSON: sorted keys, no whitespace, numbers as given (RawNumber) or shortest."""
    if isinstance(value, RawNumber):
        return str(value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float, str)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-8"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v) for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    raise TypeError(type(value))


def _pad(n):
    return (-n) % ALIGN


def read(path):
    """Returns (manifest, sections): sections is a list of [entry, raw bytes] in file order."""
    data = open(path, "rb").read()
    footer = data[-80:]
    m_off, m_size, _s_off, _s_size = struct.unpack_from("<4Q", footer, 0)
    manifest = parse_json(data[m_off : m_off + m_size].decode("utf-8"))
    sections = []
    for e in manifest["sections"]:
        stored = data[e["offset"] : e["offset"] + e["stored_size"]]
        if e["codec"] == "zstd":
            raise ValueError("build the seeds with --zstd-level 0")
        sections.append([dict(e), stored])
    return manifest, sections


def write(path, manifest, sections, fix_params_digest=True, manifest_text=None, raw_section=None):
    """Writes an artifact. `sections`: list of [entry, raw bytes]; entries keep their name, dtype,
    shape, layer and kv_head; the rest is recomputed. `manifest_text` replaces the serialised
    manifest (bytes) when given; `raw_section` = (entry, stored bytes) appends a section stored as
    given (a zstd frame, say) whose entry the caller fills in except for offset."""
    out = bytearray(64)
    entries = []
    for entry, raw in sections:
        e = dict(entry)
        e["codec"] = "none"
        e["offset"] = len(out)
        e["stored_size"] = len(raw)
        e["raw_size"] = len(raw)
        e["sha256"] = hashlib.sha256(raw).hexdigest()
        out += raw
        out += bytes(_pad(len(out)))
        entries.append(e)
    if raw_section is not None:
        e, stored = raw_section
        e = dict(e)
        e["offset"] = len(out)
        out += stored
        out += bytes(_pad(len(out)))
        entries.append(e)
    m = dict(manifest)
    m["sections"] = entries
    if fix_params_digest and isinstance(m.get("params"), dict):
        m["params_digest"] = hashlib.sha256(canonical(m["params"]).encode("utf-8")).hexdigest()
    text = manifest_text if manifest_text is not None else canonical(m).encode("utf-8")
    m_off = len(out)
    out += text  # unsigned: the footer follows the manifest directly (what ArtifactWriter writes)
    total = len(out) + 80
    footer = struct.pack("<4Q", m_off, len(text), 0, 0) + hashlib.sha256(text).digest()
    footer += struct.pack("<IHH", 80, 1, 0) + bytes(4) + MAGIC
    out += footer
    out[0:24] = MAGIC + struct.pack("<HHIIQ", 1, 0, 0, 64, total)
    with open(path, "wb") as f:
        f.write(out)
    return path
