#!/usr/bin/python3
"""The adversarial corpus: digest-correct but structurally invalid artifacts of every
kind, resource bombs and lying dumps (formats/kvi-v1.md, formats/kinds-v1.md, formats/kvdump-v1.md).

Usage: generate.py KVTOOL OUTDIR. Builds a small synthetic dump and one artifact of every kind with
KVTOOL, then writes OUTDIR/good/ (the dump and the artifacts) and OUTDIR/cases/ (one file per case)
and OUTDIR/cases.json: [{"name", "file", "type": "artifact" | "dump", "finding", "what",
"exits", "reason", "message"}]. "exits" lists the accepted exit codes (1 unless the case says
otherwise); a run that fails must print "reason" and a message containing "message": a fragment
that only the one check the case was made for prints (generic reasons such as BAD_LAYOUT and
BAD_MANIFEST are raised in dozens of places, so the reason alone would not say which check fired).
"""

import copy
import hashlib
import json
import os
import struct
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvi  # noqa: E402

KINDS = ["pq", "clusterkv", "lsh", "squeeze"]
# Small enough to build in a second, large enough that no part is dense (fuzz/make_seeds.py).
BUILD = {
    "pq": ["-b", "4", "-m", "2", "--iters", "4", "--codebook-dtype", "f32"],  # the mutations read f32 codebooks
    "clusterkv": ["--tokens-per-cluster", "16", "--iters", "4", "--centroid-dtype", "f32"],
    "lsh": ["-K", "4", "-L", "4"],
    "squeeze": ["--observation-window", "8", "--percent-clusters", "10", "--iters", "4"],
}
# Queries at rows 136-159; the artifacts cover [0, 150), so eval has queries beyond the coverage
# and squeeze calibrates on the 8 before it.
DUMP = dict(layers=2, kv_heads=1, q_heads=2, head_dim=8, tokens=160, query_count=24)
PREFIX = 150


def run(*args):
    subprocess.run([str(a) for a in args], check=True, stdout=subprocess.DEVNULL)


def build_good(kvtool, good):
    os.makedirs(good, exist_ok=True)
    dump = os.path.join(good, "dump.h5")
    d = DUMP
    run(kvtool, "synth", "--layers", d["layers"], "--kv-heads", d["kv_heads"], "--q-heads", d["q_heads"],
        "--head-dim", d["head_dim"], "--tokens", d["tokens"], "--seed", 1, "--query-count", d["query_count"],
        "-o", dump, "-q")
    arts = {}
    for kind in KINDS:
        arts[kind] = os.path.join(good, kind + ".kvi")
        run(kvtool, "build", kind, dump, "-o", arts[kind], "-q", "--zstd-level", 0, "--threads", 1, "--sink", 4,
            "--local", 8, "--prefix", PREFIX, *BUILD[kind])
    # clusterkv with i8 centroids (the default dtype): the cases below re-pack its exponent sections.
    arts["clusterkv-i8"] = os.path.join(good, "clusterkv-i8.kvi")
    run(kvtool, "build", "clusterkv", dump, "-o", arts["clusterkv-i8"], "-q", "--zstd-level", 0, "--threads", 1,
        "--sink", 4, "--local", 8, "--prefix", PREFIX, *BUILD["clusterkv"][:-1], "i8")
    return dump, arts


def build_extra(kvtool, good, dump, arts):
    """zstd-compressed artifacts of every kind (level 3; some sections stay raw when zstd does not
    make them smaller) and a signed copy of the pq artifact."""
    zarts = {}
    for kind in KINDS:
        zarts[kind] = os.path.join(good, kind + "-zstd.kvi")
        run(kvtool, "build", kind, dump, "-o", zarts[kind], "-q", "--zstd-level", 3, "--threads", 1, "--sink", 4,
            "--local", 8, "--prefix", PREFIX, *BUILD[kind])
    key = os.path.join(good, "sig.pem")
    run(kvtool, "keygen", "-o", key)
    signed = os.path.join(good, "pq-signed.kvi")
    with open(arts["pq"], "rb") as src, open(signed, "wb") as dst:
        dst.write(src.read())
    run(kvtool, "sign", signed, "--key", key)
    return zarts, signed


