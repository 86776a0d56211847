#!/usr/bin/env python3
"""Reference side of tokenizer_differential_test: runs Hugging Face `tokenizers` (pinned in
scripts/requirements-test.txt) over a request file written by the C++ test and writes the results.

usage: hf_reference.py REQUEST.json RESULT.json
REQUEST: {"tokenizers": {name: path to tokenizer.json[.xz]}, "texts": [str, ...],
          "decode": {name: [[id, ...], ...]}}
RESULT:  {name: {"encode": [[id, ...] per text], "decode": [str], "decode_skip": [str]}}
Exits non-zero (and says why) when python3 or tokenizers is missing: the test must fail then.
"""
import json
import lzma
import sys

try:
    import tokenizers
except ImportError as e:  # the C++ test turns this into a failure
    sys.stderr.write(f"hf_reference.py: cannot import tokenizers ({e}); run scripts/setup.sh\n")
    sys.exit(3)


def load(path):
    if path.endswith(".xz"):
        with lzma.open(path, "rt", encoding="utf-8") as f:
            tok = tokenizers.Tokenizer.from_str(f.read())
    else:
        tok = tokenizers.Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def main():
    req = json.load(open(sys.argv[1], encoding="utf-8"))
    out = {"tokenizers_version": tokenizers.__version__}
    texts = req["texts"]
    for name, path in req["tokenizers"].items():
        tok = load(path)
        enc = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        seqs = req.get("decode", {}).get(name, [])
        out[name] = {
            "encode": enc,
            "decode": [tok.decode(s, skip_special_tokens=False) for s in seqs],
            "decode_skip": [tok.decode(s, skip_special_tokens=True) for s in seqs],
        }
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
