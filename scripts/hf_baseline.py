#!/usr/bin/env python3
"""Hugging Face transformers baseline for issue 7's sweep: DeepseekV4ForCausalLM on the bench checkpoint.

Loads a checkpoint written by scripts/make_bench_model.py (DeepSeek's release names and formats: FP8/FP4/BF16/F32,
sharded) into transformers' DeepseekV4ForCausalLM, dequantised to --dtype (bf16 by default, every tensor: HF's
from_pretrained(dtype=bf16) keeps norms/mHC/sinks in fp32 and its V4 forward then fails on a dtype mismatch), tensor
by tensor from memory-mapped shards straight into the parameters on --device: no bf16 copy is ever written to
disk and host memory stays small. Then greedy `generate` on random-token prompts and one CSV line:

  impl,batch,input_len,output_len,prefill_s,decode_tok_s

prefill_s   : median wall time of generate(max_new_tokens=1) = the prompt forward (+ one argmax)
decode_tok_s: batch * (output_len - 1) / (median time of generate(max_new_tokens=output_len) - prefill_s)
(EOS ignored; eager attention, the only one HF V4 supports; HF's default expert loop.)

  python3 scripts/hf_baseline.py --model /data/v4-bench-4l --batch 1 --input-len 512 --output-len 64
  python3 scripts/hf_baseline.py --device cpu --tiny          # builds a tiny bench model in a temp dir first
Memory: the bf16 model is 2 bytes/parameter (4 layers: 27.6 B params = 55 GB; 8 layers: 54.1 B = 108 GB) on the GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

# upstream (DeepSeek release) leaf -> HF module path, inside layers.{i}. (deepseek-v4.md §8.2)
_LAYER_MAP = [
    (r"attn_norm\.weight", "input_layernorm.weight"), (r"ffn_norm\.weight", "post_attention_layernorm.weight"),
    (r"hc_attn_(fn|base|scale)", r"attn_hc.\1"), (r"hc_ffn_(fn|base|scale)", r"ffn_hc.\1"),
    (r"attn\.wq_a\.weight", "self_attn.q_a_proj.weight"), (r"attn\.q_norm\.weight", "self_attn.q_a_norm.weight"),
    (r"attn\.wq_b\.weight", "self_attn.q_b_proj.weight"), (r"attn\.wkv\.weight", "self_attn.kv_proj.weight"),
    (r"attn\.kv_norm\.weight", "self_attn.kv_norm.weight"), (r"attn\.wo_a\.weight", "self_attn.o_a_proj.weight"),
    (r"attn\.wo_b\.weight", "self_attn.o_b_proj.weight"), (r"attn\.attn_sink", "self_attn.sinks"),
    (r"attn\.compressor\.wkv\.weight", "self_attn.compressor.kv_proj.weight"),
    (r"attn\.compressor\.wgate\.weight", "self_attn.compressor.gate_proj.weight"),
    (r"attn\.compressor\.norm\.weight", "self_attn.compressor.kv_norm.weight"),
    (r"attn\.compressor\.ape", "self_attn.compressor.position_bias"),
    (r"attn\.indexer\.compressor\.wkv\.weight", "self_attn.compressor.indexer.kv_proj.weight"),
    (r"attn\.indexer\.compressor\.wgate\.weight", "self_attn.compressor.indexer.gate_proj.weight"),
    (r"attn\.indexer\.compressor\.norm\.weight", "self_attn.compressor.indexer.kv_norm.weight"),
    (r"attn\.indexer\.compressor\.ape", "self_attn.compressor.indexer.position_bias"),
    (r"attn\.indexer\.wq_b\.weight", "self_attn.compressor.indexer.q_b_proj.weight"),
    (r"attn\.indexer\.weights_proj\.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"),
    (r"ffn\.gate\.weight", "mlp.gate.weight"), (r"ffn\.gate\.bias", "mlp.gate.e_score_correction_bias"),
    (r"ffn\.gate\.tid2eid", "mlp.gate.tid2eid"),
    (r"ffn\.shared_experts\.w1\.weight", "mlp.shared_experts.gate_proj.weight"),
    (r"ffn\.shared_experts\.w3\.weight", "mlp.shared_experts.up_proj.weight"),
    (r"ffn\.shared_experts\.w2\.weight", "mlp.shared_experts.down_proj.weight"),
]
_TOP_MAP = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight", "norm.weight": "model.norm.weight",
            "hc_head_fn": "model.hc_head.hc_fn", "hc_head_base": "model.hc_head.hc_base",
            "hc_head_scale": "model.hc_head.hc_scale"}
_EXPERT_RE = re.compile(r"^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$")


def hf_target(name: str):
    """Upstream name -> (HF state-dict key, expert index or None, row slice selector 'w1'|'w3'|'w2'|None)."""
    if name in _TOP_MAP:
        return _TOP_MAP[name], None, None
    m = _EXPERT_RE.match(name)
    if m:
        i, e, w = m.groups()
        key = "down_proj" if w == "w2" else "gate_up_proj"
        return f"model.layers.{i}.mlp.experts.{key}", int(e), w
    m = re.match(r"^layers\.(\d+)\.(.+)$", name)
    if m:
        for pat, rep in _LAYER_MAP:
            if re.fullmatch(pat, m.group(2)):
                return f"model.layers.{m.group(1)}." + re.sub(pat, rep, m.group(2)), None, None
    raise ValueError(f"unknown checkpoint tensor {name}")


# ---------------------------------------------------------------------------------------------- reading + decoding

class Shard:
    """Memory-mapped safetensors file: header + raw bytes of one tensor at a time."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            n = int(np.frombuffer(f.read(8), dtype="<u8")[0])
            self.header = json.loads(f.read(n))
        self.header.pop("__metadata__", None)
        self.data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)

    def raw(self, name: str, device) -> tuple[str, list, torch.Tensor]:
        info = self.header[name]
        a, b = info["data_offsets"]
        return info["dtype"], info["shape"], torch.from_numpy(np.array(self.data[a:b])).to(device)