class Corpus:
    def __init__(self, out):
        self.dir = os.path.join(out, "cases")
        os.makedirs(self.dir, exist_ok=True)
        self.cases = []

    def add(self, name, type_, finding, what, exits=(1,), inspect_exits=None, reason=None, message=None):
        path = os.path.join(self.dir, name + (".kvi" if type_ == "artifact" else ".h5"))
        assert (reason is None) == (message is None) and (reason or exits == (0,)), name
        self.cases.append(dict(name=name, file=path, type=type_, finding=finding, what=what, exits=list(exits),
                               inspect_exits=list(inspect_exits or exits), reason=reason, message=message))
        return path


# ---------------------------------------------------------------- artifacts: re-packed structure


def sec(sections, name, layer=0, kv_head=0):
    for s in sections:
        if s[0]["name"] == name and s[0]["layer"] == layer and s[0]["kv_head"] == kv_head:
            return s
    raise KeyError(name)


def u32(values):
    return np.asarray(values, dtype="<u4").tobytes()


def as_u32(raw):
    return np.frombuffer(raw, dtype="<u4").copy()


def repack(corpus, arts, kind, name, finding, what, edit, expect=None, exits=(1,)):
    """Reads the good artifact of `kind`, lets `edit(manifest, sections)` change it, re-packs.
    `expect` = (reason, message fragment)."""
    manifest, sections = kvi.read(arts[kind])
    manifest = copy.deepcopy(manifest)
    edit(manifest, sections)
    reason, message = expect or (None, None)
    kvi.write(corpus.add(name, "artifact", finding, what, exits, reason=reason, message=message), manifest, sections)


