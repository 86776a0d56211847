"""Builds tests/data/structured/regex_conformance.jsonl from the rust-regex and pcre2 corpora.

For each (regex, haystack) pair whose regex Python's `re` also accepts, records the oracle
answers re.fullmatch (whole-output semantics of compile_regex) and re.search (JSON Schema
`pattern` semantics). Cases where ECMA-262 and Python differ are skipped: inline flags, \\A \\Z,
POSIX classes, {,n}, Unicode classes, haystacks with \\r or U+2028/9 (ECMA `.` excludes them),
\\s/\\d/\\w against non-ASCII text, and options (case-insensitive, multi-line, bytes, ...).
Usage: python3 make_regex_fixture.py SHARED_TESTDATA_REGEX_DIR OUT.jsonl
"""
import json
import re
import sys

from rust_regex_corpus import rust_regex_tests


def skip_regex(r):
    bad = ["(?", "\\A", "\\z", "\\Z", "[[:", "{,", "\\p", "\\P", "\\h", "\\K", "\\Q", "\\G", "\\R",
           "\\X", "\\C", "\\e", "\\a", "\\o", "\\N", "&&", "--", "~~", "\\<", "\\>", "\\x{", "\\u",
           "[]", "[^]"]  # ECMA: [] is an empty class, Python: a literal ]
    return any(b in r for b in bad)


def main():
    src, out = sys.argv[1], sys.argv[2]
    cases = []
    for source, t, r, h in rust_regex_tests(src):
        opts = set(t) - {"name", "regex", "haystack", "matches", "match-limit", "anchored",
                         "compiles", "unicode", "utf8", "search-kind", "match-kind"}
        if opts or t.get("unicode") is False or t.get("utf8") is False:
            continue
        if t.get("compiles") is False or skip_regex(r):
            continue
        if any(c in h for c in "\r\u2028\u2029") or (not h.isascii() and re.search(r"\\[sSdDwW]", r)):
            continue
        try:
            rx = re.compile(r)
        except (re.error, OverflowError):
            continue
        cases.append({"source": source, "regex": r,
                      "text": h, "full": rx.fullmatch(h) is not None,
                      "search": rx.search(h) is not None})
    with open(out, "w") as f:
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
