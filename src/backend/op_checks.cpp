#include "backend/op_checks.h"

#include <string>

namespace deepinfer::backend {

namespace {
std::string num(int64_t v) { return std::to_string(v); }
}  // namespace

StatusOr<MatmulDims> check_matmul(const Tensor& x, const Tensor& w, const Tensor& out,
                                  int64_t groups) {
  if (groups < 1) return InvalidArgument("matmul: groups must be >= 1, got " + num(groups));
  DI_RETURN_IF_ERROR(check_rank("matmul", "x", x, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank("matmul", "w", w, DType::kF32, 2));
  const int64_t M = x.dim(0), GK = x.dim(1), GN = w.dim(0), K = w.dim(1);
  if (GK != groups * K || GN % groups != 0) {
    return InvalidArgument("matmul: x " + x.describe() + " and w " + w.describe() +
                           " do not form a " + num(groups) + "-group GEMM (need x [M, G*K], w [G*N, K])");
  }
  DI_RETURN_IF_ERROR(check_tensor("matmul", "out", out, DType::kF32, {M, GN}));
  return MatmulDims{M, K, GN / groups, groups};
}

StatusOr<RowsDims> check_rms_norm(const Tensor& x, const Tensor* weight, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("rms_norm", "x", x, DType::kF32, 2));
  const int64_t M = x.dim(0), N = x.dim(1);
  if (weight) DI_RETURN_IF_ERROR(check_tensor("rms_norm", "weight", *weight, DType::kF32, {N}));
  DI_RETURN_IF_ERROR(check_tensor("rms_norm", "out", out, DType::kF32, {M, N}));
  return RowsDims{M, N};
}

StatusOr<RopeDims> check_rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  DI_RETURN_IF_ERROR(check_rank("rope", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), nh = x.dim(1), D = x.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("rope", "positions", positions, DType::kI32, {S}));
  DI_RETURN_IF_ERROR(check_rank("rope", "inv_freq", inv_freq, DType::kF32, 1));
  const int64_t half = inv_freq.dim(0);
  if (2 * half > D) {
    return InvalidArgument("rope: rotary width " + num(2 * half) + " exceeds head dim " + num(D));
  }
  return RopeDims{S, nh, D, half};
}

StatusOr<AttentionDims> check_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& key_offsets, const Tensor& key_ids,
                                        const Tensor* sinks, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("attention", "q", q, DType::kF32, 3));
  const int64_t S = q.dim(0), nH = q.dim(1), D = q.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("attention", "k", k, DType::kF32, {-1, -1, D}));
  const int64_t T = k.dim(0), nKV = k.dim(1);
  DI_RETURN_IF_ERROR(check_tensor("attention", "v", v, DType::kF32, {T, nKV, -1}));
  const int64_t Dv = v.dim(2);
  if (nKV < 1 || nH % nKV != 0) {
    return InvalidArgument("attention: " + num(nH) + " query heads are not a multiple of " +
                           num(nKV) + " kv heads");
  }
  DI_RETURN_IF_ERROR(check_tensor("attention", "key_offsets", key_offsets, DType::kI32, {S + 1}));
  DI_RETURN_IF_ERROR(check_rank("attention", "key_ids", key_ids, DType::kI32, 1));
  if (sinks) DI_RETURN_IF_ERROR(check_tensor("attention", "sinks", *sinks, DType::kF32, {nH}));
  DI_RETURN_IF_ERROR(check_tensor("attention", "out", out, DType::kF32, {S, nH, Dv}));
  return AttentionDims{S, nH, D, T, nKV, Dv, key_ids.dim(0)};
}

StatusOr<PoolDims> check_softmax_pool(const Tensor& values, const Tensor& scores,
                                      const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("softmax_pool", "values", values, DType::kF32, 3));
  const int64_t n = values.dim(0), L = values.dim(1), d = values.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("softmax_pool", "scores", scores, DType::kF32, {n, L, d}));
  DI_RETURN_IF_ERROR(check_tensor("softmax_pool", "out", out, DType::kF32, {n, d}));
  return PoolDims{n, L, d};
}

