#!/usr/bin/env python3
"""Build tiny random DeepSeek-V4 checkpoints with reference outputs from Hugging Face transformers.

Every fixture is a folder tests/data/v4-fixtures/<name>/ with
  config.json, generation_config.json  -- as written by save_pretrained (+ quantization keys for quantised ones)
  model.safetensors                    -- fp32 fixtures: what save_pretrained writes;
                                          quantised fixtures: DeepSeek's upstream names and formats (FP8/FP4/BF16)
  reference_outputs.safetensors        -- promptN.ids int64 [len], promptN.logits fp32 [len, vocab]
                                          (full forward, no cache), promptN.greedy int64 [24]
                                          (generate(do_sample=False, use_cache=True, eos_token_id=None))
  SOURCES.md                           -- how it was made, the command line, the tie-check results

Reference outputs of a quantised fixture are computed by the HF model on the exactly dequantised weights.

Fixture rules checked while generating (a failing seed is dropped and the next seed is tried):
  * no exact tie at the Lightning Indexer's top-k boundary in any forward: full (no cache), the greedy
    generation (incremental cache path) and chunked prefill of prompt+continuation with chunk sizes
    1, 3, 7, 64; the smallest boundary gap relative to the row's largest |score| must be >= --min-index-gap;
  * the greedy argmax is never close to a tie: top-1 minus top-2 logit >= --min-greedy-gap at every step;
  * chunked prefill logits agree with the one-shot forward (sanity of the fixture itself).

Usage (repo root):  python3 scripts/make_fixtures.py [--only NAME ...] [--out tests/data/v4-fixtures]
                    python3 scripts/make_fixtures.py --validate-only
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Indexer, DeepseekV4IndexerScorer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_quant as fq  # noqa: E402  (FP8/FP4 quantisation + independent numpy decoder)

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
N_GREEDY = 24
CHUNK_SIZES = (1, 3, 7, 64)


def yarn(theta, factor, original, r_factor):
    return {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
            "original_max_position_embeddings": original, "beta_fast": 32.0, "beta_slow": 1.0,
            "attention_factor": 1.0, "partial_rotary_factor": r_factor}


def default_rope(theta, r_factor):
    return {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": r_factor}


# deepseek-v4.md §10.3 (config B, "every switch on"), fp32.
V4TINY_YARN = dict(
    config=dict(
        vocab_size=256, hidden_size=64, num_hidden_layers=6,
        layer_types=[SLIDING, CSA, HCA, CSA, HCA, SLIDING],
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe", "moe"],
        num_attention_heads=4, head_dim=32, partial_rotary_factor=0.25, q_lora_rank=32,
        o_groups=2, o_lora_rank=16, sliding_window=8, compress_rates={CSA: 4, HCA: 8},
        index_n_heads=8, index_head_dim=16, index_topk=3,
        n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
        hc_mult=3, hc_sinkhorn_iters=5, max_position_embeddings=256,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"main": default_rope(10000.0, 0.25), "compress": yarn(160000.0, 4.0, 64, 0.25)},
    ),
    prompt_lengths=(1, 7, 41, 120), seed=300, quantised=False,
)

# deepseek-v4.md §10.4 (config C, "Flash-shaped, quantised"), shrunk: Flash layer order, Flash formats.
# wo_a [160, 128] / wo_b [128, 160] (o_lora_rank 80) are ragged on purpose: the last 128-block has 32 rows/cols.
V4TINY_QUANT = dict(
    config=dict(
        vocab_size=384, hidden_size=128, num_hidden_layers=5,
        layer_types=[SLIDING, SLIDING, CSA, HCA, CSA],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe", "moe"],
        num_attention_heads=2, head_dim=128, partial_rotary_factor=0.125, q_lora_rank=128,
        o_groups=2, o_lora_rank=80, sliding_window=16, compress_rates={CSA: 4, HCA: 16},
        index_n_heads=8, index_head_dim=32, index_topk=8,
        n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=128,
        hc_mult=4, hc_sinkhorn_iters=20, max_position_embeddings=4096,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"main": default_rope(10000.0, 0.125), "compress": yarn(160000.0, 16.0, 256, 0.125)},
    ),
    prompt_lengths=(1, 9, 77, 190), seed=400, quantised=True,
)

# Coverage variations not in A/B/C: hc_mult 2, 8 heads in 4 output groups, full rope on the indexer width
# (r = index_head_dim), CSA-only compressed layers back to back, HCA rate 4x the window, index_topk 1.
V4TINY_VARIANT = dict(
    config=dict(
        vocab_size=192, hidden_size=96, num_hidden_layers=4,
        layer_types=[CSA, CSA, SLIDING, HCA],
        mlp_layer_types=["moe", "hash_moe", "moe", "hash_moe"],
        num_attention_heads=8, head_dim=16, partial_rotary_factor=1.0, q_lora_rank=48,
        o_groups=4, o_lora_rank=24, sliding_window=4, compress_rates={CSA: 4, HCA: 16},
        index_n_heads=12, index_head_dim=16, index_topk=1,
        n_routed_experts=4, num_experts_per_tok=3, moe_intermediate_size=48,
        hc_mult=2, hc_sinkhorn_iters=10, max_position_embeddings=512,
        rope_theta=10000.0, compress_rope_theta=40000.0, routed_scaling_factor=2.5, swiglu_limit=0.5,
        rope_parameters={"main": default_rope(10000.0, 1.0), "compress": yarn(40000.0, 8.0, 64, 1.0)},
    ),
    prompt_lengths=(2, 13, 50, 101), seed=500, quantised=False,
)

FIXTURES = {"v4tiny_yarn": V4TINY_YARN, "v4tiny_quant": V4TINY_QUANT, "v4tiny_variant": V4TINY_VARIANT}


# ----------------------------------------------------------------------------------------------
# model construction


def make_config(spec):
    cfg = DeepseekV4Config(**copy.deepcopy(spec["config"]), bos_token_id=0, eos_token_id=1)
    cfg._attn_implementation = "eager"
    # Guard against the nested-rope trap of deepseek-v4.md §1.3.
    comp = cfg.rope_parameters["compress"]
    assert comp.get("attention_factor") == 1.0 and "partial_rotary_factor" in comp, comp
    return cfg


def is_norm(name):
    return name.endswith("norm.weight") or name.endswith("layernorm.weight")


def redraw(model, seed):
    """Norms 1 + 0.1 N(0,1); correction bias 0.5 N(0,1); tid2eid uniform; everything else 0.08 N(0,1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(1.0 + 0.1 * noise if is_norm(name) else 0.08 * noise)
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.5 * torch.randn(b.shape, generator=g))
            elif name.endswith("tid2eid"):
                b.copy_(torch.randint(0, model.config.n_routed_experts, b.shape, generator=g))
                rows_with_repeat = int((b[:, 0] == b[:, 1]).sum()) if b.shape[1] > 1 else 0
                assert 0 < rows_with_repeat < b.shape[0], "tid2eid needs distinct and repeated ids"