def dequantise(shard: Shard, name: str, device) -> torch.Tensor:
    """DeepSeek formats (deepseek-v4.md §8.4) -> fp32 (int64 for tid2eid), computed on `device`."""
    dtype, shape, raw = shard.raw(name, device)
    if dtype == "F8_E4M3":
        sdt, sshape, sraw = shard.raw(name[: -len(".weight")] + ".scale", device)
        assert sdt == "F8_E8M0" and sshape == [-(-shape[0] // 128), -(-shape[1] // 128)], (name, sshape)
        s = torch.exp2(sraw.float() - 127).view(sshape)
        s = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: shape[0], : shape[1]]
        return raw.view(torch.float8_e4m3fn).view(shape).float() * s
    if dtype == "I8":  # FP4 E2M1, element 2j in the low nibble of byte j
        sdt, sshape, sraw = shard.raw(name[: -len(".weight")] + ".scale", device)
        out, cols = shape[0], shape[1] * 2
        assert sdt == "F8_E8M0" and sshape == [out, cols // 32], (name, sshape)
        b = raw.view(out, shape[1])
        codes = torch.stack([b & 0x0F, b >> 4], dim=-1).view(out, cols).long()
        lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=device)
        return lut[codes] * torch.exp2(sraw.float() - 127).view(sshape).repeat_interleave(32, 1)
    if dtype == "BF16":
        return raw.view(torch.bfloat16).view(shape).float()
    if dtype == "F32":
        return raw.view(torch.float32).view(shape).clone()
    if dtype == "I64":
        return raw.view(torch.int64).view(shape).clone()
    raise ValueError(f"{name}: unexpected dtype {dtype}")


def read_config(model_dir: str):
    from transformers import DeepseekV4Config
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    for k in ("quantization_config", "expert_dtype"):  # weights are dequantised here; HF's FP8 path stays off
        cfg.pop(k, None)
    config = DeepseekV4Config.from_dict(cfg)
    config._attn_implementation = "eager"
    return config


def load_hf_format(model_dir: str, device, dtype, log=print):
    """A checkpoint that transformers writes itself (one model.safetensors, no index; e.g. the bundled
    tests/data/models/deepseek-v4-tiny-stories): from_pretrained, then every tensor cast to `dtype` (see below)."""
    from transformers import DeepseekV4ForCausalLM
    t0 = time.time()
    model = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=dtype)
    model.config._attn_implementation = "eager"
    model = model.to(device=device, dtype=dtype).eval()
    n = sum(p.numel() for p in model.parameters())
    log(f"[hf] loaded {model_dir} (transformers format): {n / 1e6:.2f} M parameters on {device} in {dtype}, "
        f"{time.time() - t0:.1f} s")
    return model


