#include "model/deepseek_v4/context_parallel_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/indexer.h"
#include "model/placement.h"

namespace deepinfer::model::v4 {

namespace {

// The rows of this rank → every rank's rows in chunk order: full [S, width].
StatusOr<Tensor> gather(backend::Backend& be, ContextParallelStep& step, const Tensor& mine) {
  DI_ASSIGN_OR_RETURN(Tensor full, be.empty(DType::kF32, {step.split->num_tokens, mine.dim(1)}));
  DI_RETURN_IF_ERROR(all_gather_rows(*step.comm, be, *step.split, mine, full, step.gather_index));
  return full;
}

}  // namespace

Status attention_forward_context_parallel(backend::Backend& be, const Dims& d,
                                          const AttentionWeights& w, const RopeTable& rope,
                                          const Tensor& x, ContextParallelStep& step, int layer,
                                          Tensor& y) {
  using backend::RopeStyle;
  const int64_t n = x.dim(0);                // this rank's rows
  const int64_t S = step.split->num_tokens;  // the whole chunk
  const bool csa = w.type == io::AttentionType::kCompressedSparse;
  const bool compressed = w.compressor != nullptr;
  const Tensor& positions = step.positions;
  DeepseekV4State& state = *step.state;
  const std::vector<int32_t>& mine = step.split->rows[step.comm->rank()];

  // §4.1 projections of this rank's rows (row-wise ops: bitwise the single-rank rows).
  DI_EMPTY(q_a, be, DType::kF32, {n, d.Rq});
  DI_RETURN_IF_ERROR(be.linear(x, w.wq_a, q_a));
  DI_EMPTY(q_res, be, DType::kF32, {n, d.Rq});
  DI_RETURN_IF_ERROR(be.rms_norm(q_a, &w.q_norm, d.eps, q_res));
  DI_EMPTY(q, be, DType::kF32, {n, d.nH * d.D});
  DI_RETURN_IF_ERROR(be.linear(q_res, w.wq_b, q));
  Tensor q_heads = q.view({n * d.nH, d.D});
  DI_RETURN_IF_ERROR(be.rms_norm(q_heads, nullptr, d.eps, q_heads));
  Tensor q3 = q.view({n, d.nH, d.D});
  DI_RETURN_IF_ERROR(be.rope(q3, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, false));
  DI_EMPTY(kv_raw, be, DType::kF32, {n, d.D});
  DI_RETURN_IF_ERROR(be.linear(x, w.wkv, kv_raw));
  DI_EMPTY(kv_mine, be, DType::kF32, {n, d.D});
  DI_RETURN_IF_ERROR(be.rms_norm(kv_raw, &w.kv_norm, d.eps, kv_mine));
  Tensor kv3 = kv_mine.view({n, 1, d.D});
  DI_RETURN_IF_ERROR(be.rope(kv3, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, false));
  DI_ASSIGN_OR_RETURN(Tensor kv, gather(be, step, kv_mine));  // [S, D] every row of the chunk

  // Compressors: each rank projects its rows, the projections are all-gathered, and every rank
  // runs the (cheap) pooling over the whole chunk on its own copy of the state.
  if (compressed) {
    const int64_t cd = w.compressor->coff * w.compressor->d;
    DI_EMPTY(ckv, be, DType::kF32, {n, cd});
    DI_EMPTY(cgate, be, DType::kF32, {n, cd});
    DI_RETURN_IF_ERROR(compressor_project(be, *w.compressor, x, ckv, cgate));
    DI_ASSIGN_OR_RETURN(Tensor ckv_all, gather(be, step, ckv));
    DI_ASSIGN_OR_RETURN(Tensor cgate_all, gather(be, step, cgate));
    DI_RETURN_IF_ERROR(compressor_update(be, d, *w.compressor, rope, ckv_all, cgate_all, state,
                                         layer, CompressorKind::kMain));
    if (csa) {
      const CompressorWeights& ic = w.indexer->compressor;
      DI_EMPTY(ikv, be, DType::kF32, {n, ic.coff * ic.d});
      DI_EMPTY(igate, be, DType::kF32, {n, ic.coff * ic.d});
      DI_RETURN_IF_ERROR(compressor_project(be, ic, x, ikv, igate));
      DI_ASSIGN_OR_RETURN(Tensor ikv_all, gather(be, step, ikv));
      DI_ASSIGN_OR_RETURN(Tensor igate_all, gather(be, step, igate));
      DI_RETURN_IF_ERROR(compressor_update(be, d, ic, rope, ikv_all, igate_all, state, layer,
                                           CompressorKind::kIndexer));
    }
  }
  const int64_t T = compressed ? state.num_entries(layer, CompressorKind::kMain) : 0;
  const int64_t nwin = state.window_rows(layer);

  // §5.5 the indexer for this rank's queries over all of the sequence's index keys.
  Tensor picks;  // [n, topk] I32
  std::vector<int32_t> visible;
  if (csa) {
    const int64_t Ti = state.num_entries(layer, CompressorKind::kIndexer);
    DI_EMPTY(index_keys, be, DType::kF32, {std::max<int64_t>(Ti, 1), d.cI});
    if (Ti > 0) {
      Tensor all = index_keys.rows(0, Ti);
      DI_RETURN_IF_ERROR(state.read_entries(layer, CompressorKind::kIndexer, all));
    }
    visible.resize(n);
    std::vector<int32_t> key_start(n, 0);
    for (int64_t i = 0; i < n; ++i) {
      visible[i] = static_cast<int32_t>((step.positions_host[i] + 1) / w.indexer->compressor.m);
      step.indexer_pairs += visible[i];
    }
    DI_ASSIGN_OR_RETURN(picks, be.empty(DType::kI32, {n, d.topk}));
    DI_RETURN_IF_ERROR(indexer_select(be, d, *w.indexer, rope, q_res, x, positions, visible,
                                      key_start, index_keys, std::max<int64_t>(Ti, 1), picks));
  }

  // Keys [cached window rows | the chunk's kv | compressed entries], as attention_forward lays
  // them out for one sequence; the key lists of this rank's queries only.
  DI_EMPTY(keys, be, DType::kF32, {nwin + S + T, d.D});
  if (nwin > 0) {
    Tensor cached = keys.rows(0, nwin);
    DI_RETURN_IF_ERROR(state.read_window(layer, cached));
  }
  Tensor chunk_rows = keys.rows(nwin, nwin + S);
  DI_RETURN_IF_ERROR(be.copy(kv, chunk_rows));
  if (T > 0) {
    Tensor entry_rows = keys.rows(nwin + S, nwin + S + T);
    DI_RETURN_IF_ERROR(state.read_entries(layer, CompressorKind::kMain, entry_rows));
  }
  const int64_t first_pos = step.past - nwin;  // position of window row 0
  auto window_keys = [&](int64_t p) { return p - std::max<int64_t>(first_pos, p - d.W + 1) + 1; };
  auto compressed_keys = [&](int64_t p) -> int64_t {
    if (!compressed) return 0;
    const int64_t vis = (p + 1) / w.compressor->m;
    return csa ? std::min<int64_t>(d.topk, vis) : vis;
  };
  // The longest list of the whole chunk (the last row's: both counts grow with p), as the
  // single-rank call passes it.
  const int64_t last = step.past + S - 1;
  const int64_t max_keys = window_keys(last) + compressed_keys(last);
  std::vector<int32_t> offsets(n + 1, 0), ids, layout;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = step.past + mine[i];
    for (int64_t j = std::max<int64_t>(first_pos, p - d.W + 1); j <= p; ++j)  // (p−W, p]
      ids.push_back(static_cast<int32_t>(j - first_pos));
    if (compressed && !csa) {
      for (int64_t t = 0; t < compressed_keys(p); ++t) ids.push_back(static_cast<int32_t>(nwin + S + t));
    } else if (csa) {
      const int64_t count = compressed_keys(p);
      layout.insert(layout.end(), {static_cast<int32_t>(ids.size()), static_cast<int32_t>(count),
                                   static_cast<int32_t>(nwin + S)});
      ids.insert(ids.end(), count, -1);  // filled by place_ids
    }
    offsets[i + 1] = static_cast<int32_t>(ids.size());
  }
  const int64_t nnz = static_cast<int64_t>(ids.size());
  step.attention_pairs += nnz;
  std::vector<int32_t> lists;
  lists.reserve(offsets.size() + ids.size() + layout.size());
  lists.insert(lists.end(), offsets.begin(), offsets.end());
  lists.insert(lists.end(), ids.begin(), ids.end());
  lists.insert(lists.end(), layout.begin(), layout.end());
  DI_ASSIGN_OR_RETURN(Tensor lists_t, to_backend_i32(be, lists, {static_cast<int64_t>(lists.size())}));
  const Tensor key_offsets = lists_t.rows(0, n + 1);
  Tensor key_ids = lists_t.rows(n + 1, n + 1 + nnz);
  if (csa) {
    const Tensor layout_t = lists_t.rows(n + 1 + nnz, n + 1 + nnz + 3 * n).view({n, 3});
    DI_RETURN_IF_ERROR(be.place_ids(picks, layout_t, key_ids));
  }
  Tensor keys3 = keys.view({keys.dim(0), 1, d.D});
  DI_EMPTY(o, be, DType::kF32, {n, d.nH, d.D});
  DI_RETURN_IF_ERROR(be.attention(q3, keys3, keys3, key_offsets, key_ids, &w.sinks,
                                  1.0f / std::sqrt(static_cast<float>(d.D)), o, max_keys));

  // §4.4 de-rotate by the query position, grouped output projection (this rank's rows).
  DI_RETURN_IF_ERROR(be.rope(o, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, true));
  DI_EMPTY(z, be, DType::kF32, {n, d.G * d.Ro});
  DI_RETURN_IF_ERROR(be.linear(o.view({n, d.nH * d.D}), w.wo_a, z, d.G));
  DI_RETURN_IF_ERROR(be.linear(z, w.wo_b, y));

  // Window cache <- last W−1 rows of [cached | chunk] (every rank: the same rows).
  const int64_t end = nwin + S, keep = std::min<int64_t>(d.W - 1, end);
  return state.write_window(layer, keys.rows(end - keep, end));
}

}  // namespace deepinfer::model::v4
