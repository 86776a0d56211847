"""DeepSeek-V4 checkpoint formats for scripts/make_fixtures.py (deepseek-v4.md §8.2-§8.4).

* quantise_state_dict: save_pretrained names/fp32 -> (upstream names in FP8/FP4/BF16/F32/I64,
  exactly dequantised fp32 under the save_pretrained names)  [torch]
* write_safetensors: hand-written safetensors writer (F8_E4M3, F8_E8M0, I8, BF16, F32, I64)
* read_safetensors / dequantise_numpy: an independent numpy reader + decoder of §8.4, used to validate
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile

import numpy as np
import torch

FP8_BLOCK = 128
FP4_GROUP = 32
E4M3_MAX = 448.0
E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])

FP8_RE = re.compile(r"^layers\.\d+\.(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|attn\.indexer\.wq_b|ffn\.shared_experts\.w[123])\.weight$")
FP4_RE = re.compile(r"^layers\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$")
BF16_RE = re.compile(r"^(embed\.weight|head\.weight|norm\.weight|layers\.\d+\.(attn_norm|ffn_norm)\.weight|"
                     r"layers\.\d+\.attn\.(q_norm|kv_norm)\.weight|"
                     r"layers\.\d+\.attn\.(indexer\.)?compressor\.(wkv|wgate|norm)\.weight|"
                     r"layers\.\d+\.attn\.indexer\.weights_proj\.weight|layers\.\d+\.ffn\.gate\.weight)$")
F32_RE = re.compile(r"^(hc_head_(fn|base|scale)|layers\.\d+\.hc_(attn|ffn)_(fn|base|scale)|layers\.\d+\.attn\.attn_sink|"
                    r"layers\.\d+\.attn\.(indexer\.)?compressor\.ape|layers\.\d+\.ffn\.gate\.bias)$")
I64_RE = re.compile(r"^layers\.\d+\.ffn\.gate\.tid2eid$")


# ---------------------------------------------------------------------------------------------- names

def to_upstream(name: str) -> str:
    """save_pretrained name (deepseek-v4.md §8.3) -> DeepSeek release name (§8.2)."""
    n = name[len("model."):] if name.startswith("model.") else name
    n = {"embed_tokens.weight": "embed.weight", "hc_head.hc_fn": "hc_head_fn", "hc_head.hc_base": "hc_head_base",
         "hc_head.hc_scale": "hc_head_scale"}.get(n, n)
    return re.sub(r"^(layers\.\d+\.attn)\.norm\.weight$", r"\1.kv_norm.weight", n)


def from_upstream(name: str) -> str:
    """Inverse of to_upstream."""
    n = {"embed.weight": "embed_tokens.weight", "hc_head_fn": "hc_head.hc_fn", "hc_head_base": "hc_head.hc_base",
         "hc_head_scale": "hc_head.hc_scale"}.get(name, name)
    n = re.sub(r"^(layers\.\d+\.attn)\.kv_norm\.weight$", r"\1.norm.weight", n)
    return n if n == "head.weight" else "model." + n


# ---------------------------------------------------------------------------------------------- quantisers (torch)

def _pow2_exponent(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    """Smallest integer e with amax <= qmax * 2^e (exact test), clamped to the ue8m0 range."""
    e = torch.ceil(torch.log2(torch.clamp(amax, min=2.0 ** -120) / qmax))
    e = e + (amax / torch.exp2(e) > qmax).float()  # guard the rounding of log2
    e = e - ((amax / torch.exp2(e - 1) <= qmax) & (e > -126)).float()
    return torch.clamp(e, -127, 127)


def quantise_fp8(w: torch.Tensor):
    """w [out, in] fp32 -> (e4m3 [out, in], e8m0 scales [ceil(out/128), ceil(in/128)], dequantised fp32)."""
    out_dim, in_dim = w.shape
    bo, bi = -(-out_dim // FP8_BLOCK), -(-in_dim // FP8_BLOCK)
    padded = torch.zeros(bo * FP8_BLOCK, bi * FP8_BLOCK, device=w.device)  # w may live on a GPU (make_bench_model.py)
    padded[:out_dim, :in_dim] = w
    amax = padded.abs().view(bo, FP8_BLOCK, bi, FP8_BLOCK).amax(dim=(1, 3))
    e = _pow2_exponent(amax, E4M3_MAX)
    scale_full = torch.exp2(e).repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:out_dim, :in_dim]
    x = w / scale_full
    assert float(x.abs().max()) <= E4M3_MAX
    q = x.to(torch.float8_e4m3fn)
    deq = q.float() * scale_full
    s = (e + 127).to(torch.uint8).view(torch.float8_e8m0fnu)
    return q, s, deq


def quantise_fp4(w: torch.Tensor):
    """w [out, in] fp32 -> (packed int8 [out, in/2], e8m0 scales [out, in/32], dequantised fp32)."""
    out_dim, in_dim = w.shape
    assert in_dim % FP4_GROUP == 0, (out_dim, in_dim)
    groups = w.view(out_dim, in_dim // FP4_GROUP, FP4_GROUP)
    e = _pow2_exponent(groups.abs().amax(dim=2), 6.0)
    x = groups / torch.exp2(e)[..., None]
    grid = E2M1_GRID.to(w.device)
    mag = torch.argmin((x.abs()[..., None] - grid).abs(), dim=-1)  # ties -> smaller magnitude
    sign = (x < 0) & (mag > 0)
    code = (mag | (sign.long() << 3)).view(out_dim, in_dim).to(torch.uint8)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).view(torch.int8)
    deq = (grid[mag] * torch.where(sign, -1.0, 1.0) * torch.exp2(e)[..., None]).view(out_dim, in_dim)
    s = (e + 127).to(torch.uint8).view(torch.float8_e8m0fnu)
    return packed, s, deq


def quantise_state_dict(saved: dict):
    """saved: save_pretrained tensors (fp32). Returns (upstream tensors to store, dequantised fp32 by saved name)."""
    upstream, dequant = {}, {}
    for name, t in saved.items():
        up = to_upstream(name)
        if FP8_RE.match(up):
            q, s, deq = quantise_fp8(t.float())
            upstream[up], upstream[up[: -len(".weight")] + ".scale"] = q, s
        elif FP4_RE.match(up):
            q, s, deq = quantise_fp4(t.float())
            upstream[up], upstream[up[: -len(".weight")] + ".scale"] = q, s
        elif BF16_RE.match(up):
            upstream[up] = t.to(torch.bfloat16)
            deq = upstream[up].float()
        elif F32_RE.match(up):
            upstream[up] = deq = t.float()
        elif I64_RE.match(up):
            upstream[up] = deq = t.to(torch.int64)
        else:
            raise ValueError(f"no storage format for tensor {name} (upstream {up})")
        dequant[name] = deq.contiguous()
    return upstream, dequant


# ---------------------------------------------------------------------------------------------- file format

_DTYPE_NAMES = {torch.float8_e4m3fn: "F8_E4M3", torch.float8_e8m0fnu: "F8_E8M0", torch.int8: "I8",
                torch.bfloat16: "BF16", torch.float32: "F32", torch.int64: "I64"}


def write_safetensors(path: str, tensors: dict):
    """8-byte LE header length + JSON header (padded with spaces to 8 bytes) + raw little-endian data."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path: str) -> dict:
    """Independent reader: name -> (dtype string, shape, raw bytes as np.uint8)."""
    raw = np.fromfile(path, dtype=np.uint8)
    n = int(raw[:8].view("<u8")[0])
    header = json.loads(raw[8:8 + n].tobytes())
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), raw[base + a: base + b])
    return out