def make_prompts(spec, seed):
    g = torch.Generator().manual_seed(seed + 7919)
    vocab = spec["config"]["vocab_size"]
    return [torch.randint(0, vocab, (n,), generator=g) for n in spec["prompt_lengths"]]


# ----------------------------------------------------------------------------------------------
# Lightning Indexer probe and tie check (deepseek-v4.md §5.5)


class IndexerProbe:
    """Records (position_ids, raw scores [B,S,T], top-k, rate) for every Lightning Indexer call."""

    def __init__(self, model):
        self.records, self.handles, self._pos = [], [], None
        for mod in model.modules():
            if isinstance(mod, DeepseekV4Indexer):
                self.handles.append(mod.register_forward_pre_hook(self._pre(mod)))
                self.handles.append(mod.scorer.register_forward_hook(self._post(mod)))

    def _pre(self, mod):
        def hook(_m, args):
            self._pos = args[2].detach().clone()  # position_ids [B, S]
        return hook

    def _post(self, mod):
        def hook(_m, _args, out):
            self.records.append((self._pos, out.detach().clone(), mod.index_topk, mod.compress_rate))
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def boundary_stats(records):
    """Returns (rows with a real top-k choice, exact ties, smallest relative boundary gap)."""
    rows = ties = 0
    min_gap = float("inf")
    for pos, scores, topk, rate in records:
        T = scores.shape[-1]
        k = min(topk, T)
        for b in range(scores.shape[0]):
            for s in range(scores.shape[1]):
                visible = int(pos[b, s] + 1) // rate
                if visible <= k:
                    continue  # every visible entry is selected: nothing depends on the order
                row = scores[b, s, :visible].double()
                srt = torch.sort(row, descending=True).values
                gap = float(srt[k - 1] - srt[k])
                scale = float(row.abs().max())
                rows += 1
                if gap == 0.0:
                    ties += 1
                min_gap = min(min_gap, gap / scale if scale > 0 else 0.0)
    return rows, ties, min_gap