def load_model(model_dir: str, device="cuda", dtype=torch.bfloat16, log=print):
    """DeepseekV4ForCausalLM on `device` in `dtype` with the checkpoint's weights, filled tensor by tensor."""
    from transformers import DeepseekV4ForCausalLM
    if not os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")) and \
            os.path.exists(os.path.join(model_dir, "model.safetensors")):
        return load_hf_format(model_dir, device, dtype, log)
    config = read_config(model_dir)
    t0 = time.time()
    with torch.device(device):
        model = DeepseekV4ForCausalLM._from_config(config, dtype=dtype)
    # Every tensor in `dtype`, deliberately: from_pretrained(dtype=bf16) keeps _keep_in_fp32_modules_strict (norms,
    # mHC, sinks, ape, gate bias) in fp32, and then transformers 5.17's V4 forward fails (the fp32 norm weight makes
    # the RMSNorm output fp32: "expected m1 and m2 to have the same dtype" in q_a_proj). The mHC maps and the
    # router already compute in fp32 internally.
    model.eval()
    params = dict(model.state_dict(keep_vars=True))
    todo = {k for k in params if "rotary_emb" not in k}
    inter = config.moe_intermediate_size
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    shards = sorted(set(weight_map.values()))
    expert_parts, t1 = {}, time.time()
    with torch.no_grad():
        for fname in shards:
            shard = Shard(os.path.join(model_dir, fname))
            for name in sorted(shard.header):
                if name.endswith(".scale"):
                    continue
                key, e, part = hf_target(name)
                dst = params[key]
                w = dequantise(shard, name, device)
                if e is None:
                    assert tuple(dst.shape) == tuple(w.shape), (name, key, dst.shape, w.shape)
                    dst.data.copy_(w.to(dst.dtype))
                    todo.discard(key)
                else:
                    rows = {"w1": slice(0, inter), "w3": slice(inter, 2 * inter), "w2": slice(None)}[part]
                    dst.data[e, rows].copy_(w.to(dst.dtype))
                    expert_parts.setdefault(key, set()).add((e, part))
                del w
            del shard
    for key, parts in expert_parts.items():
        need = config.n_routed_experts * (1 if key.endswith("down_proj") else 2)
        if len(parts) == need:
            todo.discard(key)
    if todo:
        raise ValueError(f"checkpoint {model_dir} lacks weights for {sorted(todo)[:8]} ({len(todo)} in all)")
    n = sum(p.numel() for p in model.parameters())
    by_dtype = {}
    for p in model.parameters():
        by_dtype[str(p.dtype)] = by_dtype.get(str(p.dtype), 0) + p.numel() * p.element_size()
    log(f"[hf] loaded {model_dir}: {n / 1e9:.3f} B parameters on {device} "
        f"({', '.join(f'{k} {v / 1e9:.2f} GB' for k, v in sorted(by_dtype.items()))}); "
        f"build {t1 - t0:.1f} s, fill {time.time() - t1:.1f} s")
    return model


