#!/usr/bin/env python3
"""Builds tests/data/structured/lark_regex_cases.jsonl: Python `re` conformance cases for the
Lark regexp dialect (structured/lark_regex.h), with Python's re.fullmatch as the oracle.

1. Every rust-regex corpus case (regex, haystack) that Python compiles, with case-insensitive
   mapped to the i flag (no other option is kept), including the ones where Python and ECMA-262
   differ (those are the point here).
2. Python-specific patterns (Unicode \\d \\w \\s, IGNORECASE folds, {,n}, literal {, inline and
   scoped flags, verbose, octal) against haystacks drawn from a fixed alphabet (seeded).
Usage: python3 make_lark_regex_fixture.py SHARED_TESTDATA_REGEX_DIR OUT.jsonl
"""
import json
import random
import re
import sys

from rust_regex_corpus import rust_regex_tests

PYTHON_PATTERNS = [
    (r"\d+", ""), (r"(?a:\d+)", ""), (r"\w+", ""), (r"\W", ""), (r"\s", ""), (r"\S+", ""),
    (r"[\d\s]+", ""), (r"[^\w]", ""), (r"ks", "i"), (r"[a-z]+", "i"), (r"[^k]", "i"),
    (r"(?i:st)x", ""), (r"(?i)ﬅ|σ", ""), (r"Σ+", "i"), (r"a{,2}b", ""), (r"a{2,}", ""),
    (r"x{", ""), (r"x{a}", ""), (r"a{1,2}?b", ""), (r".", ""), (r".", "s"), (r"a b\ c # note", "x"),
    (r"[ ]a", "x"), (r"\101\x42\u0043\0", ""), (r"[\101-\103]+", ""), (r"(?P<n>a|b)+", ""),
    (r"(?:ab)*c", ""), (r"[]a]+", ""), (r"[^]a]", ""), (r"[a-]+", ""), (r"\[\]", ""),
    (r"(?#comment)a", ""), (r"(?s:.)\n?", ""), (r"(?x: a b )c", ""), (r"(?-i:a)b", "i"),
    (r"é+", "i"), (r"ǅ", "i"), (r"\w", "a"), (r"(?a)[^\W\d]+", ""), (r"ß", "i"), (r"ı", "i"),
    (r"İ", "i"), (r"\t\n\r\f\v\a", ""), (r"[\b]", ""), (r"a|b|", ""), (r"(a|)+", ""),
]
ALPHABET = ["a", "b", "c", "k", "s", "t", "x", "A", "B", "K", "S", "1", "9", "_", " ", "\t", "\n",
            "\r", "\x0b", "\x1c", "{", "}", "[", "]", "-", "\x00", "é", "É", "ß", "ẞ", "ſ", "K",
            "ﬅ", "ﬆ", "σ", "ς", "Σ", "ǅ", "ǆ", "Ǆ", "ı", "İ", "i", "I", "٣", "²", "\u2028", "\ufeff",
            "\u3000", "日", "\x07", "\x08", "\x0c", "\b"]


def main():
    src, out = sys.argv[1], sys.argv[2]
    cases = []
    for source, t, r, h in rust_regex_tests(src):
        flags = "i" if t.get("case-insensitive") else ""
        try:
            rx = re.compile(r, re.I if flags else 0)
        except (re.error, OverflowError, RecursionError):
            continue
        cases.append({"source": source, "regex": r, "flags": flags, "text": h,
                      "full": rx.fullmatch(h) is not None})
    rng = random.Random(20261129)
    for r, flags in PYTHON_PATTERNS:
        rf = 0
        for f in flags:
            rf |= {"i": re.I, "s": re.S, "x": re.X, "a": re.A}[f]
        rx = re.compile(r, rf)
        texts = set()
        while len(texts) < 40:
            texts.add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 4))))
        # Make sure some texts match.
        for t in ["a", "ab", "aab", "1", "k", "ks", "st", "ſt", "x{", "x{a}", "ABC\x00", "a b c"]:
            texts.add(t)
        for t in sorted(texts):
            cases.append({"source": "python", "regex": r, "flags": flags, "text": t,
                          "full": rx.fullmatch(t) is not None})
    with open(out, "w") as f:
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(len(cases), "cases,", sum(c["full"] for c in cases), "matching")


if __name__ == "__main__":
    main()