# ----------------------------------------------------------------------------------------------
# reference computation


@torch.no_grad()
def full_logits(model, ids):
    return model(input_ids=ids[None], use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, ids):
    # An explicit all-ones attention mask: without it HF infers padding from pad_token_id and
    # masks every prompt token that happens to equal it (prompt ids may contain 0).
    out = model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), do_sample=False,
                         max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY,
                         use_cache=True, eos_token_id=None, pad_token_id=0, output_scores=True,
                         return_dict_in_generate=True)
    new = out.sequences[0, ids.numel():]
    assert new.numel() == N_GREEDY, new.numel()
    gaps = [float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in out.scores]
    return new.clone(), min(gaps)


@torch.no_grad()
def chunked_logits(model, ids, chunk):
    past, outs = None, []
    for start in range(0, ids.numel(), chunk):
        out = model(input_ids=ids[None, start:start + chunk], past_key_values=past, use_cache=True)
        past = out.past_key_values
        outs.append(out.logits[0].float())
    return torch.cat(outs)


def compute_references(model, prompts, log):
    """Runs every forward, with the indexer probe on. Returns (tensors, stats)."""
    probe = IndexerProbe(model)
    refs, greedy_gap, chunk_err = {}, float("inf"), 0.0
    try:
        for i, ids in enumerate(prompts):
            logits = full_logits(model, ids)
            new, gap = greedy(model, ids)
            greedy_gap = min(greedy_gap, gap)
            refs[f"prompt{i}.ids"] = ids.to(torch.int64).contiguous()
            refs[f"prompt{i}.logits"] = logits.contiguous()
            refs[f"prompt{i}.greedy"] = new.to(torch.int64).contiguous()
            seq = torch.cat([ids, new])
            one_shot = full_logits(model, seq)
            for c in CHUNK_SIZES:
                got = chunked_logits(model, seq, c)
                err = ((got - one_shot).norm(dim=-1) / one_shot.norm(dim=-1)).max().item()
                chunk_err = max(chunk_err, err)
    finally:
        probe.close()
    rows, ties, min_gap = boundary_stats(probe.records)
    stats = dict(indexer_calls=len(probe.records), indexer_rows_with_choice=rows, indexer_ties=ties,
                 indexer_min_rel_gap=min_gap, greedy_min_top2_gap=greedy_gap, chunked_max_rel_err=chunk_err)
    log(f"    {stats}")
    return refs, stats


# ----------------------------------------------------------------------------------------------
# one fixture


def build(name, spec, out_dir, args, log):
    cfg = make_config(spec)
    rejected = []
    for attempt in range(args.max_attempts):
        seed = spec["seed"] + attempt
        log(f"[{name}] seed {seed}")
        torch.manual_seed(seed)
        model = DeepseekV4ForCausalLM(cfg).float().eval()
        redraw(model, seed)
        tmp = tempfile.mkdtemp(prefix=f"{name}-")
        try:
            quant = dequant = None
            if spec["quantised"]:
                quant, dequant, model = quantise_model(model, tmp)
            prompts = make_prompts(spec, seed)
            refs, stats = compute_references(model, prompts, log)
            problems = []
            if stats["indexer_ties"]:
                problems.append(f"{stats['indexer_ties']} exact indexer ties at the top-k boundary")
            if stats["indexer_min_rel_gap"] < args.min_index_gap:
                problems.append(f"indexer boundary gap {stats['indexer_min_rel_gap']:.2e} < {args.min_index_gap}")
            if stats["greedy_min_top2_gap"] < args.min_greedy_gap:
                problems.append(f"greedy top-2 gap {stats['greedy_min_top2_gap']:.2e} < {args.min_greedy_gap}")
            if stats["chunked_max_rel_err"] > 1e-5:
                problems.append(f"chunked prefill differs by {stats['chunked_max_rel_err']:.2e}")
            if problems:
                log(f"[{name}] seed {seed} rejected: {'; '.join(problems)}")
                rejected.append((seed, problems))
                continue
            write_fixture(name, spec, model, quant, refs, stats, seed, rejected, out_dir, tmp)
            if dequant is not None:  # the independent numpy decoder must give back exactly what HF ran on
                fq.compare(fq.dequantise_numpy(os.path.join(out_dir, name, "model.safetensors")), dequant,
                           "numpy decode of model.safetensors vs weights of the reference run")
                log(f"[{name}] numpy decode of the stored file is bit-identical to the reference weights")
            return
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    raise SystemExit(f"[{name}] no acceptable seed in {args.max_attempts} attempts")