StatusOr<IndexerDims> check_indexer_scores(const Tensor& q, const Tensor& weights,
                                           const Tensor& keys, const Tensor& visible,
                                           const Tensor& out, const Tensor* key_start) {
  DI_RETURN_IF_ERROR(check_rank("indexer_scores", "q", q, DType::kF32, 3));
  const int64_t S = q.dim(0), nI = q.dim(1), cI = q.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "weights", weights, DType::kF32, {S, nI}));
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "keys", keys, DType::kF32, {-1, cI}));
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "visible", visible, DType::kI32, {S}));
  if (key_start) {
    DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "key_start", *key_start, DType::kI32, {S}));
    DI_RETURN_IF_ERROR(check_rank("indexer_scores", "out", out, DType::kF32, 2));
    DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "out", out, DType::kF32, {S, out.dim(1)}));
    return IndexerDims{S, nI, cI, out.dim(1)};
  }
  const int64_t T = keys.dim(0);
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "out", out, DType::kF32, {S, T}));
  return IndexerDims{S, nI, cI, T};
}

StatusOr<TopkDims> check_topk(const Tensor& scores, int64_t k, const Tensor& ids) {
  DI_RETURN_IF_ERROR(check_rank("topk", "scores", scores, DType::kF32, 2));
  if (k < 0) return InvalidArgument("topk: k must be >= 0, got " + num(k));
  DI_RETURN_IF_ERROR(check_tensor("topk", "ids", ids, DType::kI32, {scores.dim(0), k}));
  return TopkDims{scores.dim(0), scores.dim(1), k};
}

StatusOr<RouteDims> check_moe_route(const Tensor& logits, const Tensor* bias,
                                    const Tensor* hash_ids, const RouterParams& params,
                                    const Tensor& ids, const Tensor& weights) {
  DI_RETURN_IF_ERROR(check_rank("moe_route", "logits", logits, DType::kF32, 2));
  const int64_t S = logits.dim(0), E = logits.dim(1), k = params.top_k;
  if (k < 1 || k > E) {
    return InvalidArgument("moe_route: top_k " + num(k) + " must be in [1, " + num(E) + "]");
  }
  if (bias) DI_RETURN_IF_ERROR(check_tensor("moe_route", "bias", *bias, DType::kF32, {E}));
  if (hash_ids) {
    DI_RETURN_IF_ERROR(check_tensor("moe_route", "hash_ids", *hash_ids, DType::kI32, {S, k}));
  }
  DI_RETURN_IF_ERROR(check_tensor("moe_route", "ids", ids, DType::kI32, {S, k}));
  DI_RETURN_IF_ERROR(check_tensor("moe_route", "weights", weights, DType::kF32, {S, k}));
  return RouteDims{S, E, k};
}

StatusOr<SwigluDims> check_swiglu(const Tensor& gate_up, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("swiglu", "gate_up", gate_up, DType::kF32, 2));
  const int64_t M = gate_up.dim(0), I2 = gate_up.dim(1);
  if (I2 % 2 != 0) {
    return InvalidArgument("swiglu: gate_up width must be even (gate | up), got " +
                           gate_up.describe());
  }
  DI_RETURN_IF_ERROR(check_tensor("swiglu", "out", out, DType::kF32, {M, I2 / 2}));
  return SwigluDims{M, I2 / 2};
}

namespace {
StatusOr<GatherDims> check_gather(const char* op, const char* src_name, const Tensor& src,
                                  const Tensor& ids, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank(op, src_name, src, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank(op, "ids", ids, DType::kI32, 1));
  const int64_t N = src.dim(0), H = src.dim(1), M = ids.dim(0);
  DI_RETURN_IF_ERROR(check_tensor(op, "out", out, DType::kF32, {M, H}));
  return GatherDims{M, N, H};
}
}  // namespace

StatusOr<GatherDims> check_embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  return check_gather("embedding", "table", table, ids, out);
}

StatusOr<GatherDims> check_gather_rows(const Tensor& src, const Tensor& ids, const Tensor& out) {
  return check_gather("gather_rows", "src", src, ids, out);
}

StatusOr<GatherDims> check_scatter_add_rows(const Tensor& src, const Tensor& ids,
                                            const Tensor* weights, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("scatter_add_rows", "src", src, DType::kF32, 2));
  const int64_t M = src.dim(0), H = src.dim(1);
  DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "ids", ids, DType::kI32, {M}));
  if (weights) {
    DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "weights", *weights, DType::kF32, {M}));
  }
  DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "out", out, DType::kF32, {-1, H}));
  return GatherDims{M, out.dim(0), H};
}

