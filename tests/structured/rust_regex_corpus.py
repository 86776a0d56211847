"""The rust-regex test corpus (shared testdata regex/rust-regex/*.toml and fowler/*.toml), read
once for the fixture generators: yields (source, test, regex, haystack) for every test whose regex
and haystack are strings. `source` is "relative/path.toml:name"."""
import glob
import os
import tomllib


def rust_regex_tests(src):
    files = sorted(glob.glob(os.path.join(src, "rust-regex", "*.toml")) +
                   glob.glob(os.path.join(src, "rust-regex", "fowler", "*.toml")))
    for path in files:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        for t in doc.get("test", []):
            r, h = t.get("regex"), t.get("haystack")
            if isinstance(r, str) and isinstance(h, str):
                yield os.path.relpath(path, src) + ":" + t.get("name", ""), t, r, h
