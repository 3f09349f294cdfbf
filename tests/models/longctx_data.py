"""Training and task text for the long-context test model (tests/models/train_longctx.py) and its
needle tasks (tests/models/needles.py): C header text from /usr/include with planted key -> value
facts, character level (ASCII; token id = character code, tokenizer written by write_tokenizer).

A fact is a line `/* fact KEY = VALUE */`; asking it again is `/* ask KEY = VALUE */`, where only
retrieving the fact can predict VALUE. KEY: 4 characters of [A-Z0-9]; VALUE: 6 of VALUE_CHARS, control
characters the header text never holds (the corpus keeps only tab, newline and printable ASCII), so
that copying a value is unambiguous once a head finds it: a task vocabulary that makes copying the
cheapest solution (tests/models/README.md, "Attempts": with values in [a-z0-9], the characters of
the code around them, no attempt learned any copying).
"""
import os
import struct

import numpy as np

KEY_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
VALUE_CHARS = "".join(chr(c) for c in list(range(3, 9)) + list(range(14, 32)))  # 24 symbols
VOCAB = 128
BOS = 1


_CONTROL = {c: None for c in range(32) if c not in (9, 10)}


def header_corpus(root="/usr/include", limit=40_000_000):
    """The .h files under root (sorted, ASCII only, tabs kept), concatenated up to `limit` chars."""
    parts, size = [], 0
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith(".h"):
                continue
            try:
                t = open(os.path.join(d, f), "rb").read().decode("ascii")
            except (UnicodeDecodeError, OSError):
                continue
            t = t.translate(_CONTROL)
            parts.append(t)
            size += len(t)
            if size >= limit:
                return "\n".join(parts)
    return "\n".join(parts)


def random_word(rng, chars, n):
    return "".join(chars[i] for i in rng.integers(0, len(chars), n))


def fact(key, value, ask=False):
    return "/* %s %s = %s */\n" % ("ask" if ask else "fact", key, value)


def planted_window(rng, corpus, length, facts, asks_per_fact=1):
    """A window of `length` characters: corpus text with `facts` fact lines at random places and,
    after each, `asks_per_fact` ask lines at random later places. Returns (text, [(ask start,
    value start, value end)]): character offsets of every asked value."""
    inserts = []
    for _ in range(facts):
        key, value = random_word(rng, KEY_CHARS, 4), random_word(rng, VALUE_CHARS, 6)
        at = int(rng.integers(0, int(length * 0.8)))
        inserts.append((at, fact(key, value), None))
        for _ in range(asks_per_fact):
            inserts.append((int(rng.integers(at + 1, length)), fact(key, value, ask=True), value))
    inserts.sort(key=lambda x: x[0])
    budget = length - sum(len(s) for _, s, _ in inserts)
    start = int(rng.integers(0, len(corpus) - budget - 1))
    filler = corpus[start:start + max(budget, 0)]
    out, spans, taken, pos = [], [], 0, 0
    for at, s, value in inserts:
        cut = min(max(int(at * max(budget, 0) / length), taken), len(filler))
        out.append(filler[taken:cut])
        pos += cut - taken
        taken = cut
        if value is not None:
            v0 = pos + s.index(" = ") + 3
            spans.append((pos, v0, v0 + len(value)))
        out.append(s)
        pos += len(s)
    out.append(filler[taken:])
    return "".join(out)[:length], [sp for sp in spans if sp[2] <= length]


def planted_copy_window(rng, corpus, length, facts, asks_per_fact, segments):
    """planted_window, plus `segments` random strings (12 to 24 characters of VALUE_CHARS) each
    written twice, the second time later: plain copying (an induction head) is the only way to
    predict a second copy, the first step towards retrieving a fact's value. The second copies'
    spans are returned with the asked values'."""
    text, spans = planted_window(rng, corpus, length, facts, asks_per_fact)
    text = list(text)
    for _ in range(segments):
        n = int(rng.integers(12, 25))
        seg = random_word(rng, VALUE_CHARS, n)
        a = int(rng.integers(0, length // 2 - n))
        b = int(rng.integers(a + n + 1, length - n))
        if any(not (s1 <= a - 1 or s0 >= b + n + 1) for _, s0, s1 in spans):
            continue  # keep the facts' values whole
        text[a:a + n] = seg
        text[b:b + n] = seg
        spans.append((b, b + 1, b + n))  # the first character of a copy is not predictable
    return "".join(text)[:length], spans


DRILL_CHARS = "".join(chr(c) for c in range(3, 128) if c not in (9, 10))  # every id but BOS/EOS/<unk>/tab/newline


def copy_drill(rng, length, chars=DRILL_CHARS):
    """A window of `length` characters that is nothing but copying: random strings of `chars` (8 to
    24 characters, each on its own line), then the same strings again in another order. Every
    character of a second copy but its first is predictable only by finding the first copy (an
    induction head); the densest form of the signal planted_copy_window spreads through text.
    Returns (text, spans) as planted_copy_window."""
    segs, used = [], 0
    while used < length // 2 - 26:
        segs.append(random_word(rng, chars, int(rng.integers(8, 25))))
        used += len(segs[-1]) + 1
    text = "".join(x + "\n" for x in segs)
    spans = []
    for i in rng.permutation(len(segs)):
        spans.append((len(text), len(text) + 1, len(text) + len(segs[i])))
        text += segs[i] + "\n"
    text = text[:length].ljust(length, "\n")
    return text, [sp for sp in spans if sp[2] <= length]


def repeat_drill(rng, length, chars=DRILL_CHARS):
    """The plainest copying there is: one random string of `chars` (8 to 48 characters) repeated to
    fill `length`. After its first copy every character is predictable by finding the previous copy,
    the data small models form induction heads on. Returns (text, spans) as copy_drill."""
    p = int(rng.integers(8, 49))
    seg = random_word(rng, chars, p)
    text = (seg * (length // p + 1))[:length]
    return text, [(p, p, length)]


def encode(text):
    return np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64)


def write_tokenizer(path):
    """llama2.c tokenizer: 128 tokens, id = ASCII code (0 <unk>, 1 BOS, 2 EOS; the other control
    characters as <0xNN>), scores 0: the tokenizer layout kvtool/llama2c.h reads."""
    toks = []
    for i in range(VOCAB):
        if i == 0:
            t = b"<unk>"
        elif i == 1:
            t = b"\n<s>\n"
        elif i == 2:
            t = b"\n</s>\n"
        elif i in (9, 10) or 32 <= i:
            t = bytes([i])
        else:
            t = b"<0x%02X>" % i
        toks.append(t)
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(t) for t in toks)))
        for t in toks:
            f.write(struct.pack("<fi", 0.0, len(t)) + t)
