#include "model/deepseek_v4/hyper_connection.h"

#include "model/placement.h"

namespace deepinfer::model::v4 {

namespace {
backend::HcParams hc_params(const Dims& d) {
  return backend::HcParams{d.hc, d.sinkhorn_iters, d.hc_eps};
}
}  // namespace

Status hc_map(backend::Backend& be, const Dims& d, const HcSiteWeights& w, const Tensor& streams,
              Tensor& post, Tensor& comb, Tensor& collapsed) {
  const int64_t S = streams.dim(0);
  Tensor flat = streams.view({S, d.hc * d.H});                            // [S, hc·H]
  DI_EMPTY(normed, be, DType::kF32, {S, d.hc * d.H});            // rms(flat), no weight
  DI_RETURN_IF_ERROR(be.rms_norm(flat, nullptr, d.eps, normed));
  DI_EMPTY(mix, be, DType::kF32, {S, (2 + d.hc) * d.hc});        // [S, (2+hc)·hc]
  DI_RETURN_IF_ERROR(be.matmul(normed, w.fn, mix));
  DI_EMPTY(pre, be, DType::kF32, {S, d.hc});
  DI_RETURN_IF_ERROR(be.hc_coeffs(mix, w.base, w.scale, hc_params(d), pre, &post, &comb));
  return be.hc_collapse(streams, pre, collapsed);
}

Status hc_expand(backend::Backend& be, const Tensor& streams, const Tensor& y, const Tensor& post,
                 const Tensor& comb, Tensor& out) {
  return be.hc_expand(streams, y, post, comb, out);
}

Status hyper_head(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                  const Tensor& streams, Tensor& h) {
  const int64_t S = streams.dim(0);
  DI_EMPTY(normed, be, DType::kF32, {S, d.hc * d.H});
  DI_RETURN_IF_ERROR(be.rms_norm(streams.view({S, d.hc * d.H}), nullptr, d.eps, normed));
  DI_EMPTY(mix, be, DType::kF32, {S, d.hc});
  DI_RETURN_IF_ERROR(be.matmul(normed, w.fn, mix));
  DI_EMPTY(pre, be, DType::kF32, {S, d.hc});
  DI_RETURN_IF_ERROR(be.hc_coeffs(mix, w.base, w.scale, hc_params(d), pre, nullptr, nullptr));
  return be.hc_collapse(streams, pre, h);
}

}  // namespace deepinfer::model::v4
