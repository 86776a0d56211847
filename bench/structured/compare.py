"""deepinfer vs llguidance vs xgrammar: per-token mask time and compile time on the same MaskBench
schemas, vocabulary (DeepSeek-V3 tokenizer.json) and documents (token ids), in one run.

The engines are interleaved schema by schema (the order rotates every schema), so machine load
hits all three alike; the 1-minute load average is sampled per schema and reported. deepinfer
runs as `bench_structured --serve` (C++, timed inside the process); the peers are timed from
Python around each call, so their figures include ~1 us of call overhead per mask.
Compile = schema -> compiled grammar -> matcher -> first mask (each engine's caches disabled or
fresh: llguidance and deepinfer build a new grammar per schema, xgrammar's compiler cache is off).

Usage:
  python compare.py --ids IDS.jsonl --tokenizer-json tokenizer.json \
      --bench build/bench/structured/bench_structured --tokenizer-dir tests/data/tokenizers/deepseek-v3 \
      [--engines deepinfer,llguidance,xgrammar] [--clock wall|cpu] [--json-out FILE]
--clock cpu times every engine's masks and compiles with its thread's CPU clock
(CLOCK_THREAD_CPUTIME_ID: Python's time.thread_time, bench_structured --clock cpu), so that time
the thread spends preempted on a loaded machine is not counted; every engine's mask times have
the median of 2,001 empty clock intervals subtracted (the clock is a system call on a VM, ~1-3
us). Both peers compute a single mask in the calling thread; per engine, process CPU time over
the mask loops is reported next to the summed thread time as a check.
IDS.jsonl comes from `bench_structured --maskbench DIR --tokenizer DIR --every N --ids-out IDS.jsonl`
(documents deepinfer's grammar accepts in instance key order; schemas deepinfer refuses are absent).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import OrderedDict


CLOCK = "wall"
OVERHEAD_US = 0.0


def now_us():
    return time.thread_time_ns() * 1e-3 if CLOCK == "cpu" else time.perf_counter() * 1e6


def calibrate():
    global OVERHEAD_US
    if CLOCK != "cpu":
        return
    empty = []
    for _ in range(2001):
        t = now_us()
        empty.append(now_us() - t)
    OVERHEAD_US = sorted(empty)[1000]


def timed_us(t1):
    return max(0.0, now_us() - t1 - OVERHEAD_US)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else 0.0


def summary(v):
    return {"mean": statistics.fmean(v) if v else 0.0, "p50": pct(v, .5), "p99": pct(v, .99),
            "max": max(v) if v else 0.0, "n": len(v)}


class DeepInfer:
    name = "deepinfer"

    def __init__(self, bench, tok_dir):
        self.proc = subprocess.Popen([bench, "--serve", "--tokenizer", tok_dir, "--clock", CLOCK], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, schema, docs):
        self.proc.stdin.write(json.dumps({"schema": schema, "docs": docs}) + "\n")
        self.proc.stdin.flush()
        r = json.loads(self.proc.stdout.readline())
        if "error" in r:
            return None, [], len(docs)
        return r["compile_us"], r["mask_us"], r["mask_errors"] + r["token_not_allowed"]


class LLGuidance:
    name = "llguidance"
    process_cpu_s = 0.0

    def __init__(self, tok_json):
        import llguidance
        self.llg = llguidance
        from importlib.metadata import version
        self.version = version("llguidance")
        self.tok = llguidance.LLTokenizer(tok_json)

    def run(self, schema, docs):
        llg = self.llg
        s = json.dumps(schema)
        t0 = now_us()
        grammar = llg.LLMatcher.grammar_from_json_schema(s, defaults={"whitespace_flexible": True})
        m = llg.LLMatcher(self.tok, grammar, log_level=0)
        m.compute_bitmask()
        compile_us = now_us() - t0
        if m.is_error():
            return None, [], len(docs)
        mask_us, failed = [], 0
        p0 = time.process_time()
        for ids in docs:
            m = llg.LLMatcher(self.tok, grammar, log_level=0)
            for t in ids + [self.tok.eos_token]:
                t1 = now_us()
                m.compute_bitmask()
                mask_us.append(timed_us(t1))
                if m.is_error() or not m.consume_token(t):
                    failed += 1
                    break
        self.process_cpu_s += time.process_time() - p0
        return compile_us, mask_us, failed


class XGrammar:
    name = "xgrammar"
    process_cpu_s = 0.0

    def __init__(self, tok_json):
        import xgrammar as xgr
        self.xgr = xgr
        from importlib.metadata import version
        self.version = version("xgrammar")
        tj = json.load(open(tok_json, encoding="utf-8"))
        vocab = dict(tj["model"]["vocab"])
        for a in tj.get("added_tokens", []):
            vocab[a["content"]] = a["id"]
        size = max(vocab.values()) + 1
        encoded = [""] * size
        for tok, i in vocab.items():
            encoded[i] = tok
        special = [a["id"] for a in tj.get("added_tokens", []) if a.get("special")]
        self.eos = 1  # <｜end▁of▁sentence｜>
        self.info = xgr.TokenizerInfo(encoded, vocab_type=xgr.VocabType.BYTE_LEVEL, vocab_size=size,
                                      stop_token_ids=[self.eos], add_prefix_space=False)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, size)
        del special

    def run(self, schema, docs):
        xgr = self.xgr
        t0 = now_us()
        try:
            cg = self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=False)
        except Exception:  # noqa: BLE001 - refused schema
            return None, [], len(docs)
        m = xgr.GrammarMatcher(cg)
        m.fill_next_token_bitmask(self.bitmask)
        compile_us = now_us() - t0
        mask_us, failed = [], 0
        p0 = time.process_time()
        for ids in docs:
            m = xgr.GrammarMatcher(cg)
            for t in ids + [self.eos]:
                t1 = now_us()
                m.fill_next_token_bitmask(self.bitmask)
                mask_us.append(timed_us(t1))
                if not m.accept_token(t):
                    failed += 1
                    break
        self.process_cpu_s += time.process_time() - p0
        return compile_us, mask_us, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", required=True)
    ap.add_argument("--tokenizer-json", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--engines", default="deepinfer,llguidance,xgrammar")
    ap.add_argument("--json-out")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    # Stop after the schema during which this many seconds have passed (every engine has then run
    # the same schemas; the report says how many). For runs that must end by a deadline.
    ap.add_argument("--time-limit-s", type=float, default=0)
    args = ap.parse_args()
    global CLOCK
    CLOCK = args.clock
    calibrate()

    schemas = OrderedDict()
    for line in open(args.ids):
        rec = json.loads(line)
        schemas.setdefault(rec["file"], (rec["schema"], []))[1].append(rec["ids"])

    engines = []
    for e in args.engines.split(","):
        if e == "deepinfer":
            engines.append(DeepInfer(args.bench, args.tokenizer_dir))
        elif e == "llguidance":
            engines.append(LLGuidance(args.tokenizer_json))
        elif e == "xgrammar":
            engines.append(XGrammar(args.tokenizer_json))
    res = {e.name: {"mask_us": [], "compile_us": [], "refused": 0, "failed_docs": 0, "docs": 0}
           for e in engines}
    loads = []
    t_start = time.time()
    done = 0
    for k, (fname, (schema, docs)) in enumerate(schemas.items()):
        loads.append(os.getloadavg()[0])
        order = engines[k % len(engines):] + engines[:k % len(engines)]
        for e in order:
            c, masks, failed = e.run(schema, docs)
            r = res[e.name]
            if c is None:
                r["refused"] += 1
                continue
            r["compile_us"].append(c)
            r["mask_us"].extend(masks)
            r["failed_docs"] += failed
            r["docs"] += len(docs)
        if (k + 1) % 25 == 0:
            print(f"[compare] {k + 1}/{len(schemas)} schemas, {time.time() - t_start:.0f} s", file=sys.stderr, flush=True)
        done = k + 1
        if args.time_limit_s and time.time() - t_start > args.time_limit_s:
            print(f"[compare] time limit: stopped after {done}/{len(schemas)} schemas", file=sys.stderr, flush=True)
            break
    loads.append(os.getloadavg()[0])
    ran = list(schemas.values())[:done]
    out = {"schemas": done, "schemas_in_file": len(schemas), "documents": sum(len(d) for _, d in ran),
           "wall_s": time.time() - t_start, "cpus": os.cpu_count(), "clock": CLOCK,
           "python_clock_overhead_us": OVERHEAD_US,
           "load_avg_1min": {"mean": statistics.fmean(loads), "min": min(loads), "max": max(loads)},
           "engines": {}}
    for e in engines:
        r = res[e.name]
        out["engines"][e.name] = {
            "version": getattr(e, "version", "this tree"), "refused_schemas": r["refused"],
            "documents": r["docs"], "failed_documents": r["failed_docs"],
            "mask_us": summary(r["mask_us"]), "compile_us": summary(r["compile_us"])}
        if hasattr(e, "process_cpu_s") and CLOCK == "cpu":
            # Process CPU over the mask loops (incl. accept calls and Python) vs summed mask thread time.
            out["engines"][e.name]["mask_loops_process_cpu_s"] = e.process_cpu_s
            out["engines"][e.name]["mask_thread_cpu_s"] = sum(r["mask_us"]) * 1e-6
    print(json.dumps(out, indent=2))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=2)
    print("\n| engine | masks | mask mean | p50 | p99 | max | compile mean | p50 | p99 | max |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, r in out["engines"].items():
        m, c = r["mask_us"], r["compile_us"]
        print(f"| {name} {r['version']} | {m['n']} | {m['mean']:.1f} µs | {m['p50']:.1f} µs | "
              f"{m['p99']:.1f} µs | {m['max']:.0f} µs | {c['mean']/1e3:.2f} ms | {c['p50']/1e3:.2f} ms | "
              f"{c['p99']/1e3:.1f} ms | {c['max']/1e3:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
