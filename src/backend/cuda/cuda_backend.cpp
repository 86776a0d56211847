#include "backend/cuda/cuda_backend.h"

#include <cmath>

#include "backend/cuda/dequant.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

using backend::check_rank;
using backend::check_tensor;
using backend::OpKind;
using backend::Tensor;

struct CudaBackend::State {
  Stream stream;
  CublasHandle blas;
  DeviceBuffer error_flag;  // int32 on the device
  DeviceBuffer workspace;   // grows on demand (top-k sort)
  const char* last_op = "";
};

CudaBackend::CudaBackend(std::unique_ptr<State> state) : st_(std::move(state)) {}
CudaBackend::~CudaBackend() = default;

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaBackendOptions& options) {
  DI_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  DI_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  DI_ASSIGN_OR_RETURN(CublasHandle blas, CublasHandle::create(stream.get()));
  DI_ASSIGN_OR_RETURN(DeviceBuffer flag, DeviceBuffer::allocate(sizeof(int32_t)));
  DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag.data(), 0, sizeof(int32_t), stream.get()));
  auto st = std::unique_ptr<State>(
      new State{std::move(stream), std::move(blas), std::move(flag), DeviceBuffer(), ""});
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(st)));
}

cudaStream_t CudaBackend::stream() const { return st_->stream.get(); }

Status CudaBackend::launched(const char* op) {
  st_->last_op = op;
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_status(err, op, __FILE__, __LINE__);
  return OkStatus();
}

Status CudaBackend::synchronize() {
  DI_RETURN_IF_ERROR(st_->stream.synchronize());
  int32_t code = 0;
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpy(&code, st_->error_flag.data(), 4, cudaMemcpyDeviceToHost));
  if (code != kernels::kErrNone) {
    DI_CUDA_RETURN_IF_ERROR(cudaMemset(st_->error_flag.data(), 0, 4));
    return OutOfRange(std::string("cuda backend: ") + kernels::error_code_name(code));
  }
  return OkStatus();
}

bool CudaBackend::supports_op(OpKind op, DType dtype) const {
  if (op == OpKind::kDequantize) {
    return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
           dtype == DType::kF8E4M3 || dtype == DType::kI8 || dtype == DType::kU8;
  }
  return dtype == DType::kF32;
}

namespace {
int32_t* flag_of(const DeviceBuffer& b) { return static_cast<int32_t*>(b.data()); }
}  // namespace

Status CudaBackend::dequantize(const Tensor& w, const Tensor* scale, int64_t block_rows,
                               int64_t block_cols, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("dequantize", "out", out, DType::kF32, 2));
  const int64_t N = out.dim(0), K = out.dim(1);
  const DType dt = w.dtype();
  if (dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16) {
    DI_RETURN_IF_ERROR(check_tensor("dequantize", "w", w, dt, {N, K}));
    if (scale) return InvalidArgument("dequantize: unexpected scale for " + w.describe());
    kernels::to_f32(w.raw(), dt == DType::kF32 ? 0 : dt == DType::kBF16 ? 1 : 2, N * K,
                    out.data<float>(), stream());
    return launched("dequantize");
  }
  const bool packed = dt == DType::kI8 || dt == DType::kU8;
  if (dt != DType::kF8E4M3 && !packed) {
    return Unimplemented(std::string("dequantize (cuda): weight dtype ") + dtype_name(dt) +
                         " is not supported (F32, BF16, F16, F8_E4M3, packed fp4 I8/U8)");
  }
  DI_RETURN_IF_ERROR(check_tensor("dequantize", "w", w, dt, {N, packed ? K / 2 : K}));
  if (!scale) return InvalidArgument("dequantize: " + w.describe() + " needs a scale tensor");
  if (block_rows < 1 || block_cols < 1) return InvalidArgument("dequantize: block sizes must be >= 1");
  const int64_t sr = (N + block_rows - 1) / block_rows, sc = (K + block_cols - 1) / block_cols;
  DI_RETURN_IF_ERROR(check_tensor("dequantize", "scale", *scale, scale->dtype(), {sr, sc}));
  ScaleType type;
  if (scale->dtype() == DType::kF8E8M0) type = ScaleType::kUe8m0;
  else if (scale->dtype() == DType::kF32) type = ScaleType::kF32;
  else if (scale->dtype() == DType::kBF16) type = ScaleType::kBf16;
  else return InvalidArgument("dequantize: scale dtype must be F8_E8M0, F32 or BF16, got " + scale->describe());
  return dequant_block_scaled(w.data<uint8_t>(), packed, scale->raw(), type, N, K, block_rows,
                              block_cols, out.data<float>(), stream());
}