def structure_cases(corpus, arts):
    # Controls: re-packed without a change, every command must accept them (exit 0), so a case
    # below fails for its own defect and not for a re-packer the reader disagrees with.
    for kind in KINDS:
        repack(corpus, arts, kind, kind + "-repacked-unchanged", "-", "control: re-packed, nothing changed",
               lambda m, s: None, exits=(0,))

    def drop(name):
        def edit(m, s):
            s.remove(sec(s, name))
        return edit

    def pq_codes_255(m, s):
        x = sec(s, "pq_codes")
        x[1] = bytes([255]) * len(x[1])

    def pq_short(name):
        def edit(m, s):
            x = sec(s, name)
            if name == "pq_codes":  # [n, m] u8: drop the last row, shape left claiming n rows -> relabel
                x[0]["shape"] = [x[0]["shape"][0] - 1, x[0]["shape"][1]]
                x[1] = x[1][: -x[0]["shape"][1]]
            else:  # [m, k, dsub] f32: one centroid fewer per subspace
                mm, k, dsub = x[0]["shape"]
                arr = np.frombuffer(x[1], "<f4").reshape(mm, k, dsub)[:, : k - 1, :]
                x[0]["shape"] = [mm, k - 1, dsub]
                x[1] = arr.tobytes()
        return edit

    repack(corpus, arts, "pq", "pq-no-codes", 1, "pq part (0,0) without its pq_codes section", drop("pq_codes"),
           ("PART_INVALID", "pq part (0, 0) lacks its centroids or codes"))
    repack(corpus, arts, "pq", "pq-no-centroids", 1, "pq part (0,0) without pq_centroids", drop("pq_centroids"),
           ("PART_INVALID", "pq part (0, 0) lacks its centroids or codes"))
    repack(corpus, arts, "pq", "pq-codes-255", 1, "pq codes 255 with 4 bits", pq_codes_255,
           ("CODE_OUT_OF_RANGE", "pq code 255 of row 4 in part (0, 0) is not below 2^4"))
    repack(corpus, arts, "pq", "pq-short-codes", 1, "pq_codes one row short", pq_short("pq_codes"),
           ("SHAPE_MISMATCH", "pq_codes of (0, 0) must be u8 [138, 2]"))
    repack(corpus, arts, "pq", "pq-short-centroids", 1, "pq_centroids one centroid short",
           pq_short("pq_centroids"), ("SHAPE_MISMATCH", "pq_centroids of (0, 0) must be f32 [2, 16, 4]"))

    def lsh_sink(m, s):
        m["params"]["sink"] = 100  # indexed rows [100, 152) no longer what the tables hold

    def lsh_offsets(m, s):
        x = sec(s, "lsh_offsets")
        off = as_u32(x[1])
        off[1] = 0xFFFFFFF0
        x[1] = off.tobytes()

    def lsh_offsets_last(m, s):
        x = sec(s, "lsh_offsets")
        off = as_u32(x[1])
        off[-1] = off[-1] + 1000
        x[1] = off.tobytes()

    def lsh_offsets_past_n(m, s):  # the last table's first bucket runs one id past the table (n + 1)
        x = sec(s, "lsh_offsets")
        off = as_u32(x[1])
        per = len(off) // 4  # 4 tables of buckets + 1 offsets
        assert per * 4 == len(off)
        n = int(off[-1])
        off[3 * per + 1:4 * per - 1] = n + 1
        x[1] = off.tobytes()

    repack(corpus, arts, "lsh", "lsh-bad-sink", 1, "lsh params.sink 100 (tables index other rows)", lsh_sink,
           ("PART_INVALID", "lsh part (0, 0) does not index the 42 rows of its coverage"))
    repack(corpus, arts, "lsh", "lsh-offsets-huge", 1, "lsh bucket offset 0xFFFFFFF0", lsh_offsets,
           ("BUCKET_TABLE_INVALID", "table 0 offsets are not monotone within [0, 138] at bucket 0"))
    repack(corpus, arts, "lsh", "lsh-offsets-past-n", 1, "lsh bucket running past the table's ids", lsh_offsets_past_n,
           ("BUCKET_TABLE_INVALID", "table 3 offsets are not monotone within [0, 138] at bucket 0"))
    repack(corpus, arts, "lsh", "lsh-offsets-end", 1, "lsh last offset past the ids", lsh_offsets_last,
           ("BUCKET_TABLE_INVALID", "table 3 of part (0, 0): offsets run from 0 to 1138, not 0 to 138"))
    repack(corpus, arts, "lsh", "lsh-no-ids", 1, "lsh part without lsh_ids", drop("lsh_ids"),
           ("PART_INVALID", "lsh part (0, 0) lacks section lsh_ids"))

    def ckv_members(value=None, dup=False):
        def edit(m, s):
            x = sec(s, "ckv_members")
            mem = as_u32(x[1])
            if dup:
                mem[1] = mem[0]
            else:
                mem[0] = value
            x[1] = mem.tobytes()
        return edit

    repack(corpus, arts, "clusterkv", "clusterkv-member-out-of-range", 1, "clusterkv member id 10^9",
           ckv_members(10**9), ("MEMBERS_NOT_PARTITION",
                                "cluster 0 of part (0, 0) holds row 1000000000 outside its generation's rows"))
    repack(corpus, arts, "clusterkv", "clusterkv-member-duplicate", 1, "clusterkv member listed twice",
           ckv_members(dup=True), ("MEMBERS_NOT_PARTITION", "members of cluster 0 are not in row order"))
    repack(corpus, arts, "clusterkv", "clusterkv-no-members", 1, "clusterkv part without members",
           drop("ckv_members"), ("PART_INVALID", "part (0, 0) lacks section ckv_members (u32)"))

    def ckv_exponents(value=None, short=False):
        def edit(m, s):
            x = sec(s, "ckv_centroids_exp")
            if short:
                x[0]["shape"] = [x[0]["shape"][0] - 1]
                x[1] = x[1][:-1]
            else:
                x[1] = bytes([value]) * len(x[1])
        return edit

    repack(corpus, arts, "clusterkv-i8", "clusterkv-i8-repacked-unchanged", "-",
           "control: i8 centroids re-packed, nothing changed", lambda m, s: None, exits=(0,))
    repack(corpus, arts, "clusterkv-i8", "clusterkv-i8-no-exponents", 1, "i8 centroids without their exponents",
           drop("ckv_centroids_exp"), ("PART_INVALID", "part (0, 0) lacks section ckv_centroids_exp (i8)"))
    repack(corpus, arts, "clusterkv-i8", "clusterkv-i8-exponent-overflow", 1, "i8 centroid exponents 127 (beyond f32)",
           ckv_exponents(127), ("NON_FINITE", "a centroid of part (0, 0) is not finite"))
    repack(corpus, arts, "clusterkv-i8", "clusterkv-i8-exponents-short", 1, "one i8 centroid exponent too few",
           ckv_exponents(short=True), ("SHAPE_MISMATCH", "centroid exponents of part (0, 0) are not one per cluster"))

    def sq_members(m, s):
        x = sec(s, "sq_fine_members")
        mem = as_u32(x[1])
        mem[1] = mem[0]
        x[1] = mem.tobytes()

    def sq_labels(m, s):
        x = sec(s, "sq_labels")
        lab = as_u32(x[1])
        lab[:] = 0xFFFFFFFF
        x[1] = lab.tobytes()

    def sq_calibration(m, s):
        del m["kind_data"]["parts"][0]["calibration_scores"]

    repack(corpus, arts, "squeeze", "squeeze-members-not-partition", 1, "squeeze fine member listed twice",
           sq_members,
           ("MEMBERS_NOT_PARTITION", "members of fine cluster 0 of part (0, 0) are not in ascending row order"))
    repack(corpus, arts, "squeeze", "squeeze-labels-out-of-range", 1, "squeeze labels 2^32-1", sq_labels,
           ("MEMBERS_NOT_PARTITION", "row 7 of part (0, 0) is listed in cluster 0 but labelled otherwise"))
    repack(corpus, arts, "squeeze", "squeeze-no-calibration-field", 12,
           "squeeze part without calibration_scores", sq_calibration,
           ("BAD_MANIFEST", "squeeze part has no member 'calibration_scores'"))


