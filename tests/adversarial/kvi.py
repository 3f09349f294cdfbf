"""A small kvi v1 reader and re-packer (formats/kvi-v1.md), for tests and fuzz seeds only.

`read` splits an artifact into its manifest (floats kept as the exact text the writer chose, so a
re-packed manifest differs from the original only where a test changes it) and its raw sections.
`write` lays out a new artifact from a manifest and raw sections: sections stored uncompressed
(codec "none"), every section SHA-256, raw_size, offset, the params digest, the manifest digest and
the footer recomputed, so that only what the caller changed is wrong.
"""

import ctypes
import ctypes.util
import hashlib
import json
import struct

MAGIC = b"KVI1"
ALIGN = 64
DTYPE_SIZE = {"u8": 1, "i8": 1, "u16": 2, "u32": 4, "u64": 8, "i32": 4, "i64": 8, "f16": 2, "f32": 4}


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


_ZSTD = None


def zstd_decompress(frame, raw_size):
    """Decodes one zstd frame with the reference libzstd (ctypes; Debian's libzstd1, which kvtool
    links too, but called here without any kvtool code). Returns the bytes, or None when libzstd
    reports an error or a size other than raw_size."""
    global _ZSTD
    if _ZSTD is None:
        _ZSTD = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
        _ZSTD.ZSTD_decompress.restype = ctypes.c_size_t
        _ZSTD.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        _ZSTD.ZSTD_isError.restype = ctypes.c_uint
        _ZSTD.ZSTD_isError.argtypes = [ctypes.c_size_t]
    out = ctypes.create_string_buffer(max(raw_size, 1))
    n = _ZSTD.ZSTD_decompress(out, raw_size, bytes(frame), len(frame))
    if _ZSTD.ZSTD_isError(n) or n != raw_size:
        return None
    return out.raw[:raw_size]


_DELTA_DTYPES = {"u8": "<u1", "u16": "<u2", "u32": "<u4", "u64": "<u8"}


def undelta(raw, dtype):
    """Codec "zstd-delta" after the zstd frame is decoded: each element is stored minus the one
    before it, modulo 2**bits (formats/kvi-v1.md); a running sum in the element's own unsigned type
    (numpy wraps it) gives the values back."""
    import numpy as np

    return np.frombuffer(raw, dtype=_DELTA_DTYPES[dtype]).cumsum(dtype=_DELTA_DTYPES[dtype]).tobytes()


def decode(entry, stored):
    """The raw bytes of a stored section (any codec), or None when the zstd frame does not decode."""
    if entry["codec"] == "none":
        return bytes(stored)
    raw = zstd_decompress(stored, entry["raw_size"])
    if raw is not None and entry["codec"] == "zstd-delta":
        raw = undelta(raw, entry["dtype"])
    return raw


def footer(data):
    """(manifest offset, manifest size, signature offset, signature size, manifest SHA-256)."""
    m_off, m_size, s_off, s_size = struct.unpack_from("<4Q", data, len(data) - 80)
    return m_off, m_size, s_off, s_size, data[len(data) - 48 : len(data) - 16]


def _pad(n):
    return (-n) % ALIGN


def read(path, decompress=False):
    """Returns (manifest, sections): sections is a list of [entry, raw bytes] in file order. zstd
    sections are refused unless `decompress` (then decoded with libzstd)."""
    data = open(path, "rb").read()
    m_off, m_size = footer(data)[:2]
    manifest = parse_json(data[m_off : m_off + m_size].decode("utf-8"))
    sections = []
    for e in manifest["sections"]:
        stored = data[e["offset"] : e["offset"] + e["stored_size"]]
        if e["codec"] != "none":
            if not decompress:
                raise ValueError("build the seeds with --zstd-level 0")
            stored = decode(e, stored)
            if stored is None:
                raise ValueError("section %s does not decompress" % e["name"])
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
    tail = struct.pack("<4Q", m_off, len(text), 0, 0) + hashlib.sha256(text).digest()
    tail += struct.pack("<IHH", 80, 1, 0) + bytes(4) + MAGIC
    out += tail
    out[0:24] = MAGIC + struct.pack("<HHIIQ", 1, 0, 0, 64, total)
    with open(path, "wb") as f:
        f.write(out)
    return path
