#!/usr/bin/env python3
"""HF `tokenizers` side of bench_tokenizer: encodes the same lines single-threaded, prints JSON.
usage: hf_encode_bench.py TOKENIZER_JSON[.xz] TEXT_FILE REPEATS IDS_OUT"""
import json, lzma, os, sys, time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402

path, text_path, repeats, ids_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
src = lzma.open(path, "rt", encoding="utf-8").read() if path.endswith(".xz") else open(path, encoding="utf-8").read()
tok = tokenizers.Tokenizer.from_str(src)
tok.no_truncation()
text = open(text_path, encoding="utf-8").read()
lines = text.split("\n")
tok.encode_batch(lines[:1000], add_special_tokens=False)  # warm-up
times = []
for _ in range(repeats):
    t0 = time.perf_counter()
    encs = tok.encode_batch(lines, add_special_tokens=False)  # RAYON_NUM_THREADS=1: one thread
    times.append(time.perf_counter() - t0)
ids = [i for e in encs for i in e.ids]
json.dump(ids, open(ids_out, "w"))
times.sort()
print(json.dumps({"version": tokenizers.__version__, "median_s": times[len(times) // 2], "tokens": len(ids)}))