Status CudaBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("embedding", "table", table, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank("embedding", "ids", ids, DType::kI32, 1));
  const int64_t V = table.dim(0), H = table.dim(1), S = ids.dim(0);
  DI_RETURN_IF_ERROR(check_tensor("embedding", "out", out, DType::kF32, {S, H}));
  kernels::gather_rows(table.data<float>(), ids.data<int32_t>(), S, V, H, out.data<float>(),
                       flag_of(st_->error_flag), kernels::kErrEmbeddingId, stream());
  return launched("embedding");
}

Status CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out, int64_t groups) {
  DI_RETURN_IF_ERROR(check_rank("matmul", "x", x, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank("matmul", "w", w, DType::kF32, 2));
  if (groups < 1) return InvalidArgument("matmul: groups must be >= 1");
  const int64_t M = x.dim(0), GK = x.dim(1), GN = w.dim(0), K = w.dim(1);
  if (GK != groups * K || GN % groups != 0) {
    return InvalidArgument("matmul: x " + x.describe() + " and w " + w.describe() +
                           " do not fit " + std::to_string(groups) + " groups");
  }
  DI_RETURN_IF_ERROR(check_tensor("matmul", "out", out, DType::kF32, {M, GN}));
  const int64_t N = GN / groups;
  if (M == 0 || N == 0) return OkStatus();
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: out_g^T [N, M] = W_g [N, K] · X_g^T [K, M] for each group g.
  DI_CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
      st_->blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
      static_cast<int>(K), &alpha, w.data<float>(), static_cast<int>(K), N * K, x.data<float>(),
      static_cast<int>(GK), K, &beta, out.data<float>(), static_cast<int>(GN), N,
      static_cast<int>(groups)));
  return OkStatus();
}

Status CudaBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("rms_norm", "x", x, DType::kF32, 2));
  const int64_t M = x.dim(0), N = x.dim(1);
  if (weight) DI_RETURN_IF_ERROR(check_tensor("rms_norm", "weight", *weight, DType::kF32, {N}));
  DI_RETURN_IF_ERROR(check_tensor("rms_norm", "out", out, DType::kF32, {M, N}));
  kernels::rms_norm(x.data<float>(), weight ? weight->data<float>() : nullptr, M, N, eps,
                    out.data<float>(), stream());
  return launched("rms_norm");
}

Status CudaBackend::rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq,
                         backend::RopeStyle style, float mscale, bool inverse) {
  DI_RETURN_IF_ERROR(check_rank("rope", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), nh = x.dim(1), D = x.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("rope", "positions", positions, DType::kI32, {S}));
  DI_RETURN_IF_ERROR(check_rank("rope", "inv_freq", inv_freq, DType::kF32, 1));
  const int64_t half = inv_freq.dim(0);
  if (2 * half > D) {
    return InvalidArgument("rope: rotary width " + std::to_string(2 * half) +
                           " exceeds head dim " + std::to_string(D));
  }
  kernels::rope(x.data<float>(), positions.data<int32_t>(), inv_freq.data<float>(), S, nh, D,
                half, style == backend::RopeStyle::kInterleavedTrailing, mscale, inverse,
                stream());
  return launched("rope");
}

Status CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& key_offsets, const Tensor& key_ids,
                              const Tensor* sinks, float scale, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("attention", "q", q, DType::kF32, 3));
  const int64_t S = q.dim(0), nH = q.dim(1), D = q.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("attention", "k", k, DType::kF32, {-1, -1, D}));
  const int64_t T = k.dim(0), nKV = k.dim(1);
  DI_RETURN_IF_ERROR(check_tensor("attention", "v", v, DType::kF32, {T, nKV, -1}));
  const int64_t Dv = v.dim(2);
  if (nKV < 1 || nH % nKV != 0) {
    return InvalidArgument("attention: query heads " + std::to_string(nH) +
                           " must be a multiple of kv heads " + std::to_string(nKV));
  }
  if (Dv > 1024) return Unimplemented("attention (cuda): value width > 1024");
  DI_RETURN_IF_ERROR(check_tensor("attention", "key_offsets", key_offsets, DType::kI32, {S + 1}));
  DI_RETURN_IF_ERROR(check_rank("attention", "key_ids", key_ids, DType::kI32, 1));
  if (sinks) DI_RETURN_IF_ERROR(check_tensor("attention", "sinks", *sinks, DType::kF32, {nH}));
  DI_RETURN_IF_ERROR(check_tensor("attention", "out", out, DType::kF32, {S, nH, Dv}));
  kernels::attention(q.data<float>(), k.data<float>(), v.data<float>(),
                     key_offsets.data<int32_t>(), key_ids.data<int32_t>(), key_ids.dim(0),
                     sinks ? sinks->data<float>() : nullptr, S, nH, T, nKV, D, Dv, scale,
                     out.data<float>(), flag_of(st_->error_flag), stream());
  return launched("attention");
}

