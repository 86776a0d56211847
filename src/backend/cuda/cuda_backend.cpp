#include "backend/cuda/cuda_backend.h"

#include <cmath>

#include "backend/cuda/dequant.h"
#include "backend/op_checks.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

using namespace backend;  // op argument checks (backend/op_checks.h)
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
  DI_ASSIGN_OR_RETURN(const auto d, check_dequantize(w, scale, block_rows, block_cols, out));
  const DType dt = w.dtype();
  if (!d.quantized) {
    kernels::to_f32(w.raw(), dt == DType::kF32 ? 0 : dt == DType::kBF16 ? 1 : 2, d.N * d.K,
                    out.data<float>(), stream());
    return launched("dequantize");
  }
  const ScaleType type = scale->dtype() == DType::kF8E8M0 ? ScaleType::kUe8m0
                         : scale->dtype() == DType::kF32  ? ScaleType::kF32
                                                          : ScaleType::kBf16;
  return dequant_block_scaled(w.data<uint8_t>(), d.packed_fp4, scale->raw(), type, d.N, d.K,
                              block_rows, block_cols, out.data<float>(), stream());
}

Status CudaBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_embedding(table, ids, out));
  kernels::gather_rows(table.data<float>(), ids.data<int32_t>(), d.M, d.N, d.H, out.data<float>(),
                       flag_of(st_->error_flag), kernels::kErrEmbeddingId, stream());
  return launched("embedding");
}

Status CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out, int64_t groups) {
  DI_ASSIGN_OR_RETURN(const auto d, check_matmul(x, w, out, groups));
  if (d.M == 0 || d.N == 0) return OkStatus();
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: out_g^T [N, M] = W_g [N, K] · X_g^T [K, M] for each group g.
  DI_CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
      st_->blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(d.N), static_cast<int>(d.M),
      static_cast<int>(d.K), &alpha, w.data<float>(), static_cast<int>(d.K), d.N * d.K,
      x.data<float>(), static_cast<int>(groups * d.K), d.K, &beta, out.data<float>(),
      static_cast<int>(groups * d.N), d.N, static_cast<int>(groups)));
  return OkStatus();
}

Status CudaBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_rms_norm(x, weight, out));
  kernels::rms_norm(x.data<float>(), weight ? weight->data<float>() : nullptr, d.M, d.N, eps,
                    out.data<float>(), stream());
  return launched("rms_norm");
}

Status CudaBackend::rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq,
                         backend::RopeStyle style, float mscale, bool inverse) {
  DI_ASSIGN_OR_RETURN(const auto d, check_rope(x, positions, inv_freq));
  kernels::rope(x.data<float>(), positions.data<int32_t>(), inv_freq.data<float>(), d.S, d.nh, d.D,
                d.half, style == backend::RopeStyle::kInterleavedTrailing, mscale, inverse,
                stream());
  return launched("rope");
}

Status CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& key_offsets, const Tensor& key_ids,
                              const Tensor* sinks, float scale, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_attention(q, k, v, key_offsets, key_ids, sinks, out));
  if (d.Dv > 1024) return Unimplemented("attention (cuda): value width > 1024");
  kernels::attention(q.data<float>(), k.data<float>(), v.data<float>(),
                     key_offsets.data<int32_t>(), key_ids.data<int32_t>(), d.nnz,
                     sinks ? sinks->data<float>() : nullptr, d.S, d.nH, d.T, d.nKV, d.D, d.Dv,
                     scale, out.data<float>(), flag_of(st_->error_flag), stream());
  return launched("attention");
}

Status CudaBackend::softmax_pool(const Tensor& values, const Tensor& scores, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_softmax_pool(values, scores, out));
  kernels::softmax_pool(values.data<float>(), scores.data<float>(), d.n, d.L, d.d,
                        out.data<float>(), stream());
  return launched("softmax_pool");
}

Status CudaBackend::indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& keys,
                                   const Tensor& visible, float weight_scale, float dot_scale,
                                   Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_indexer_scores(q, weights, keys, visible, out));
  kernels::indexer_scores(q.data<float>(), weights.data<float>(), keys.data<float>(),
                          visible.data<int32_t>(), d.S, d.nI, d.cI, d.T, weight_scale, dot_scale,
                          out.data<float>(), stream());
  return launched("indexer_scores");
}