StatusOr<HcDims> check_hc_coeffs(const Tensor& mix, const Tensor& base, const Tensor& scale,
                                 const HcParams& p, const Tensor& pre, const Tensor* post,
                                 const Tensor* comb) {
  const int64_t hc = p.hc;
  if (hc < 1 || p.sinkhorn_iters < 1) {
    return InvalidArgument("hc_coeffs: need hc >= 1 and sinkhorn_iters >= 1");
  }
  DI_RETURN_IF_ERROR(check_rank("hc_coeffs", "mix", mix, DType::kF32, 2));
  const int64_t S = mix.dim(0);
  const bool head = scale.numel() == 1;
  const int64_t want = head ? hc : (2 + hc) * hc;
  DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "mix", mix, DType::kF32, {S, want}));
  DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "base", base, DType::kF32, {want}));
  DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "scale", scale, DType::kF32, {head ? 1 : 3}));
  DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "pre", pre, DType::kF32, {S, hc}));
  if (!head) {
    if (!post || !comb) {
      return InvalidArgument("hc_coeffs: post and comb are required with scale [3]");
    }
    DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "post", *post, DType::kF32, {S, hc}));
    DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "comb", *comb, DType::kF32, {S, hc, hc}));
  }
  return HcDims{S, hc, want, head};
}

StatusOr<StreamDims> check_hc_collapse(const Tensor& x, const Tensor& pre, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("hc_collapse", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), hc = x.dim(1), H = x.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("hc_collapse", "pre", pre, DType::kF32, {S, hc}));
  DI_RETURN_IF_ERROR(check_tensor("hc_collapse", "out", out, DType::kF32, {S, H}));
  return StreamDims{S, hc, H};
}

StatusOr<StreamDims> check_hc_expand(const Tensor& x, const Tensor& y, const Tensor& post,
                                     const Tensor& comb, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("hc_expand", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), hc = x.dim(1), H = x.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "y", y, DType::kF32, {S, H}));
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "post", post, DType::kF32, {S, hc}));
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "comb", comb, DType::kF32, {S, hc, hc}));
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "out", out, DType::kF32, {S, hc, H}));
  if (out.raw() == x.raw() && S > 0) return InvalidArgument("hc_expand: out must not alias x");
  return StreamDims{S, hc, H};
}

Status check_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32 || out.dtype() != DType::kF32 ||
      a.shape() != b.shape() || a.shape() != out.shape()) {
    return InvalidArgument("add: need three F32 tensors of one shape, got " + a.describe() + ", " +
                           b.describe() + ", " + out.describe());
  }
  return OkStatus();
}

Status check_copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel()) {
    return InvalidArgument("copy: " + src.describe() + " -> " + dst.describe() +
                           " (need the same dtype and element count)");
  }
  return OkStatus();
}