Status CudaBackend::softmax_pool(const Tensor& values, const Tensor& scores, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("softmax_pool", "values", values, DType::kF32, 3));
  const int64_t n = values.dim(0), L = values.dim(1), d = values.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("softmax_pool", "scores", scores, DType::kF32, {n, L, d}));
  DI_RETURN_IF_ERROR(check_tensor("softmax_pool", "out", out, DType::kF32, {n, d}));
  kernels::softmax_pool(values.data<float>(), scores.data<float>(), n, L, d, out.data<float>(),
                        stream());
  return launched("softmax_pool");
}

Status CudaBackend::indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& keys,
                                   const Tensor& visible, float weight_scale, float dot_scale,
                                   Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("indexer_scores", "q", q, DType::kF32, 3));
  const int64_t S = q.dim(0), nI = q.dim(1), cI = q.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "weights", weights, DType::kF32, {S, nI}));
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "keys", keys, DType::kF32, {-1, cI}));
  const int64_t T = keys.dim(0);
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "visible", visible, DType::kI32, {S}));
  DI_RETURN_IF_ERROR(check_tensor("indexer_scores", "out", out, DType::kF32, {S, T}));
  kernels::indexer_scores(q.data<float>(), weights.data<float>(), keys.data<float>(),
                          visible.data<int32_t>(), S, nI, cI, T, weight_scale, dot_scale,
                          out.data<float>(), stream());
  return launched("indexer_scores");
}

Status CudaBackend::topk(const Tensor& scores, int64_t k, Tensor& ids) {
  DI_RETURN_IF_ERROR(check_rank("topk", "scores", scores, DType::kF32, 2));
  const int64_t S = scores.dim(0), T = scores.dim(1);
  if (k < 1) return InvalidArgument("topk: k must be >= 1, got " + std::to_string(k));
  DI_RETURN_IF_ERROR(check_tensor("topk", "ids", ids, DType::kI32, {S, k}));
  if (S * T >= (int64_t{1} << 31)) return OutOfRange("topk (cuda): S*T exceeds 2^31");
  const uint64_t need = kernels::topk_workspace_bytes(S, T);
  if (st_->workspace.size() < need) {
    DI_RETURN_IF_ERROR(st_->stream.synchronize());  // the old workspace may still be in use
    DI_ASSIGN_OR_RETURN(st_->workspace, DeviceBuffer::allocate(need));
  }
  kernels::topk(scores.data<float>(), S, T, k, ids.data<int32_t>(), st_->workspace.data(),
                stream());
  return launched("topk");
}

Status CudaBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* hash_ids,
                              const backend::RouterParams& params, Tensor& ids, Tensor& weights) {
  DI_RETURN_IF_ERROR(check_rank("moe_route", "logits", logits, DType::kF32, 2));
  const int64_t S = logits.dim(0), E = logits.dim(1), k = params.top_k;
  if (k < 1 || k > E) {
    return InvalidArgument("moe_route: top_k " + std::to_string(k) + " must be in [1, " +
                           std::to_string(E) + "]");
  }
  if (bias) DI_RETURN_IF_ERROR(check_tensor("moe_route", "bias", *bias, DType::kF32, {E}));
  if (hash_ids) DI_RETURN_IF_ERROR(check_tensor("moe_route", "hash_ids", *hash_ids, DType::kI32, {S, k}));
  DI_RETURN_IF_ERROR(check_tensor("moe_route", "ids", ids, DType::kI32, {S, k}));
  DI_RETURN_IF_ERROR(check_tensor("moe_route", "weights", weights, DType::kF32, {S, k}));
  const int scoring = params.scoring == backend::RouterScoring::kSqrtSoftplus ? 0
                      : params.scoring == backend::RouterScoring::kSigmoid    ? 1
                                                                              : 2;
  kernels::moe_route(logits.data<float>(), bias ? bias->data<float>() : nullptr,
                     hash_ids ? hash_ids->data<int32_t>() : nullptr, S, E, k, scoring,
                     params.routed_scaling_factor, params.renormalize, ids.data<int32_t>(),
                     weights.data<float>(), flag_of(st_->error_flag), stream());
  return launched("moe_route");
}

Status CudaBackend::swiglu(const Tensor& gate_up, float limit, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("swiglu", "gate_up", gate_up, DType::kF32, 2));
  const int64_t M = gate_up.dim(0), I2 = gate_up.dim(1);
  if (I2 % 2) return InvalidArgument("swiglu: gate_up width must be even, got " + gate_up.describe());
  DI_RETURN_IF_ERROR(check_tensor("swiglu", "out", out, DType::kF32, {M, I2 / 2}));
  kernels::swiglu(gate_up.data<float>(), M, I2 / 2, limit, out.data<float>(), stream());
  return launched("swiglu");
}