def binding_cases(corpus, arts):
    def src(field, value):
        def edit(m, s):
            m["source"][field] = value
        return edit

    for kind in KINDS:
        repack(corpus, arts, kind, kind + "-q-heads-500", 2, "source.q_heads 500 with a 2-entry head map",
               src("q_heads", 500), ("BAD_MANIFEST", "q_to_kv_head has 2 entries but there are 500 query heads"))
    repack(corpus, arts, "pq", "head-map-99", 14, "q_to_kv_head entry 99", src("q_to_kv_head", [0, 99]),
           ("BAD_MANIFEST", "q_to_kv_head[1] = 99 is not a kv head in [0, 1)"))
    repack(corpus, arts, "pq", "head-map-minus-5", 14, "q_to_kv_head entry -5", src("q_to_kv_head", [0, -5]),
           ("BAD_MANIFEST", "source binding q_to_kv_head entry -5 is not a kv head number"))
    repack(corpus, arts, "pq", "layers-2-62", 14, "source.layers 2^62", src("layers", 2**62),
           ("BAD_MANIFEST", "the geometry [L=4611686018427387904, H_kv=1, d=8] is outside"))
    repack(corpus, arts, "pq", "tenant-empty", 14, 'tenant ""', src("tenant_namespace", ""),
           ("BAD_MANIFEST", "tenant_namespace '' is empty"))
    repack(corpus, arts, "pq", "tenant-dotdot", 14, 'tenant ".."', src("tenant_namespace", ".."),
           ("BAD_MANIFEST", "tenant_namespace '..' may not be '.' or '..'"))

    def relabel(m, s):
        m["kind"] = "container-test"

    def part_layer_string(m, s):
        m["kind_data"]["parts"][0]["layer"] = "0"

    def params_layers_strings(m, s):
        m["params"]["layers"] = ["0", "1"]

    repack(corpus, arts, "pq", "pq-as-container-test", 14, "pq artifact relabelled container-test", relabel,
           ("PART_INVALID", "section 'pq_centroids' is not a container-test section"))
    repack(corpus, arts, "pq", "part-layer-string", 12, "kind_data part layer as a string", part_layer_string,
           ("BAD_MANIFEST", "kind_data.parts[0].layer is not a 64-bit integer"))
    for kind in KINDS:
        repack(corpus, arts, kind, kind + "-params-layers-strings", 12, "params.layers as strings",
               params_layers_strings, ("BAD_MANIFEST", "params.layers[0] is not a 64-bit integer"))


# ---------------------------------------------------------------- artifacts: resource bombs


def zstd_frame(content_size, blocks):
    """A zstd frame (RFC 8878): 8-byte content size, 128 KiB window, then `blocks` as
    (type, size, payload) with type 0 raw / 1 RLE; the last block is flagged."""
    out = struct.pack("<IBB", 0xFD2FB528, 0xC0, 7 << 3) + struct.pack("<Q", content_size)
    for i, (btype, size, payload) in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        header = last | (btype << 1) | (size << 3)
        out += struct.pack("<I", header)[:3] + payload
    return out


def zeros_sha256(n):
    h, mib = hashlib.sha256(), bytes(1 << 20)
    for _ in range(n >> 20):
        h.update(mib)
    return h.hexdigest()


