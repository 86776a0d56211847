// Argument checks of every op in backend.h, shared by all backends: shapes and dtypes only (the
// host-side metadata), never the data. Each returns the op's sizes, or kInvalidArgument naming the
// op and the argument. Checks of index *contents* (token ids, key ids, expert ids) are each
// backend's own: the CPU backend reads them, the CUDA backend checks them on the device.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace deepinfer::backend {

struct MatmulDims { int64_t M, K, N, groups; };
StatusOr<MatmulDims> check_matmul(const Tensor& x, const Tensor& w, const Tensor& out,
                                  int64_t groups);

struct RowsDims { int64_t M, N; };
StatusOr<RowsDims> check_rms_norm(const Tensor& x, const Tensor* weight, const Tensor& out);

struct RopeDims { int64_t S, nh, D, half; };
StatusOr<RopeDims> check_rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);

struct AttentionDims { int64_t S, nH, D, T, nKV, Dv, nnz; };
StatusOr<AttentionDims> check_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& key_offsets, const Tensor& key_ids,
                                        const Tensor* sinks, const Tensor& out);

struct PoolDims { int64_t n, L, d; };
StatusOr<PoolDims> check_softmax_pool(const Tensor& values, const Tensor& scores,
                                      const Tensor& out);

struct IndexerDims { int64_t S, nI, cI, T; };
// T = out's width; Tk = keys' rows. Host-side range checks of visible/key_start are the
// caller's (they may live on a device).
StatusOr<IndexerDims> check_indexer_scores(const Tensor& q, const Tensor& weights,
                                           const Tensor& keys, const Tensor& visible,
                                           const Tensor& out, const Tensor* key_start = nullptr);

struct TopkDims { int64_t S, T, k; };
StatusOr<TopkDims> check_topk(const Tensor& scores, int64_t k, const Tensor& ids);

struct RouteDims { int64_t S, E, k; };
StatusOr<RouteDims> check_moe_route(const Tensor& logits, const Tensor* bias,
                                    const Tensor* hash_ids, const RouterParams& params,
                                    const Tensor& ids, const Tensor& weights);

struct SwigluDims { int64_t M, I; };
StatusOr<SwigluDims> check_swiglu(const Tensor& gate_up, const Tensor& out);

struct GatherDims { int64_t M, N, H; };  // M rows out of N rows of width H
StatusOr<GatherDims> check_embedding(const Tensor& table, const Tensor& ids, const Tensor& out);
StatusOr<GatherDims> check_gather_rows(const Tensor& src, const Tensor& ids, const Tensor& out);
// M source rows added into N output rows.
StatusOr<GatherDims> check_scatter_add_rows(const Tensor& src, const Tensor& ids,
                                            const Tensor* weights, const Tensor& out);

struct HcDims { int64_t S, hc, width; bool head; };
StatusOr<HcDims> check_hc_coeffs(const Tensor& mix, const Tensor& base, const Tensor& scale,
                                 const HcParams& params, const Tensor& pre, const Tensor* post,
                                 const Tensor* comb);
struct StreamDims { int64_t S, hc, H; };
StatusOr<StreamDims> check_hc_collapse(const Tensor& x, const Tensor& pre, const Tensor& out);
StatusOr<StreamDims> check_hc_expand(const Tensor& x, const Tensor& y, const Tensor& post,
                                     const Tensor& comb, const Tensor& out);

struct SlotsDims { int64_t n, m, coff, d; };
StatusOr<SlotsDims> check_compressor_slots(const Tensor& kv, const Tensor& gate, const Tensor& ape,
                                           const Tensor* overlap_kv, const Tensor* overlap_gate,
                                           int64_t m, const Tensor& values, const Tensor& scores,
                                           const Tensor* next_overlap_kv,
                                           const Tensor* next_overlap_gate);

Status check_add(const Tensor& a, const Tensor& b, const Tensor& out);
Status check_copy(const Tensor& src, const Tensor& dst);

// Dequantize: w of a supported dtype against out [N, K] F32, scale [ceil(N/br), ceil(K/bc)].
struct DequantDims { int64_t N, K; bool quantized; bool packed_fp4; };
StatusOr<DequantDims> check_dequantize(const Tensor& w, const Tensor* scale, int64_t block_rows,
                                       int64_t block_cols, const Tensor& out);

}  // namespace deepinfer::backend