StatusOr<DequantDims> check_dequantize(const Tensor& w, const Tensor* scale, int64_t block_rows,
                                       int64_t block_cols, const Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("dequantize", "out", out, DType::kF32, 2));
  const int64_t N = out.dim(0), K = out.dim(1);
  const DType dt = w.dtype();
  if (dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16) {
    DI_RETURN_IF_ERROR(check_tensor("dequantize", "w", w, dt, {N, K}));
    if (scale != nullptr) {
      return InvalidArgument("dequantize: unexpected scale for " + w.describe());
    }
    return DequantDims{N, K, false, false};
  }
  const bool packed = dt == DType::kI8 || dt == DType::kU8;
  if (dt != DType::kF8E4M3 && dt != DType::kF4E2M1 && !packed) {
    return Unimplemented(std::string("dequantize: weight dtype ") + dtype_name(dt) +
                         " is not supported (F32, BF16, F16, F8_E4M3, F4 / packed I8)");
  }
  if (packed) {
    if (K % 2 != 0) return InvalidArgument("dequantize: packed fp4 needs an even K, got " + num(K));
    DI_RETURN_IF_ERROR(check_tensor("dequantize", "w (packed fp4)", w, dt, {N, K / 2}));
  } else {
    DI_RETURN_IF_ERROR(check_tensor("dequantize", "w", w, dt, {N, K}));
  }
  if (scale == nullptr) {
    return InvalidArgument("dequantize: " + w.describe() + " needs a scale tensor");
  }
  if (block_rows < 1 || block_cols < 1) {
    return InvalidArgument("dequantize: block sizes must be >= 1");
  }
  const int64_t sr = (N + block_rows - 1) / block_rows, sc = (K + block_cols - 1) / block_cols;
  const DType st = scale->dtype();
  if (st != DType::kF8E8M0 && st != DType::kF32 && st != DType::kBF16) {
    return InvalidArgument("dequantize: scale must be F8_E8M0, F32 or BF16, got " +
                           scale->describe());
  }
  if (scale->rank() != 2 || scale->dim(0) != sr || scale->dim(1) != sc) {
    return InvalidArgument("dequantize: scale for " + w.describe() + " with blocks " +
                           num(block_rows) + "x" + num(block_cols) + " must have shape [" +
                           num(sr) + ", " + num(sc) + "], got " + scale->describe());
  }
  return DequantDims{N, K, true, packed || dt == DType::kF4E2M1};
}

StatusOr<SlotsDims> check_compressor_slots(const Tensor& kv, const Tensor& gate, const Tensor& ape,
                                           const Tensor* overlap_kv, const Tensor* overlap_gate,
                                           int64_t m, const Tensor& values, const Tensor& scores,
                                           const Tensor* next_overlap_kv,
                                           const Tensor* next_overlap_gate) {
  const char* op = "compressor_slots";
  if (m <= 0) return InvalidArgument(std::string(op) + ": m must be >= 1, got " + std::to_string(m));
  DI_RETURN_IF_ERROR(check_rank(op, "values", values, DType::kF32, 3));
  SlotsDims d{values.dim(0), m, 0, values.dim(2)};
  if (d.d <= 0 || values.dim(1) % m != 0 || (values.dim(1) / m != 1 && values.dim(1) / m != 2))
    return InvalidArgument(std::string(op) + ": values: expected [n, coff*m, d] with coff 1 or 2 and m = " +
                           std::to_string(m) + ", got " + values.describe());
  d.coff = values.dim(1) / m;
  const int64_t cd = d.coff * d.d;
  DI_RETURN_IF_ERROR(check_tensor(op, "scores", scores, DType::kF32, {d.n, d.coff * m, d.d}));
  DI_RETURN_IF_ERROR(check_tensor(op, "kv", kv, DType::kF32, {d.n * m, cd}));
  DI_RETURN_IF_ERROR(check_tensor(op, "gate", gate, DType::kF32, {d.n * m, cd}));
  DI_RETURN_IF_ERROR(check_tensor(op, "ape", ape, DType::kF32, {m, cd}));
  if ((overlap_kv == nullptr) != (overlap_gate == nullptr))
    return InvalidArgument(std::string(op) + ": overlap_kv and overlap_gate must be given together");
  if ((next_overlap_kv == nullptr) != (next_overlap_gate == nullptr))
    return InvalidArgument(std::string(op) + ": next_overlap_kv and next_overlap_gate must be given together");
  if (d.coff == 1 && (overlap_kv || next_overlap_kv))
    return InvalidArgument(std::string(op) + ": overlap tensors are for CSA (coff = 2) only");
  if (overlap_kv) {
    DI_RETURN_IF_ERROR(check_tensor(op, "overlap_kv", *overlap_kv, DType::kF32, {m, d.d}));
    DI_RETURN_IF_ERROR(check_tensor(op, "overlap_gate", *overlap_gate, DType::kF32, {m, d.d}));
  }
  if (next_overlap_kv) {
    if (d.n == 0) return InvalidArgument(std::string(op) + ": next_overlap needs n >= 1 windows");
    DI_RETURN_IF_ERROR(check_tensor(op, "next_overlap_kv", *next_overlap_kv, DType::kF32, {m, d.d}));
    DI_RETURN_IF_ERROR(check_tensor(op, "next_overlap_gate", *next_overlap_gate, DType::kF32, {m, d.d}));
  }
  return d;
}

}  // namespace deepinfer::backend