def quantise_model(model, tmp):
    """Quantises the model's weights to DeepSeek's formats; returns (upstream tensors, model on dequantised
    weights). The dequantised model is reloaded through from_pretrained so the name mapping is exercised."""
    src = os.path.join(tmp, "fp32")
    model.save_pretrained(src)
    saved = load_file(os.path.join(src, "model.safetensors"))
    upstream, dequant = fq.quantise_state_dict(saved)
    save_file(dequant, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    reloaded, info = DeepseekV4ForCausalLM.from_pretrained(src, dtype=torch.float32, output_loading_info=True,
                                                           attn_implementation="eager")
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"loading the dequantised weights: {bad}"
    return upstream, dequant, reloaded.eval()


def write_fixture(name, spec, model, quant, refs, stats, seed, rejected, out_dir, tmp):
    dest = os.path.join(out_dir, name)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    model.save_pretrained(dest)
    if quant is not None:
        with open(os.path.join(dest, "config.json")) as f:
            cfg = json.load(f)
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                      "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
        cfg["expert_dtype"] = "fp4"
        with open(os.path.join(dest, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        fq.write_safetensors(os.path.join(dest, "model.safetensors"), quant)
    save_file(refs, os.path.join(dest, "reference_outputs.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(dest, "SOURCES.md"), "w") as f:
        f.write(sources_md(name, spec, seed, rejected, stats))
    for f in os.listdir(dest):
        os.chmod(os.path.join(dest, f), 0o644)


def sources_md(name, spec, seed, rejected, stats):
    c = spec["config"]
    lines = [f"# {name} — tiny random DeepSeek-V4 checkpoint with reference outputs", ""]
    lines.append(f"Regenerate (repo root): `python3 scripts/make_fixtures.py --only {name}` "
                 f"(pinned versions: scripts/fixture_requirements.txt). Built with transformers "
                 f"{transformers.__version__} (`DeepseekV4ForCausalLM`, eager attention), torch {torch.__version__.split('+')[0]}, "
                 "CPU, fp32, 1 thread. Coverage and formats: docs/fixtures.md.")
    lines.append("")
    lines.append(f"- Config: hidden {c['hidden_size']}, layers {c['layer_types']}, mlp {c['mlp_layer_types']}, "
                 f"heads {c['num_attention_heads']}×{c['head_dim']} (rope factor {c['partial_rotary_factor']}), "
                 f"o_groups {c['o_groups']}×{c['o_lora_rank']}, window {c['sliding_window']}, rates {c['compress_rates']}, "
                 f"indexer {c['index_n_heads']}×{c['index_head_dim']} top-{c['index_topk']}, experts {c['n_routed_experts']} "
                 f"top-{c['num_experts_per_tok']} (+1 shared) width {c['moe_intermediate_size']}, hc_mult {c['hc_mult']} "
                 f"({c['hc_sinkhorn_iters']} Sinkhorn iterations), vocab {c['vocab_size']}; rope_parameters "
                 f"{json.dumps(c['rope_parameters'], sort_keys=True)} (nested: `attention_factor` and "
                 "`partial_rotary_factor` written explicitly, deepseek-v4.md §1.3).")
    lines.append(f"- Weights (seed {seed}): norms 1 + 0.1·N(0,1), `e_score_correction_bias` 0.5·N(0,1), `tid2eid` "
                 "uniform random expert ids (rows with distinct and with repeated ids), everything else 0.08·N(0,1).")
    if spec["quantised"]:
        lines.append("- `model.safetensors` holds DeepSeek's upstream names and formats (not save_pretrained's): "
                     "FP8 E4M3 + F8_E8M0 `.scale` per 128×128 block for `wq_a, wq_b, wkv, wo_a, wo_b, indexer.wq_b, "
                     "shared_experts.w1/w2/w3`; routed experts FP4 E2M1 packed two per byte (low nibble = even "
                     "element) as I8 `[out, in/2]` with F8_E8M0 `.scale` `[out, in/32]`; BF16 for embed, head, "
                     "compressor wkv/wgate, indexer weights_proj, ffn.gate.weight and norm weights; F32 for sinks, "
                     "hc_*, ape, gate.bias; I64 tid2eid. `wo_a` [160,128] / `wo_b` [128,160] have a ragged last "
                     "128-block (scale shape ceil(out/128) × ceil(in/128)). The references were computed by the HF "
                     "model on the exactly dequantised weights.")
    else:
        lines.append("- `model.safetensors` is what `save_pretrained` writes (fp32, DeepSeek-style names, deepseek-v4.md §8.3).")
    lengths = ", ".join(str(n) for n in spec["prompt_lengths"])
    lines.append(f"- `reference_outputs.safetensors`: prompts 0..{len(spec['prompt_lengths']) - 1} (lengths {lengths}, "
                 "uniform random ids): `promptN.ids` int64, `promptN.logits` fp32 [len, vocab] (full forward, no "
                 f"cache), `promptN.greedy` int64 [{N_GREEDY}] (`generate(do_sample=False, use_cache=True, "
                 "eos_token_id=None)`: incremental cache path, EOS ignored).")
    lines.append(f"- Checked while generating: {stats['indexer_calls']} Lightning Indexer calls (full forwards, greedy "
                 f"generation, chunked prefill of prompt+continuation in chunks of {', '.join(map(str, CHUNK_SIZES))}); "
                 f"{stats['indexer_rows_with_choice']} query rows with a real top-k choice, 0 exact ties at the top-k "
                 f"boundary, smallest boundary gap {stats['indexer_min_rel_gap']:.2e} of the row's largest |score|. "
                 f"Smallest greedy top-1/top-2 logit gap {stats['greedy_min_top2_gap']:.2e}. Chunked prefill logits "
                 f"within {stats['chunked_max_rel_err']:.1e} (row-relative) of the one-shot forward.")
    if rejected:
        for s, why in rejected:
            lines.append(f"- Seed {s} was rejected: {'; '.join(why)}.")
    else:
        lines.append("- The first seed passed every check (no seed was rejected).")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# validation of the written folders


def validate(name, spec, out_dir, log):
    dest = os.path.join(out_dir, name)
    refs = load_file(os.path.join(dest, "reference_outputs.safetensors"))
    if spec["quantised"]:
        model = fq.validate_quantised(dest, spec, log)
    else:
        model = DeepseekV4ForCausalLM.from_pretrained(dest, dtype=torch.float32, attn_implementation="eager").eval()
    n = len(spec["prompt_lengths"])
    for i in (n - 1,):
        ids = refs[f"prompt{i}.ids"]
        logits = full_logits(model, ids)
        err = (logits - refs[f"prompt{i}.logits"]).abs().max().item()
        new, _ = greedy(model, ids)
        same = torch.equal(new, refs[f"prompt{i}.greedy"])
        log(f"[{name}] reload: prompt{i} max |logit diff| {err:.3e}, greedy identical: {same}")
        assert err == 0.0 or err < 1e-6, err
        assert same
    size = sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest))
    log(f"[{name}] OK, {size / 1e6:.2f} MB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/v4-fixtures")
    ap.add_argument("--only", nargs="*", choices=sorted(FIXTURES), help="fixtures to build (default: all)")
    ap.add_argument("--validate-only", action="store_true", help="only reload and check existing folders")
    ap.add_argument("--max-attempts", type=int, default=20, help="seeds to try per fixture")
    ap.add_argument("--min-index-gap", type=float, default=2e-5,
                    help="smallest allowed indexer top-k boundary gap, relative to the row's largest |score|")
    ap.add_argument("--min-greedy-gap", type=float, default=1e-3, help="smallest allowed greedy top-2 logit gap")
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    names = args.only or list(FIXTURES)
    log = lambda s: print(s, flush=True)  # noqa: E731
    for name in names:
        if not args.validate_only:
            build(name, FIXTURES[name], args.out, args, log)
        validate(name, FIXTURES[name], args.out, log)


if __name__ == "__main__":
    main()