Status CudaBackend::gather_rows(const Tensor& src, const Tensor& ids, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("gather_rows", "src", src, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank("gather_rows", "ids", ids, DType::kI32, 1));
  const int64_t N = src.dim(0), H = src.dim(1), M = ids.dim(0);
  DI_RETURN_IF_ERROR(check_tensor("gather_rows", "out", out, DType::kF32, {M, H}));
  kernels::gather_rows(src.data<float>(), ids.data<int32_t>(), M, N, H, out.data<float>(),
                       flag_of(st_->error_flag), kernels::kErrGatherId, stream());
  return launched("gather_rows");
}

Status CudaBackend::scatter_add_rows(const Tensor& src, const Tensor& ids, const Tensor* weights,
                                     Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("scatter_add_rows", "src", src, DType::kF32, 2));
  const int64_t M = src.dim(0), H = src.dim(1);
  DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "ids", ids, DType::kI32, {M}));
  if (weights) DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "weights", *weights, DType::kF32, {M}));
  DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "out", out, DType::kF32, {-1, H}));
  kernels::scatter_add_rows(src.data<float>(), ids.data<int32_t>(),
                            weights ? weights->data<float>() : nullptr, M, out.dim(0), H,
                            out.data<float>(), flag_of(st_->error_flag), stream());
  return launched("scatter_add_rows");
}

Status CudaBackend::hc_coeffs(const Tensor& mix, const Tensor& base, const Tensor& scale,
                              const backend::HcParams& p, Tensor& pre, Tensor* post,
                              Tensor* comb) {
  const int64_t hc = p.hc;
  if (hc < 1 || hc > 16 || p.sinkhorn_iters < 1) {
    return InvalidArgument("hc_coeffs: need 1 <= hc <= 16 and sinkhorn_iters >= 1");
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
    if (!post || !comb) return InvalidArgument("hc_coeffs: post and comb are required with scale [3]");
    DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "post", *post, DType::kF32, {S, hc}));
    DI_RETURN_IF_ERROR(check_tensor("hc_coeffs", "comb", *comb, DType::kF32, {S, hc, hc}));
  }
  kernels::hc_coeffs(mix.data<float>(), base.data<float>(), scale.data<float>(), S, hc,
                     p.sinkhorn_iters, p.hc_eps, head, pre.data<float>(),
                     head ? nullptr : post->data<float>(), head ? nullptr : comb->data<float>(),
                     stream());
  return launched("hc_coeffs");
}

Status CudaBackend::hc_collapse(const Tensor& x, const Tensor& pre, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("hc_collapse", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), hc = x.dim(1), H = x.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("hc_collapse", "pre", pre, DType::kF32, {S, hc}));
  DI_RETURN_IF_ERROR(check_tensor("hc_collapse", "out", out, DType::kF32, {S, H}));
  kernels::hc_collapse(x.data<float>(), pre.data<float>(), S, hc, H, out.data<float>(), stream());
  return launched("hc_collapse");
}

Status CudaBackend::hc_expand(const Tensor& x, const Tensor& y, const Tensor& post,
                              const Tensor& comb, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("hc_expand", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), hc = x.dim(1), H = x.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "y", y, DType::kF32, {S, H}));
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "post", post, DType::kF32, {S, hc}));
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "comb", comb, DType::kF32, {S, hc, hc}));
  DI_RETURN_IF_ERROR(check_tensor("hc_expand", "out", out, DType::kF32, {S, hc, H}));
  if (out.raw() == x.raw() && S > 0) return InvalidArgument("hc_expand: out must not alias x");
  kernels::hc_expand(x.data<float>(), y.data<float>(), post.data<float>(), comb.data<float>(), S,
                     hc, H, out.data<float>(), stream());
  return launched("hc_expand");
}

Status CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.shape() != b.shape() || a.shape() != out.shape() || a.dtype() != DType::kF32 ||
      b.dtype() != DType::kF32 || out.dtype() != DType::kF32) {
    return InvalidArgument("add: shapes/dtypes differ: " + a.describe() + ", " + b.describe() +
                           " -> " + out.describe());
  }
  kernels::add(a.data<float>(), b.data<float>(), a.numel(), out.data<float>(), stream());
  return launched("add");
}

Status CudaBackend::copy(const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel()) {
    return InvalidArgument("copy: " + src.describe() + " -> " + dst.describe() +
                           ": dtype and element count must match");
  }
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(),
                                          cudaMemcpyDeviceToDevice, stream()));
  return OkStatus();
}

}  // namespace deepinfer::cuda
