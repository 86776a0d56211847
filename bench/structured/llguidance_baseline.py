"""llguidance on the same MaskBench documents, vocabulary and token ids as bench_structured.

Reads the JSONL written by `bench_structured --ids-out FILE` and times, single-threaded, the
LLMatcher compile (grammar construction + first mask) and every mask, then EOS, exactly like the
C++ bench. Usage: python llguidance_baseline.py IDS.jsonl tokenizer.json
"""
import json
import statistics
import sys
import time

import llguidance


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else 0.0


def main():
    ids_path, tok_path = sys.argv[1], sys.argv[2]
    tok = llguidance.LLTokenizer(tok_path)
    mask_us, compile_us = [], []
    errors = compiled = docs = 0
    cache = {}
    for line in open(ids_path):
        rec = json.loads(line)
        key = rec["file"]
        schema = json.dumps(rec["schema"])
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": True})
        t0 = time.perf_counter()
        m = llguidance.LLMatcher(tok, grammar, log_level=0)
        m.compute_bitmask()
        dt = (time.perf_counter() - t0) * 1e6
        if key not in cache:
            cache[key] = dt
            compile_us.append(dt)
        if m.is_error():
            errors += 1
            continue
        compiled += 1
        docs += 1
        m = llguidance.LLMatcher(tok, grammar, log_level=0)
        for t in rec["ids"] + [tok.eos_token]:
            t1 = time.perf_counter()
            m.compute_bitmask()
            mask_us.append((time.perf_counter() - t1) * 1e6)
            if not m.consume_token(t):
                break
    out = {
        "engine": "llguidance " + getattr(llguidance, "__version__", "?"),
        "documents": docs, "errors": errors, "masks": len(mask_us),
        "mask_us": {"mean": statistics.fmean(mask_us) if mask_us else 0, "p50": pct(mask_us, .5),
                    "p99": pct(mask_us, .99), "max": max(mask_us) if mask_us else 0},
        "compile_us": {"mean": statistics.fmean(compile_us) if compile_us else 0,
                       "p50": pct(compile_us, .5), "p99": pct(compile_us, .99),
                       "max": max(compile_us) if compile_us else 0},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
