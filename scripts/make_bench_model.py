#!/usr/bin/env python3
"""Write a random DeepSeek-V4 benchmark checkpoint with V4-Flash dimensions (issue 7), in the official formats.

Dimensions are V4-Flash's (hidden 4096, 64 heads x 512, q_lora 1024, o_groups 8 x 1024, 256 experts x 2048 top-6
+ 1 shared, window 128, CSA m=4 with a 64x128 indexer and index_topk 512, HCA m=128, mHC 4, vocab 129280, YaRN
compress rope); only the layer count is smaller. Layer schedule: the first N entries of Flash's compress_ratios
([0, 0, 4, 128, 4, 128, ...]); if that lacks a CSA or an HCA layer (N < 4) the last two layers become CSA, HCA.
Hash-routed MoE on the first min(N, 3) layers, as in Flash.

Formats and names: DeepSeek's release (deepseek-v4.md §8.2, §8.4), decided per tensor by scripts/fixture_quant.py
(FP8 E4M3 + ue8m0 128x128 block scales for the attention/indexer/shared-expert linears, FP4 E2M1 + ue8m0 per-32
scales for routed experts, BF16 for embed/head/norms/compressors/router, F32 for sinks/hc_*/ape/gate.bias,
I64 tid2eid). Sharded safetensors (model-0000k-of-0000n.safetensors, each <= --shard-gb) +
model.safetensors.index.json + config.json + generation_config.json + the DeepSeek-V3 tokenizer files.

Weights (fp32 draws, then quantised): every matrix N(0, 0.02^2); norm weights 1 + 0.05 N; hc_*_fn 0.02 N,
hc_*_base 0.1 N, hc_*_scale 1 + 0.1 N; attn_sink 0.1 N; compressor ape 0.02 N; ffn.gate.bias 0.01 N (small, so
routing stays balanced); tid2eid k distinct uniform random experts per token.

Memory: tensors are drawn and quantised one at a time (on the GPU when there is one) and written one shard at a
time; peak host memory is about one shard (<= 5 GB) plus its serialised copy.

  python3 scripts/make_bench_model.py --layers 4 --out /data/v4-bench-4l          # Flash-sized, ~17 GB
  python3 scripts/make_bench_model.py --tiny --out /tmp/v4-bench-tiny --validate  # small, same code path, checked
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_quant as fq  # noqa: E402  (formats by name, quantisers, safetensors writer, numpy decoder)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# DeepSeek-V3 tokenizer (same bytes in both places; the repo copy travels to the GPU machine)
TOKENIZER_DIRS = ["/work/shared/testdata/tokenizers/deepseek-v3", os.path.join(REPO, "tests/data/tokenizers/deepseek-v3")]
FLASH_COMPRESS_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]  # 44 entries: 43 layers + the MTP layer (last)

# V4-Flash config.json in the release's own spelling (deepseek-v4.md §1.1: legacy keys compress_ratios,
# num_hash_layers, qk_rope_head_dim, rope_scaling; extra keys quantization_config, expert_dtype, topk_method).
FLASH = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048, "num_hidden_layers": 43,
    "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
    "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024, "sliding_window": 128,
    "compress_ratios": FLASH_COMPRESS_RATIOS, "compress_rope_theta": 160000, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 1048576,
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "num_hash_layers": 3,
    "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True,
    "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hidden_act": "silu",
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
    "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
    "torch_dtype": "bfloat16", "expert_dtype": "fp4",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                            "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
}

# --tiny: same code path and formats, small widths (every FP8 dim a multiple of 128). Window, rates, vocab,
# rope and mHC stay Flash's; index_topk 16 so a few-hundred-token prompt exercises the top-k selection.
TINY = {"hidden_size": 256, "moe_intermediate_size": 128, "num_attention_heads": 4, "head_dim": 128,
        "qk_rope_head_dim": 16, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 128,
        "index_n_heads": 8, "index_head_dim": 32, "index_topk": 16, "n_routed_experts": 16}

STD = 0.02


def layer_schedule(n_layers: int) -> list[int]:
    if n_layers < 2:
        raise SystemExit("--layers must be >= 2 (one CSA and one HCA layer are required)")
    ratios = list(FLASH_COMPRESS_RATIOS[:n_layers])
    if 4 not in ratios or 128 not in ratios:
        ratios[-2:] = [4, 128]
    return ratios


def make_config(n_layers: int, tiny: bool) -> dict:
    cfg = json.loads(json.dumps(FLASH))
    if tiny:
        cfg.update(TINY)
    cfg["num_hidden_layers"] = n_layers
    cfg["compress_ratios"] = layer_schedule(n_layers)
    cfg["num_nextn_predict_layers"] = 0  # no mtp.* tensors are written
    return cfg


# ---------------------------------------------------------------------------------------------- tensor plan

def tensor_plan(cfg: dict) -> list[tuple[str, tuple, str]]:
    """(upstream name, shape of the unquantised weight, init kind) in file order: layer by layer, embed first,
    head/norm/hc_head last."""
    H, V, D = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    nH, Rq, G, Ro = cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"]
    E, k, I, hc = cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"], cfg["hc_mult"]
    nI, cI = cfg["index_n_heads"], cfg["index_head_dim"]
    mix = (2 + hc) * hc
    plan = [("embed.weight", (V, H), "mat")]
    for i, ratio in enumerate(cfg["compress_ratios"]):
        p = f"layers.{i}."
        for site in ("attn", "ffn"):
            plan += [(f"{p}hc_{site}_fn", (mix, hc * H), "mat"), (f"{p}hc_{site}_base", (mix,), "hc_base"),
                     (f"{p}hc_{site}_scale", (3,), "hc_scale")]
        plan += [(f"{p}attn_norm.weight", (H,), "norm"), (f"{p}ffn_norm.weight", (H,), "norm"),
                 (f"{p}attn.wq_a.weight", (Rq, H), "mat"), (f"{p}attn.q_norm.weight", (Rq,), "norm"),
                 (f"{p}attn.wq_b.weight", (nH * D, Rq), "mat"), (f"{p}attn.wkv.weight", (D, H), "mat"),
                 (f"{p}attn.kv_norm.weight", (D,), "norm"), (f"{p}attn.wo_a.weight", (G * Ro, nH * D // G), "mat"),
                 (f"{p}attn.wo_b.weight", (H, G * Ro), "mat"), (f"{p}attn.attn_sink", (nH,), "sink")]
        if ratio:
            width = 2 * D if ratio == 4 else D  # CSA compressor keeps two overlapping halves
            c = f"{p}attn.compressor."
            plan += [(c + "wkv.weight", (width, H), "mat"), (c + "wgate.weight", (width, H), "mat"),
                     (c + "norm.weight", (D,), "norm"), (c + "ape", (ratio, width), "ape")]
        if ratio == 4:
            c = f"{p}attn.indexer."
            plan += [(c + "compressor.wkv.weight", (2 * cI, H), "mat"), (c + "compressor.wgate.weight", (2 * cI, H), "mat"),
                     (c + "compressor.norm.weight", (cI,), "norm"), (c + "compressor.ape", (ratio, 2 * cI), "ape"),
                     (c + "wq_b.weight", (nI * cI, Rq), "mat"), (c + "weights_proj.weight", (nI, H), "mat")]
        hash_layer = i < cfg["num_hash_layers"]
        plan.append((f"{p}ffn.gate.weight", (E, H), "mat"))
        plan.append((f"{p}ffn.gate.tid2eid", (V, k), "tid2eid") if hash_layer else (f"{p}ffn.gate.bias", (E,), "gate_bias"))
        for w, shape in (("w1", (I, H)), ("w2", (H, I)), ("w3", (I, H))):
            plan.append((f"{p}ffn.shared_experts.{w}.weight", shape, "mat"))
        for e in range(E):
            for w, shape in (("w1", (I, H)), ("w2", (H, I)), ("w3", (I, H))):
                plan.append((f"{p}ffn.experts.{e}.{w}.weight", shape, "mat"))
    plan += [("norm.weight", (H,), "norm"), ("head.weight", (V, H), "mat"),
             ("hc_head_fn", (hc, hc * H), "mat"), ("hc_head_base", (hc,), "hc_base"), ("hc_head_scale", (1,), "hc_scale")]
    return plan


def stored_bytes(name: str, shape: tuple) -> int:
    """Bytes of the tensor as stored (+ its scale tensor), from the format fixture_quant assigns to the name."""
    n = 1
    for d in shape:
        n *= d
    if fq.FP8_RE.match(name):
        return n + -(-shape[0] // 128) * -(-shape[1] // 128)
    if fq.FP4_RE.match(name):
        return n // 2 + n // fq.FP4_GROUP
    if fq.BF16_RE.match(name):
        return 2 * n
    if fq.F32_RE.match(name):
        return 4 * n
    if fq.I64_RE.match(name):
        return 8 * n
    raise ValueError(f"no storage format for {name}")


def assign_shards(plan, limit_bytes: int) -> list[list]:
    shards, cur, size = [], [], 0
    for item in plan:
        b = stored_bytes(item[0], item[1])
        if cur and size + b > limit_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(item)
        size += b
    if cur:
        shards.append(cur)
    return shards


# ---------------------------------------------------------------------------------------------- generation

def draw(shape, kind, gen, device, n_experts):
    if kind == "tid2eid":  # k distinct experts per token
        return torch.rand(shape[0], n_experts, generator=gen, device=device).topk(shape[1], dim=1).indices
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    scale, offset = {"mat": (STD, 0.0), "norm": (0.05, 1.0), "hc_base": (0.1, 0.0), "hc_scale": (0.1, 1.0),
                     "sink": (0.1, 0.0), "ape": (STD, 0.0), "gate_bias": (0.01, 0.0)}[kind]
    return x * scale + offset


def generate_shard(items, gen, device, n_experts):
    """Returns upstream name -> CPU tensor in its stored format (weights and their .scale tensors)."""
    out = {}
    for name, shape, kind in items:
        w = draw(shape, kind, gen, device, n_experts)
        stored, _ = fq.quantise_state_dict({fq.from_upstream(name): w})  # format chosen by name (§8.4)
        for k, v in stored.items():
            out[k] = v.cpu()
        del w, stored
    return out


def write_side_files(out: str, cfg: dict):
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": 0, "eos_token_id": 1, "do_sample": True,
                   "temperature": 1.0, "top_p": 1.0}, f, indent=2)
        f.write("\n")
    tok = next((d for d in TOKENIZER_DIRS if os.path.exists(os.path.join(d, "tokenizer.json.xz"))), None)
    if tok is None:
        raise SystemExit(f"DeepSeek-V3 tokenizer not found in {TOKENIZER_DIRS}")
    with lzma.open(os.path.join(tok, "tokenizer.json.xz")) as src, open(os.path.join(out, "tokenizer.json"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(os.path.join(tok, "tokenizer_config.json"), os.path.join(out, "tokenizer_config.json"))


def build(args, log):
    cfg = make_config(args.layers, args.tiny)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    plan = tensor_plan(cfg)
    shards = assign_shards(plan, int(args.shard_gb * 1e9))
    total = sum(stored_bytes(n, s) for n, s, _ in plan)
    n_params = sum(torch.Size(s).numel() for n, s, _ in plan)
    log(f"layers {cfg['compress_ratios']} (0 sliding, 4 CSA, 128 HCA), {len(plan)} weights, {n_params / 1e9:.3f} B "
        f"parameters, {total / 1e9:.2f} GB in {len(shards)} shards, generating on {device}")
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.startswith("model-") and f.endswith(".safetensors"):
            os.remove(os.path.join(args.out, f))
    write_side_files(args.out, cfg)
    weight_map, t0 = {}, time.time()
    for s, items in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        gen = torch.Generator(device=device).manual_seed(args.seed * 100003 + s)  # one stream per shard
        t1 = time.time()
        tensors = generate_shard(items, gen, device, cfg["n_routed_experts"])
        t2 = time.time()
        fq.write_safetensors(os.path.join(args.out, fname), tensors)
        for k in tensors:
            weight_map[k] = fname
        size = os.path.getsize(os.path.join(args.out, fname))
        log(f"  {fname}: {len(tensors)} tensors, {size / 1e9:.3f} GB, draw+quantise {t2 - t1:.1f} s, "
            f"write {time.time() - t2:.1f} s")
        del tensors
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
        f.write("\n")
    log(f"wrote {args.out} in {time.time() - t0:.1f} s")
    return cfg


# ---------------------------------------------------------------------------------------------- validation (small)

def validate(out: str, log, prompt_len: int):
    """numpy-decode every shard (fixture_quant's independent decoder), load into HF DeepseekV4ForCausalLM through
    from_pretrained (HF's own name mapping), run one forward; then check hf_baseline's direct loader gives the same
    weights bit for bit and the same logits."""
    import numpy as np

    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        index = json.load(f)
    decoded, by_dtype = {}, {}
    for shard in sorted(set(index["weight_map"].values())):
        path = os.path.join(out, shard)
        for name, (dt, shape, raw) in fq.read_safetensors(path).items():
            by_dtype[dt] = by_dtype.get(dt, 0) + raw.size
        decoded.update(fq.dequantise_numpy(path))
    n_params = sum(v.size for v in decoded.values())
    log(f"[validate] {len(decoded)} weights, {n_params:,} parameters; stored bytes per dtype: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(by_dtype.items())))
    bad = [k for k, v in decoded.items() if v.dtype != np.int64 and not np.isfinite(v).all()]
    assert not bad, f"non-finite decoded weights: {bad[:5]}"
    ref = fq.load_decoded_into_hf(decoded, out)
    del decoded
    rp = ref.config.rope_parameters
    log(f"[validate] HF config: layer_types {ref.config.layer_types}, mlp {ref.config.mlp_layer_types}, "
        f"rope main {rp['main']}, compress {rp['compress']}")
    assert rp["compress"]["rope_type"] == "yarn" and rp["compress"]["attention_factor"] == 1.0
    assert abs(rp["compress"]["partial_rotary_factor"] - 0.125) < 1e-12
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, ref.config.vocab_size, (1, prompt_len), generator=g)
    t0 = time.time()
    with torch.no_grad():
        logits = ref(input_ids=ids, use_cache=False).logits[0].float()
    ok = bool(torch.isfinite(logits).all())
    log(f"[validate] HF fp32 forward of {prompt_len} random tokens: {time.time() - t0:.1f} s, logits finite: {ok}, "
        f"std {float(logits.std()):.4f}, max |logit| {float(logits.abs().max()):.4f}, "
        f"distinct argmax {int(logits.argmax(-1).unique().numel())}/{prompt_len}")
    assert ok
    import hf_baseline  # the benchmark loader must hold exactly these weights
    mine = hf_baseline.load_model(out, device="cpu", dtype=torch.float32, log=log)
    ref_sd, mine_sd = ref.state_dict(), mine.state_dict()
    assert set(ref_sd) == set(mine_sd), set(ref_sd) ^ set(mine_sd)
    diff = [k for k in ref_sd if not torch.equal(ref_sd[k], mine_sd[k])]
    assert not diff, f"hf_baseline loader differs from from_pretrained on {diff[:5]}"
    with torch.no_grad():
        logits2 = mine(input_ids=ids, use_cache=False).logits[0].float()
    log(f"[validate] hf_baseline.load_model: {len(ref_sd)} tensors bit-identical to from_pretrained's, "
        f"logits max |diff| {float((logits2 - logits).abs().max()):.3e}")
    assert torch.equal(logits, logits2)
    mine16 = hf_baseline.load_model(out, device="cpu", dtype=torch.bfloat16, log=log)
    with torch.no_grad():
        logits16 = mine16(input_ids=ids, use_cache=False).logits[0].float()
    rel = float((logits16 - logits).norm() / logits.norm())
    same = float((logits16.argmax(-1) == logits.argmax(-1)).float().mean())
    log(f"[validate] bf16 load (hf_baseline's benchmark dtype): logits finite {bool(torch.isfinite(logits16).all())}, "
        f"relative L2 error vs fp32 {rel:.3e}, argmax agreement {same:.3f}")
    assert torch.isfinite(logits16).all() and rel < 0.1
    log("[validate] OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4, help="decoder layers (targets: 4 and 8)")
    ap.add_argument("--out", required=True, help="output folder (existing model-*.safetensors are replaced)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="small widths, same code path (for validation on a CPU)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to draw and quantise")
    ap.add_argument("--shard-gb", type=float, default=5.0, help="largest shard in GB (1e9 bytes)")
    ap.add_argument("--validate", action="store_true", help="after writing: decode, load into HF, forward (small only)")
    ap.add_argument("--validate-only", action="store_true", help="only validate an existing --out folder")
    ap.add_argument("--prompt-len", type=int, default=300, help="tokens of the validation forward")
    args = ap.parse_args()
    log = lambda s: print(s, flush=True)  # noqa: E731
    if not args.validate_only:
        build(args, log)
    if args.validate or args.validate_only:
        validate(args.out, log, args.prompt_len)


if __name__ == "__main__":
    main()
