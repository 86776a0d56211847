#include "model/deepseek_v4/hyper_connection.h"

#include "model/placement.h"

namespace deepinfer::model::v4 {

namespace {
backend::HcParams hc_params(const Dims& d) {
  return backend::HcParams{d.hc, d.sinkhorn_iters, d.hc_eps};
}
}  // namespace

// One backend op per site (Backend::hc_pre): the default composes rms_norm → matmul → hc_coeffs →
// hc_collapse; the CUDA backend fuses them for decode-sized S.
Status hc_map(backend::Backend& be, const Dims& d, const HcSiteWeights& w, const Tensor& streams,
              Tensor& post, Tensor& comb, Tensor& collapsed) {
  return be.hc_pre(streams, w.fn, w.base, w.scale, hc_params(d), d.eps, &post, &comb, collapsed);
}

Status hc_expand(backend::Backend& be, const Tensor& streams, const Tensor& y, const Tensor& post,
                 const Tensor& comb, Tensor& out) {
  return be.hc_expand(streams, y, post, comb, out);
}

Status hc_expand_map(backend::Backend& be, const Dims& d, const HcSiteWeights& w, const Tensor& prev,
                     const Tensor& y, const Tensor& post_prev, const Tensor& comb_prev,
                     Tensor& streams, Tensor& post, Tensor& comb, Tensor& collapsed) {
  return be.hc_expand_pre(prev, y, post_prev, comb_prev, streams, w.fn, w.base, w.scale,
                          hc_params(d), d.eps, &post, &comb, collapsed);
}

Status hc_map_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                   const Tensor& streams, Tensor& post, Tensor& comb, Tensor& collapsed,
                   const Tensor& norm_w, Tensor& xn) {
  return be.hc_pre_norm(streams, w.fn, w.base, w.scale, hc_params(d), d.eps, &post, &comb,
                        collapsed, &norm_w, d.eps, xn);
}

Status hc_expand_map_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                          const Tensor& prev, const Tensor& y, const Tensor* y2,
                          const Tensor& post_prev, const Tensor& comb_prev, Tensor& streams,
                          Tensor& post, Tensor& comb, Tensor& collapsed, const Tensor& norm_w,
                          Tensor& xn) {
  return be.hc_expand_pre_norm(prev, y, y2, post_prev, comb_prev, streams, w.fn, w.base, w.scale,
                               hc_params(d), d.eps, &post, &comb, collapsed, &norm_w, d.eps, xn);
}

Status hyper_head_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                       const Tensor& streams, Tensor& h, const Tensor& norm_w, Tensor& hn) {
  return be.hc_pre_norm(streams, w.fn, w.base, w.scale, hc_params(d), d.eps, nullptr, nullptr, h,
                        &norm_w, d.eps, hn);
}

Status hyper_head_expand_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                              const Tensor& prev, const Tensor& y, const Tensor* y2,
                              const Tensor& post_prev, const Tensor& comb_prev, Tensor& streams,
                              Tensor& h, const Tensor& norm_w, Tensor& hn) {
  return be.hc_expand_pre_norm(prev, y, y2, post_prev, comb_prev, streams, w.fn, w.base, w.scale,
                               hc_params(d), d.eps, nullptr, nullptr, h, &norm_w, d.eps, hn);
}

Status hyper_head(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                  const Tensor& streams, Tensor& h) {
  return be.hc_pre(streams, w.fn, w.base, w.scale, hc_params(d), d.eps, nullptr, nullptr, h);
}

}  // namespace deepinfer::model::v4