# ---------------------------------------------------------------------------------------------- benchmark

def sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


@torch.no_grad()
def timed_generate(model, ids, new_tokens, device):
    sync(device)
    t = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0, use_cache=True)
    sync(device)
    dt = time.perf_counter() - t
    assert out.shape[1] == ids.shape[1] + new_tokens, out.shape
    return dt, out


def bench(model, batch, input_len, output_len, repeats, device, seed, log):
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(2, min(vocab, 128000), (batch, input_len), generator=g).to(device)
    with torch.no_grad():  # sanity: finite logits on this model
        logits = model(input_ids=ids[:1, : min(input_len, 256)], use_cache=False).logits.float()
    log(f"[hf] check forward: logits finite {bool(torch.isfinite(logits).all())}, std {float(logits.std()):.3f}")
    assert torch.isfinite(logits).all(), "non-finite logits"
    del logits
    timed_generate(model, ids, min(2, output_len), device)  # warm-up
    prefill = [timed_generate(model, ids, 1, device)[0] for _ in range(repeats)]
    total = [timed_generate(model, ids, output_len, device)[0] for _ in range(repeats)]
    p, t = statistics.median(prefill), statistics.median(total)
    decode = batch * (output_len - 1) / (t - p) if output_len > 1 and t > p else float("nan")
    log(f"[hf] prefill runs {['%.3f' % x for x in prefill]} s, full runs {['%.3f' % x for x in total]} s")
    return p, decode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="bench checkpoint folder (scripts/make_bench_model.py)")
    ap.add_argument("--tiny", action="store_true", help="without --model: build a tiny bench model in a temp dir")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--batch", type=int, nargs="+", default=[1], help="one or more batch sizes")
    ap.add_argument("--input-len", type=int, nargs="+", default=[128])
    ap.add_argument("--output-len", type=int, nargs="+", default=[32])
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per point (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--header", action="store_true", help="print the CSV header line first")
    ap.add_argument("--csv", help="also append the CSV lines to this file")
    ap.add_argument("--keep-going", action="store_true",
                    help="a point that fails (e.g. out of GPU memory) prints nan values instead of ending the run")
    args = ap.parse_args()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731  (stdout carries only the CSV)
    torch.manual_seed(args.seed)
    model_dir = args.model
    if model_dir is None:
        if not args.tiny:
            ap.error("--model is required (or --tiny to build a small one)")
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import make_bench_model as mbm
        model_dir = tempfile.mkdtemp(prefix="v4bench-tiny-")
        mbm.build(argparse.Namespace(layers=4, out=model_dir, seed=args.seed, tiny=True, device="cpu", shard_gb=5.0), log)
    model = load_model(model_dir, device=args.device, dtype=getattr(torch, args.dtype), log=log)
    if args.model is None:  # the temporary tiny checkpoint is no longer needed
        import shutil
        shutil.rmtree(model_dir, ignore_errors=True)
    if args.header:
        print("impl,batch,input_len,output_len,prefill_s,decode_tok_s", flush=True)
    for b in args.batch:
        for il in args.input_len:
            for ol in args.output_len:
                try:
                    p, d = bench(model, b, il, ol, args.repeats, args.device, args.seed, log)
                    line = f"hf,{b},{il},{ol},{p:.4f},{d:.2f}"
                except (RuntimeError, AssertionError) as e:  # e.g. torch.OutOfMemoryError (a RuntimeError)
                    if not args.keep_going:
                        raise
                    log(f"[hf] batch {b} input {il} output {ol} failed: {type(e).__name__}: {str(e)[:300]}")
                    if str(args.device).startswith("cuda"):
                        torch.cuda.empty_cache()
                    line = f"hf,{b},{il},{ol},nan,nan"
                print(line, flush=True)
                if args.csv:
                    with open(args.csv, "a") as f:
                        f.write(line + "\n")


if __name__ == "__main__":
    main()