def bomb_cases(corpus, arts):
    gib = 1 << 30

    def bomb(name, what, stored, raw_size):
        manifest, sections = kvi.read(arts["pq"])
        entry = dict(name="bomb", dtype="u8", shape=[raw_size], layer=0, kv_head=0, codec="zstd",
                     stored_size=len(stored), raw_size=raw_size, sha256="0" * 64)
        kvi.write(corpus.add(name, "artifact", 4, what, reason="DECOMPRESS_FAILED",
                             message="section 'bomb' (layer 0, kv head 0) does not decompress"),
                  manifest, sections, raw_section=(entry, stored))

    # 11 KB: a frame header claiming 1 GiB, then one raw block of 10 KiB and nothing else.
    bomb("zstd-fake-1gib", "zstd frame header claiming 1 GiB in an 11 KB file", zstd_frame(gib, [(0, 10240, bytes(10240))]),
         gib)
    # A real frame: 8192 RLE blocks of 128 KiB = 1 GiB of zeros in 32 KB.
    block = 128 << 10
    rle = zstd_frame(gib, [(1, block, b"\0")] * (gib // block))
    manifest, sections = kvi.read(arts["pq"])
    entry = dict(name="bomb", dtype="u8", shape=[gib], layer=0, kv_head=0, codec="zstd", stored_size=len(rle),
                 raw_size=gib, sha256=zeros_sha256(gib))
    # Its digest is right: the 1 GiB must stream through verify's fixed buffer (bounded RSS) and the
    # artifact then fails only because no pq part owns a section named 'bomb'.
    kvi.write(corpus.add("zstd-rle-1gib", "artifact", 4, "a real 1 GiB RLE zstd frame (section digest right)",
                         reason="PART_INVALID", message="the artifact has sections that belong to no pq part"),
              manifest, sections, raw_section=(entry, rle))

    # A manifest nesting 100,000 arrays (canonical, digest right).
    manifest, sections = kvi.read(arts["pq"])
    manifest = copy.deepcopy(manifest)
    manifest["kind_data"]["deep"] = kvi.RawNumber("[" * 100000 + "]" * 100000)
    kvi.write(corpus.add("manifest-nested-100000", "artifact", 3, "manifest nesting 100,000 arrays",
                         reason="BAD_MANIFEST", message="nests arrays and objects more than 64 levels deep"),
              manifest, sections)


# ---------------------------------------------------------------- artifacts: zstd payloads


def copy_with(src, dst, patches):
    """Copies src to dst with byte patches {offset: bytes}: the manifest and its digest stay as
    they are, so only what a patch touches is wrong."""
    data = bytearray(open(src, "rb").read())
    for off, raw in patches.items():
        data[off : off + len(raw)] = raw
    with open(dst, "wb") as f:
        f.write(data)


def frame_header_size(frame):
    """Frame header length (RFC 8878 3.1.1.1): magic, descriptor, window byte unless single
    segment, dictionary id, content size field."""
    fhd = frame[4]
    single = (fhd >> 5) & 1
    fcs = [single, 2, 4, 8][fhd >> 6]
    return 4 + 1 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3] + fcs


def classify_flips(frame, raw):
    """Flips each payload byte (after the frame and first block headers) until it has found one
    flip that libzstd still decodes to raw_size bytes of other content and one that libzstd
    refuses; returns {"digest": (pos, byte), "decode": (pos, byte)} (positions in the frame)."""
    found = {}
    for pos in range(frame_header_size(frame) + 3, len(frame)):
        for mask in (0x01, 0x80, 0xFF):
            b = frame[pos] ^ mask
            out = kvi.zstd_decompress(frame[:pos] + bytes([b]) + frame[pos + 1 :], len(raw))
            cls = "decode" if out is None else ("digest" if out != raw else None)
            if cls and cls not in found:
                found[cls] = (pos, b)
        if len(found) == 2:
            return found
    raise AssertionError("no payload flip of both kinds found in a %d-byte frame" % len(frame))


def zstd_cases(corpus, zarts):
    """Byte flips inside zstd section payloads. Every command admits an artifact through
    ArtifactReader::verify_sections, which streams each frame into SHA-256 before any section is
    decompressed into memory (lib/runtime/src/kinds.cpp admit_artifact): a flip libzstd still
    decodes is a SECTION_DIGEST, one it refuses is a DECOMPRESS_FAILED."""
    for kind, art in zarts.items():
        corpus.cases.append(dict(name=kind + "-zstd-unchanged", file=art, type="artifact", finding="-",
                                 what="control: zstd-compressed, nothing changed", exits=[0], inspect_exits=[0],
                                 reason=None, message=None))
        manifest, sections = kvi.read(art, decompress=True)
        data = open(art, "rb").read()
        # Every codec the kind's builder writes (lsh: zstd for projections, zstd-delta for ids).
        codecs = {e["codec"] for e, r in sections} - {"none"}
        assert codecs and (kind != "lsh" or "zstd-delta" in codecs), "%s-zstd.kvi has codecs %s" % (kind, codecs)
        for codec in ("zstd", "zstd-delta"):
            entry = next((e for e, r in sections if e["codec"] == codec), None)
            if entry is None:
                continue
            frame = data[entry["offset"] : entry["offset"] + entry["stored_size"]]
            label = "section '%s' (layer %d, kv head %d)" % (entry["name"], entry["layer"], entry["kv_head"])
            flips = classify_flips(frame, kvi.zstd_decompress(frame, entry["raw_size"]))  # the frame's content
            for flip, effect, reason, message in (
                    ("digest", "libzstd decodes other bytes", "SECTION_DIGEST",
                     " does not match its recorded SHA-256"),
                    ("decode", "libzstd refuses the frame", "DECOMPRESS_FAILED", " does not decompress")):
                pos, b = flips[flip]
                copy_with(art, corpus.add("%s-%s-payload-flip-%s" % (kind, codec, flip), "artifact", "i18",
                                          "byte %d of %s's %s frame changed; %s" % (pos, label, codec, effect),
                                          reason=reason, message=label + message),
                          {entry["offset"] + pos: bytes([b])})
        if kind == "pq":  # the frame header's content size one byte short of raw_size
            entry = next(e for e, r in sections if e["codec"] == "zstd")
            frame = data[entry["offset"] : entry["offset"] + entry["stored_size"]]
            label = "section '%s' (layer %d, kv head %d)" % (entry["name"], entry["layer"], entry["kv_head"])
            fcs_at = frame_header_size(frame) - 2
            assert frame[4] >> 6 == 1 and struct.unpack_from("<H", frame, fcs_at)[0] + 256 == entry["raw_size"]
            copy_with(art, corpus.add("pq-zstd-content-size-lie", "artifact", "i18",
                                      "%s's frame header states %d bytes" % (label, entry["raw_size"] - 1),
                                      reason="DECOMPRESS_FAILED",
                                      message=label + " is not a zstd frame that states a content size of %d bytes"
                                      % entry["raw_size"]),
                      {entry["offset"] + fcs_at: struct.pack("<H", entry["raw_size"] - 257)})


# ---------------------------------------------------------------- artifacts: signature block


def signature_cases(corpus, signed):
    """Footer signature offset/size lies on a signed pq artifact (formats/kvi-v1.md §Footer: the
    block sits at the next 64-byte boundary after the manifest and the footer follows it). The
    manifest and its digest are untouched."""
    corpus.cases.append(dict(name="pq-signed-unchanged", file=signed, type="artifact", finding="-",
                             what="control: signed, nothing changed", exits=[0], inspect_exits=[0], reason=None,
                             message=None))
    data = open(signed, "rb").read()
    size = len(data)
    m_off, m_size, s_off, s_size, _ = kvi.footer(data)
    assert s_size == 104 and s_off == m_off + m_size + (-(m_off + m_size)) % 64 and s_off + 104 == size - 80
    at = size - 80 + 16  # footer: signature offset (u64), then signature size (u64)

    def lie(name, what, off, sz):
        msg = "signature offset %d / size %d is not where the format puts it" % (off, sz)
        copy_with(signed, corpus.add(name, "artifact", "i18", what, reason="BAD_LAYOUT", message=msg),
                  {at: struct.pack("<2Q", off, sz)})

    lie("sig-offset-past-eof", "signature offset 4096 bytes past the end of the file", size + 4096, 104)
    lie("sig-size-0", "signature size 0 with the offset kept", s_off, 0)
    lie("sig-overlaps-sections", "signature at offset 64 (the first section)", 64, 104)
    lie("sig-offset-unaligned", "signature offset 8 past the 64-byte boundary", s_off + 8, 104)
    lie("sig-offset-manifest-end", "signature offset at the manifest's end (%d, unaligned)" % (m_off + m_size),
        m_off + m_size, 104)
    lie("sig-shifted-8", "signature offset 8 later and size 8 smaller (the block still ends at the footer)",
        s_off + 8, 96)
    lie("sig-size-into-footer", "signature size 168 (runs into the footer)", s_off, 168)
    lie("sig-size-2-64", "signature size 2^64-1", s_off, 2**64 - 1)
    lie("sig-offset-2-64", "signature offset 2^64-64", 2**64 - 64, 104)
    # 64 more zero bytes of padding before the block, the footer and header sizes following it: only
    # "the next 64-byte boundary after the manifest" is wrong.
    pad = os.path.join(corpus.dir, "sig-extra-padding.kvi")
    copy_with(signed, pad, {at: struct.pack("<2Q", s_off + 64, 104)})
    grown = bytearray(open(pad, "rb").read())
    grown[s_off:s_off] = bytes(64)
    grown[16:24] = struct.pack("<Q", len(grown))
    open(pad, "wb").write(grown)
    corpus.add("sig-extra-padding", "artifact", "i18", "64 zero bytes more between the manifest and the signature",
               reason="BAD_LAYOUT",
               message="signature offset %d / size 104 is not where the format puts it" % (s_off + 64))
    copy_with(signed, corpus.add("sig-footer-cleared", "artifact", "i18", "signature offset and size 0, block kept",
                                 reason="BAD_LAYOUT",
                                 message="has %d bytes between the manifest and the footer"
                                 % (size - 80 - m_off - m_size)),
              {at: struct.pack("<2Q", 0, 0)})
    copy_with(signed, corpus.add("sig-block-magic", "artifact", "i18", "signature block magic KVIX",
                                 reason="BAD_SIGNATURE", message="the signature block is malformed"),
              {s_off + 3: b"X"})
    # The lowest byte of S: S stays below the group order, so the canonical-form check passes and
    # the Ed25519 verification itself must refuse it.
    copy_with(signed, corpus.add("sig-s-flip", "artifact", "i18", "lowest byte of the signature's S changed",
                                 reason="BAD_SIGNATURE", message="does not verify (key id"),
              {s_off + 72: bytes([data[s_off + 72] ^ 1])})


# ---------------------------------------------------------------- dumps


def good_dump_arrays(dump):
    with h5py.File(dump, "r") as f:
        arrays = {k: f["kv"][k][()] for k in f["kv"]}
        attrs = {k: f.attrs[k] for k in f.attrs}
    return arrays, attrs


def write_dump(path, arrays, attrs, chunks=None, shapes=None):
    with h5py.File(path, "w") as f:
        g = f.create_group("kv")
        for name, x in arrays.items():
            if shapes and name in shapes:  # a claimed shape with no data written (chunks unallocated)
                g.create_dataset(name, shape=shapes[name], dtype=x.dtype, chunks=(1, 1) + tuple(shapes[name][2:]))
                continue
            c = chunks if (chunks and x.ndim == 4) else (True if x.ndim == 4 else None)
            g.create_dataset(name, data=x, chunks=c)
        for k, v in attrs.items():
            f.attrs[k] = v


def dump_cases(corpus, dump):
    arrays, attrs = good_dump_arrays(dump)

    def lie(name, finding, what, expect, arrays_=None, attrs_=None, exits=(1,), inspect_exits=None, **kw):
        a = dict(arrays)
        a.update(arrays_ or {})
        t = dict(attrs)
        t.update(attrs_ or {})
        path = corpus.add(name, "dump", finding, what, exits, inspect_exits, reason=expect[0], message=expect[1])
        write_dump(path, a, t, **kw)

    k = arrays["k"]
    L, H, T, d = k.shape
    lie("dump-2-20-layers", 13, "/kv/k, /kv/v and /kv/q claim 2^20 layers (no data stored)",
        ("SHAPE_MISMATCH", "/kv/k has a shape of 2684354560 bytes but the file stores only 0 bytes of it"),
        shapes={"k": (1 << 20, H, T, d), "v": (1 << 20, H, T, d), "q": (1 << 20,) + arrays["q"].shape[1:]})
    q = arrays["q"].copy()
    q[0, 0, 0, 0] = np.nan
    # inspect is a health report of values (it counts NaN/Inf, formats/kvdump-v1.md): it refuses a
    # dump's structure lies, not its values; verify, queries and builds refuse the NaN.
    lie("dump-nan-in-q", 13, "NaN in /kv/q",
        ("NON_FINITE", "/kv/q of layer 0, query head 0 has a non-finite value at query 0"), arrays_={"q": q},
        inspect_exits=(0,))
    qp = arrays["q_positions"].copy()
    qp[0] = -3
    lie("dump-q-position-negative", 13, "q_positions entry -3",
        ("BAD_ATTRIBUTE", "/kv/q_positions[0] = -3 is not a row in [0, T=160)"), arrays_={"q_positions": qp})
    qp = arrays["q_positions"].copy()
    qp[-1] = T + 5
    lie("dump-q-position-beyond-t", 13, "q_positions entry T+5",
        ("BAD_ATTRIBUTE", "/kv/q_positions[23] = 165 is not a row in [0, T=160)"), arrays_={"q_positions": qp})
    lie("dump-tenant-nul", 13, 'tenant "a\\0b"',
        ("BAD_ATTRIBUTE", "attribute 'tenant_namespace' holds a NUL character inside the string"),
        attrs_={"tenant_namespace": np.bytes_(b"a\0b")})
    lie("dump-tenant-path", 13, 'tenant "../../etc/passwd"',
        ("BAD_ATTRIBUTE", "tenant_namespace '../../etc/passwd' holds a '/'"),
        attrs_={"tenant_namespace": "../../etc/passwd"})
    lie("dump-tenant-empty", 13, 'tenant ""', ("BAD_ATTRIBUTE", "tenant_namespace '' is empty"),
        attrs_={"tenant_namespace": ""})
    lie("dump-model-short", 13, "model SHA of 10 hex digits",
        ("BAD_ATTRIBUTE", "model_artifact_sha256 is not a 64-digit hex SHA-256: 'abcdef0123'"),
        attrs_={"model_artifact_sha256": "abcdef0123"})
    lie("dump-model-not-hex", 13, "model SHA of 64 non-hex characters",
        ("BAD_ATTRIBUTE", "model_artifact_sha256 is not a 64-digit hex SHA-256: 'zzzz"),
        attrs_={"model_artifact_sha256": "z" * 64})
    pos = np.arange(T, dtype=np.int64)
    pos[10] = pos[9]
    lie("dump-positions-not-increasing", 13, "/kv/positions repeats a value",
        ("BAD_ATTRIBUTE", "/kv/positions is not strictly increasing at row 10"), arrays_={"positions": pos})
    # Found by fuzz_dump (fuzz/crashes/README.md): one byte of a global-heap object length changed;
    # libhdf5 overruns a heap buffer reading a variable-length string attribute.
    crash = os.path.join(HERE, "..", "..", "fuzz", "crashes", "dump-hdf5-global-heap-vlen-attr.h5")
    path = corpus.add("dump-hdf5-heap-overrun", "dump", "fuzz",
                      "fuzz_dump reproducer: corrupt global heap object length",
                      reason="NOT_A_DUMP", message="object 1 at byte 16 claims 1090519104 bytes, past the end of its")
    with open(crash, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    # Tiny chunks: 256 KB of keys in [1,1,1,1] chunks (the data are valid; memory must stay bounded).
    big = np.random.default_rng(0).standard_normal((2, 1, 4096, 16)).astype(np.float16)
    qb = np.random.default_rng(1).standard_normal((2, 2, 24, 16)).astype(np.float16)
    rope = json.loads(attrs["rope_config"])
    rope["head_dim"] = 16
    lie("dump-tiny-chunks", 13, "/kv/k, /kv/v in [1,1,1,1] chunks (valid data, bounded memory)",
        ("SHAPE_MISMATCH", "/kv/k is split into chunks of 2 bytes, 65536 per (layer, head) slice"),
        arrays_={"k": big, "v": big, "q": qb, "q_positions": np.arange(4072, 4096, dtype=np.int64),
                 **({"tokens": np.zeros(4096, np.int64)} if "tokens" in arrays else {})},
        attrs_={"committed_frontier": 4096, "rope_config": json.dumps(rope)}, exits=(0, 1), chunks=(1, 1, 1, 1))


def main():
    kvtool, out = sys.argv[1], sys.argv[2]
    dump, arts = build_good(kvtool, os.path.join(out, "good"))
    zarts, signed = build_extra(kvtool, os.path.join(out, "good"), dump, arts)
    corpus = Corpus(out)
    structure_cases(corpus, arts)
    binding_cases(corpus, arts)
    bomb_cases(corpus, arts)
    zstd_cases(corpus, zarts)
    signature_cases(corpus, signed)
    dump_cases(corpus, dump)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(dict(dump=dump, artifacts=arts, cases=corpus.cases), f, indent=1)
    print("%d cases in %s" % (len(corpus.cases), corpus.dir))


if __name__ == "__main__":
    main()
