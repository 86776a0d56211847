// mHC sites of a decoder layer and the HyperHead (deepseek-v4.md §3), as backend op sequences.
#pragma once

#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// HC_map (§3.1). streams [S, hc, H] -> post [S, hc], comb [S, hc, hc], collapsed [S, H].
Status hc_map(backend::Backend& be, const Dims& d, const HcSiteWeights& w, const Tensor& streams,
              Tensor& post, Tensor& comb, Tensor& collapsed);

// HC_expand (§3.2): out [S, hc, H] = post ⊗ y + Cᵀ·streams. y [S, H].
Status hc_expand(backend::Backend& be, const Tensor& streams, const Tensor& y, const Tensor& post,
                 const Tensor& comb, Tensor& out);

// HC_expand of the previous site then HC_map of this one (one fused call on the GPU):
// streams [S, hc, H] (out) = post_prev ⊗ y + Cᵀ·prev, then as hc_map(streams). prev [S, hc, H],
// y [S, H], post_prev [S, hc], comb_prev [S, hc, hc]; streams must not alias prev.
Status hc_expand_map(backend::Backend& be, const Dims& d, const HcSiteWeights& w, const Tensor& prev,
                     const Tensor& y, const Tensor& post_prev, const Tensor& comb_prev,
                     Tensor& streams, Tensor& post, Tensor& comb, Tensor& collapsed);

// The same three with the sublayer's RMSNorm of the collapsed row (one backend call each:
// hc_pre_norm / hc_expand_pre_norm): xn [S, H] = rms_norm(collapsed; norm_w [H], d.eps).
Status hc_map_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                   const Tensor& streams, Tensor& post, Tensor& comb, Tensor& collapsed,
                   const Tensor& norm_w, Tensor& xn);
// y2 (may be null): the previous sublayer's output is y + y2 (the MoE's shared and routed parts).
Status hc_expand_map_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                          const Tensor& prev, const Tensor& y, const Tensor* y2,
                          const Tensor& post_prev, const Tensor& comb_prev, Tensor& streams,
                          Tensor& post, Tensor& comb, Tensor& collapsed, const Tensor& norm_w,
                          Tensor& xn);
// HyperHead then the final norm: h [S, H], hn [S, H] = rms_norm(h; norm_w, d.eps).
Status hyper_head_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                       const Tensor& streams, Tensor& h, const Tensor& norm_w, Tensor& hn);
// The last layer's expand (of y + y2; y2 may be null) inside the HyperHead's site: streams (out)
// = post_prev ⊗ (y + y2) + Cᵀ·prev, then as hyper_head_norm(streams).
Status hyper_head_expand_norm(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                              const Tensor& prev, const Tensor& y, const Tensor* y2,
                              const Tensor& post_prev, const Tensor& comb_prev, Tensor& streams,
                              Tensor& h, const Tensor& norm_w, Tensor& hn);

// HyperHead (§3.3): streams [S, hc, H] -> h [S, H].
Status hyper_head(backend::Backend& be, const Dims& d, const HcSiteWeights& w,
                  const Tensor& streams, Tensor& h);

}  // namespace deepinfer::model::v4