Status CudaBackend::topk(const Tensor& scores, int64_t k, Tensor& ids) {
  DI_ASSIGN_OR_RETURN(const auto d, check_topk(scores, k, ids));
  if (d.S * d.T >= (int64_t{1} << 31)) return OutOfRange("topk (cuda): S*T exceeds 2^31");
  const uint64_t need = kernels::topk_workspace_bytes(d.S, d.T);
  if (st_->workspace.size() < need) {
    DI_RETURN_IF_ERROR(st_->stream.synchronize());  // the old workspace may still be in use
    DI_ASSIGN_OR_RETURN(st_->workspace, DeviceBuffer::allocate(need));
  }
  kernels::topk(scores.data<float>(), d.S, d.T, d.k, ids.data<int32_t>(), st_->workspace.data(),
                stream());
  return launched("topk");
}

Status CudaBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* hash_ids,
                              const backend::RouterParams& params, Tensor& ids, Tensor& weights) {
  DI_ASSIGN_OR_RETURN(const auto d, check_moe_route(logits, bias, hash_ids, params, ids, weights));
  const int scoring = params.scoring == backend::RouterScoring::kSqrtSoftplus ? 0
                      : params.scoring == backend::RouterScoring::kSigmoid    ? 1
                                                                              : 2;
  kernels::moe_route(logits.data<float>(), bias ? bias->data<float>() : nullptr,
                     hash_ids ? hash_ids->data<int32_t>() : nullptr, d.S, d.E, d.k, scoring,
                     params.routed_scaling_factor, params.renormalize, ids.data<int32_t>(),
                     weights.data<float>(), flag_of(st_->error_flag), stream());
  return launched("moe_route");
}

Status CudaBackend::swiglu(const Tensor& gate_up, float limit, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_swiglu(gate_up, out));
  kernels::swiglu(gate_up.data<float>(), d.M, d.I, limit, out.data<float>(), stream());
  return launched("swiglu");
}

Status CudaBackend::gather_rows(const Tensor& src, const Tensor& ids, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_gather_rows(src, ids, out));
  kernels::gather_rows(src.data<float>(), ids.data<int32_t>(), d.M, d.N, d.H, out.data<float>(),
                       flag_of(st_->error_flag), kernels::kErrGatherId, stream());
  return launched("gather_rows");
}

Status CudaBackend::scatter_add_rows(const Tensor& src, const Tensor& ids, const Tensor* weights,
                                     Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_scatter_add_rows(src, ids, weights, out));
  kernels::scatter_add_rows(src.data<float>(), ids.data<int32_t>(),
                            weights ? weights->data<float>() : nullptr, d.M, d.N, d.H,
                            out.data<float>(), flag_of(st_->error_flag), stream());
  return launched("scatter_add_rows");
}

Status CudaBackend::hc_coeffs(const Tensor& mix, const Tensor& base, const Tensor& scale,
                              const backend::HcParams& p, Tensor& pre, Tensor* post,
                              Tensor* comb) {
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_coeffs(mix, base, scale, p, pre, post, comb));
  if (d.hc > 16) return Unimplemented("hc_coeffs (cuda): hc > 16 streams");
  kernels::hc_coeffs(mix.data<float>(), base.data<float>(), scale.data<float>(), d.S, d.hc,
                     p.sinkhorn_iters, p.hc_eps, d.head, pre.data<float>(),
                     d.head ? nullptr : post->data<float>(), d.head ? nullptr : comb->data<float>(),
                     stream());
  return launched("hc_coeffs");
}

Status CudaBackend::hc_collapse(const Tensor& x, const Tensor& pre, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_collapse(x, pre, out));
  kernels::hc_collapse(x.data<float>(), pre.data<float>(), d.S, d.hc, d.H, out.data<float>(),
                       stream());
  return launched("hc_collapse");
}

Status CudaBackend::hc_expand(const Tensor& x, const Tensor& y, const Tensor& post,
                              const Tensor& comb, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_expand(x, y, post, comb, out));
  kernels::hc_expand(x.data<float>(), y.data<float>(), post.data<float>(), comb.data<float>(), d.S,
                     d.hc, d.H, out.data<float>(), stream());
  return launched("hc_expand");
}

Status CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  DI_RETURN_IF_ERROR(check_add(a, b, out));
  kernels::add(a.data<float>(), b.data<float>(), a.numel(), out.data<float>(), stream());
  return launched("add");
}

Status CudaBackend::copy(const Tensor& src, Tensor& dst) {
  DI_RETURN_IF_ERROR(check_copy(src, dst));
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(),
                                          cudaMemcpyDeviceToDevice, stream()));
  return OkStatus();
}

}  // namespace deepinfer::cuda