# ---------------------------------------------------------------------------------------------- numpy decoder (§8.4)

def _e4m3_table() -> np.ndarray:
    t = np.zeros(256, dtype=np.float64)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = np.nan if (e == 15 and m == 7) else (-v if s else v)
    return t


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def e8m0(raw: np.ndarray) -> np.ndarray:
    v = np.ldexp(1.0, raw.astype(np.int64) - 127)
    return np.where(raw == 255, np.nan, v)


def dequantise_numpy(path: str) -> dict:
    """Reads a quantised upstream checkpoint; returns save_pretrained name -> fp32 numpy array."""
    st = read_safetensors(path)
    out = {}
    for name, (dtype, shape, raw) in st.items():
        if name.endswith(".scale"):
            continue
        scale_name = name[: -len(".weight")] + ".scale"
        if dtype == "F8_E4M3":
            sdt, sshape, sraw = st[scale_name]
            assert sdt == "F8_E8M0" and sshape == (-(-shape[0] // 128), -(-shape[1] // 128)), (name, sshape)
            s = e8m0(sraw).reshape(sshape)
            rows, cols = np.arange(shape[0]) // 128, np.arange(shape[1]) // 128
            w = E4M3_TABLE[raw].reshape(shape) * s[rows[:, None], cols[None, :]]
        elif dtype == "I8":
            sdt, sshape, sraw = st[scale_name]
            full = (shape[0], shape[1] * 2)
            assert sdt == "F8_E8M0" and sshape == (full[0], full[1] // 32), (name, sshape)
            codes = np.empty(full, dtype=np.uint8)
            codes[:, 0::2] = raw.reshape(shape) & 0x0F  # element 2j: low nibble
            codes[:, 1::2] = raw.reshape(shape) >> 4
            w = E2M1_TABLE[codes] * np.repeat(e8m0(sraw).reshape(sshape), 32, axis=1)
        elif dtype == "BF16":
            w = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
        elif dtype == "F32":
            w = raw.view("<f4").reshape(shape)
        elif dtype == "I64":
            w = raw.view("<i8").reshape(shape)
        else:
            raise ValueError(f"{name}: unexpected dtype {dtype}")
        out[from_upstream(name)] = w.astype(np.int64 if dtype == "I64" else np.float32)
    return out


def bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def compare(decoded: dict, expected: dict, what: str):
    assert set(decoded) == set(expected), (what, set(decoded) ^ set(expected))
    bad = [n for n in expected if not bit_equal(decoded[n], expected[n].numpy() if torch.is_tensor(expected[n]) else expected[n])]
    assert not bad, f"{what}: not bit-identical: {bad[:5]}"


def load_decoded_into_hf(decoded: dict, model_dir: str):
    """Loads decoded (dequantised) weights into DeepseekV4ForCausalLM through from_pretrained (HF's own
    name mapping), using model_dir's config.json without its quantisation keys. fp32, eager attention."""
    from safetensors.torch import save_file
    from transformers import DeepseekV4ForCausalLM

    tmp = tempfile.mkdtemp(prefix="v4-decoded-")
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        for k in ("quantization_config", "expert_dtype"):
            cfg.pop(k, None)
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        save_file({k: torch.from_numpy(v) for k, v in decoded.items()}, os.path.join(tmp, "model.safetensors"),
                  metadata={"format": "pt"})
        model, info = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32, output_loading_info=True,
                                                            attn_implementation="eager")
        assert not any(info.values()), f"from_pretrained: {info}"
        return model.eval()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def validate_quantised(dest: str, spec, log):
    """Dequantises model.safetensors with numpy, loads the result into HF, checks that HF holds exactly those
    weights (bit for bit, re-read from HF's own save), returns the model."""
    from safetensors.torch import load_file

    decoded = dequantise_numpy(os.path.join(dest, "model.safetensors"))
    model = load_decoded_into_hf(decoded, dest)
    tmp = tempfile.mkdtemp(prefix="v4quant-validate-")
    try:
        model.save_pretrained(tmp)
        compare(decoded, load_file(os.path.join(tmp, "model.safetensors")), "numpy decode vs weights held by HF")
        n_q = sum(1 for _, (dt, _, _) in read_safetensors(os.path.join(dest, "model.safetensors")).items() if dt in ("F8_E4M3", "I8"))
        log(f"  numpy decoder: {len(decoded)} tensors ({n_q} FP8/FP4) bit-identical to the weights loaded into HF")
        return model
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
