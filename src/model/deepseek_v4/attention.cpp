#include "model/deepseek_v4/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/indexer.h"
#include "model/placement.h"

namespace deepinfer::model::v4 {

Status attention_project(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                         const RopeTable& rope, const Tensor& x, const Tensor& positions,
                         AttentionProjections& p) {
  using backend::RopeStyle;
  const int64_t S = x.dim(0);
  const bool csa = w.type == io::AttentionType::kCompressedSparse;
  const bool compressed = w.compressor != nullptr;

  // §4.1 projections, over every row of the step. Every projection of x — wq_a, wkv and, on
  // compressed layers, the compressors' wkv / wgate (§6.3; on CSA layers the indexer's
  // compressor and weights_proj too) — in one linear_multi call, and on CSA layers wq_b with the
  // indexer's wq_b (both read q_res): the same products, which a device backend runs in fewer
  // launches.
  DI_EMPTY(q_a, be, DType::kF32, {S, d.Rq});
  DI_EMPTY(kv_raw, be, DType::kF32, {S, d.D});
  Tensor &ckv = p.ckv, &cgate = p.cgate, &ikv = p.ikv, &igate = p.igate;
  IndexerProjections& iproj = p.iproj;
  std::vector<const Weight*> x_w{&w.wq_a, &w.wkv};
  std::vector<Tensor*> x_out{&q_a, &kv_raw};
  if (compressed) {
    const int64_t cd = w.compressor->coff * w.compressor->d;
    DI_ASSIGN_OR_RETURN(ckv, be.empty(DType::kF32, {S, cd}));
    DI_ASSIGN_OR_RETURN(cgate, be.empty(DType::kF32, {S, cd}));
    x_w.insert(x_w.end(), {&w.compressor->wkv, &w.compressor->wgate});
    x_out.insert(x_out.end(), {&ckv, &cgate});
    if (csa) {
      const CompressorWeights& ic = w.indexer->compressor;
      DI_ASSIGN_OR_RETURN(ikv, be.empty(DType::kF32, {S, ic.coff * ic.d}));
      DI_ASSIGN_OR_RETURN(igate, be.empty(DType::kF32, {S, ic.coff * ic.d}));
      DI_ASSIGN_OR_RETURN(iproj.head_w, be.empty(DType::kF32, {S, d.nI}));
      x_w.insert(x_w.end(), {&ic.wkv, &ic.wgate, &w.indexer->weights_proj});
      x_out.insert(x_out.end(), {&ikv, &igate, &iproj.head_w});
    }
  }
  DI_RETURN_IF_ERROR(be.linear_multi(x, x_w, x_out));
  // q_res = rmsw(q_a; q_norm) and kv = rope(rmsw(kv_raw; kv_norm)): independent row norms, one
  // call (a device backend runs them as one launch).
  DI_ASSIGN_OR_RETURN(p.q_res, be.empty(DType::kF32, {S, d.Rq}));  // also feeds the indexer
  DI_ASSIGN_OR_RETURN(p.kv, be.empty(DType::kF32, {S, d.D}));      // key = value
  Tensor kv3 = p.kv.view({S, 1, d.D});
  DI_RETURN_IF_ERROR(be.rms_norm_and_rope(q_a, &w.q_norm, p.q_res, kv_raw.view({S, 1, d.D}),
                                          &w.kv_norm, d.eps, positions, rope.inv_freq,
                                          RopeStyle::kInterleavedTrailing, rope.mscale, kv3));
  DI_ASSIGN_OR_RETURN(p.q, be.empty(DType::kF32, {S, d.nH * d.D}));
  if (iproj.head_w.defined()) {  // CSA
    DI_ASSIGN_OR_RETURN(iproj.q_idx, be.empty(DType::kF32, {S, d.nI * d.cI}));
    const Weight* qw[] = {&w.wq_b, &w.indexer->wq_b};
    Tensor* qo[] = {&p.q, &iproj.q_idx};
    DI_RETURN_IF_ERROR(be.linear_multi(p.q_res, qw, qo));
  } else {
    DI_RETURN_IF_ERROR(be.linear(p.q_res, w.wq_b, p.q));
  }
  Tensor q3 = p.q.view({S, d.nH, d.D});  // rms per head (unweighted), then rope: one op
  return be.rms_norm_rope(q3, nullptr, d.eps, positions, rope.inv_freq,
                          RopeStyle::kInterleavedTrailing, rope.mscale, q3);
}

Status attention_core(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                      const RopeTable& rope, const Tensor& x, const StepBatch& batch, int layer,
                      AttentionProjections& p, Tensor& o) {
  const int64_t S = x.dim(0);
  const bool csa = w.type == io::AttentionType::kCompressedSparse;
  const bool compressed = w.compressor != nullptr;
  const Tensor& positions = batch.positions;
  const Tensor &ckv = p.ckv, &cgate = p.cgate, &ikv = p.ikv, &igate = p.igate, &kv = p.kv;
  const Tensor& q_res = p.q_res;
  IndexerProjections& iproj = p.iproj;
  Tensor q3 = p.q.view({S, d.nH, d.D});

  // Per sequence: compressors (§6.3, projected above over every row at once); their index keys
  // go back to back for one indexer call.
  const size_t B = batch.seqs.size();
  std::vector<int64_t> entries(B, 0), window(B, 0), base(B + 1, 0), index_base(B + 1, 0);
  // Decode-sized chunks join their compressors' tails through one copy_many for the step, and
  // the windows they close are pooled together (compressor.h); longer chunks update in place.
  CopyList tails;
  std::vector<DeepseekV4State*> close_main, close_index;
  for (size_t i = 0; i < B && compressed; ++i) {
    const SeqSlice& sq = batch.seqs[i];
    const int64_t r0 = sq.begin, r1 = sq.begin + sq.len;
    bool closes = false;
    DI_RETURN_IF_ERROR(compressor_update(be, d, *w.compressor, rope, ckv.rows(r0, r1),
                                         cgate.rows(r0, r1), *sq.state, layer,
                                         CompressorKind::kMain, &tails, &closes));
    if (closes) close_main.push_back(sq.state);
    if (csa) {
      DI_RETURN_IF_ERROR(compressor_update(be, d, w.indexer->compressor, rope, ikv.rows(r0, r1),
                                           igate.rows(r0, r1), *sq.state, layer,
                                           CompressorKind::kIndexer, &tails, &closes));
      if (closes) close_index.push_back(sq.state);
    }
  }
  DI_RETURN_IF_ERROR(tails.flush(be));
  if (compressed)
    DI_RETURN_IF_ERROR(compressor_pool_tails(be, d, *w.compressor, rope, close_main, layer,
                                             CompressorKind::kMain));
  if (csa)
    DI_RETURN_IF_ERROR(compressor_pool_tails(be, d, w.indexer->compressor, rope, close_index,
                                             layer, CompressorKind::kIndexer));
  for (size_t i = 0; i < B; ++i) {
    const SeqSlice& sq = batch.seqs[i];
    DeepseekV4State& state = *sq.state;
    if (compressed) entries[i] = state.num_entries(layer, CompressorKind::kMain);
    index_base[i + 1] =
        index_base[i] + (csa ? state.num_entries(layer, CompressorKind::kIndexer) : 0);
    window[i] = state.window_rows(layer);
    base[i + 1] = base[i] + window[i] + sq.len + entries[i];
  }

  // §5.5 the indexer over every row at once: row s of sequence i sees the entries w < ⌊(p+1)/m⌋
  // of its own keys; the picks stay on the device.
  // The per-sequence state rows a step reads and writes go to the backend in one copy_many
  // each (index keys; window + chunk + entries; the new windows) instead of a copy per piece.
  CopyList copies;
  Tensor picks;  // [S, topk] I32
  std::vector<int32_t> visible;
  if (csa) {
    DI_EMPTY(index_keys, be, DType::kF32, {std::max<int64_t>(index_base[B], 1), d.cI});
    std::vector<int32_t> key_start(S);
    visible.resize(S);
    int64_t width = 1;
    for (size_t i = 0; i < B; ++i) {
      const SeqSlice& sq = batch.seqs[i];
      if (index_base[i + 1] > index_base[i]) {
        Tensor mine = index_keys.rows(index_base[i], index_base[i + 1]);
        DI_RETURN_IF_ERROR(
            sq.state->defer_read_entries(layer, CompressorKind::kIndexer, mine, copies));
      }
      for (int64_t s = 0; s < sq.len; ++s) {
        visible[sq.begin + s] =
            static_cast<int32_t>((batch.positions_host[sq.begin + s] + 1) / w.indexer->compressor.m);
        key_start[sq.begin + s] = static_cast<int32_t>(index_base[i]);
      }
      width = std::max(width, index_base[i + 1] - index_base[i]);
    }
    DI_ASSIGN_OR_RETURN(picks, be.empty(DType::kI32, {S, d.topk}));
    DI_RETURN_IF_ERROR(copies.flush(be));
    DI_RETURN_IF_ERROR(indexer_select(be, d, *w.indexer, rope, q_res, x, positions, visible,
                                      key_start, index_keys, width, picks,
                                      iproj.q_idx.defined() ? &iproj : nullptr));
  }

  // Keys of sequence i at [base_i, base_{i+1}): [window rows of its cache | its chunk's kv |
  // its compressed entries]; one softmax per query over its own list (§4.3, §5.6). The lists
  // are built on the host except the CSA picks, which place_ids copies in on the device (their
  // count per row is min(topk, visible), known here), so nothing waits for the device.
  DI_EMPTY(keys, be, DType::kF32, {std::max<int64_t>(base[B], 1), d.D});
  std::vector<int32_t> offsets(S + 1, 0), ids, layout;
  int64_t max_keys = 0;
  for (size_t i = 0; i < B; ++i) {
    const SeqSlice& sq = batch.seqs[i];
    DeepseekV4State& state = *sq.state;
    const int64_t nwin = window[i], T = entries[i], b0 = base[i];
    Tensor cached = keys.rows(b0, b0 + nwin);
    DI_RETURN_IF_ERROR(state.defer_read_window(layer, cached, copies));
    Tensor chunk_rows = keys.rows(b0 + nwin, b0 + nwin + sq.len);
    copies.add(kv.rows(sq.begin, sq.begin + sq.len), chunk_rows);
    if (T > 0) {
      Tensor entry_rows = keys.rows(b0 + nwin + sq.len, b0 + nwin + sq.len + T);
      DI_RETURN_IF_ERROR(state.defer_read_entries(layer, CompressorKind::kMain, entry_rows, copies));
    }
    const int64_t first_pos = sq.past - nwin;  // position of window row 0
    for (int64_t s = 0; s < sq.len; ++s) {
      const int64_t p = sq.past + s;
      for (int64_t j = std::max<int64_t>(first_pos, p - d.W + 1); j <= p; ++j)  // (p−W, p]
        ids.push_back(static_cast<int32_t>(b0 + j - first_pos));
      if (compressed && !csa) {
        const int64_t m = w.compressor->m;
        for (int64_t t = 0; t < (p + 1) / m; ++t)
          ids.push_back(static_cast<int32_t>(b0 + nwin + sq.len + t));
      } else if (csa) {
        const int64_t count = std::min<int64_t>(d.topk, visible[sq.begin + s]);
        layout.insert(layout.end(), {static_cast<int32_t>(ids.size()), static_cast<int32_t>(count),
                                     static_cast<int32_t>(b0 + nwin + sq.len)});
        ids.insert(ids.end(), count, -1);  // filled by place_ids
      }
      offsets[sq.begin + s + 1] = static_cast<int32_t>(ids.size());
      max_keys = std::max<int64_t>(max_keys, offsets[sq.begin + s + 1] - offsets[sq.begin + s]);
    }
  }
  // One upload: [offsets (S+1) | ids (nnz) | layout (3S, CSA)], queued before the key copies so
  // that the attention kernel follows a kernel (programmatic launch overlap) instead of a memcpy.
  const int64_t nnz = static_cast<int64_t>(ids.size());
  std::vector<int32_t> lists;
  lists.reserve(offsets.size() + ids.size() + layout.size());
  lists.insert(lists.end(), offsets.begin(), offsets.end());
  lists.insert(lists.end(), ids.begin(), ids.end());
  lists.insert(lists.end(), layout.begin(), layout.end());
  DI_ASSIGN_OR_RETURN(Tensor lists_t,
                      to_backend_i32(be, lists, {static_cast<int64_t>(lists.size())}));
  DI_RETURN_IF_ERROR(copies.flush(be));
  const Tensor key_offsets = lists_t.rows(0, S + 1);
  Tensor key_ids = lists_t.rows(S + 1, S + 1 + nnz);
  if (csa) {
    const Tensor layout_t = lists_t.rows(S + 1 + nnz, S + 1 + nnz + 3 * S).view({S, 3});
    DI_RETURN_IF_ERROR(be.place_ids(picks, layout_t, key_ids));
  }
  Tensor keys3 = keys.view({keys.dim(0), 1, d.D});
  DI_RETURN_IF_ERROR(be.attention(q3, keys3, keys3, key_offsets, key_ids, &w.sinks,
                                  1.0f / std::sqrt(static_cast<float>(d.D)), o, max_keys));

  // Window cache <- last W−1 rows of [cached | chunk], per sequence.
  for (size_t i = 0; i < B; ++i) {
    const SeqSlice& sq = batch.seqs[i];
    const int64_t end = base[i] + window[i] + sq.len;
    const int64_t keep = std::min<int64_t>(d.W - 1, window[i] + sq.len);
    DI_RETURN_IF_ERROR(sq.state->defer_write_window(layer, keys.rows(end - keep, end), copies));
  }
  return copies.flush(be);
}

Status attention_output(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                        const RopeTable& rope, const Tensor& positions, Tensor& o, Tensor& y) {
  // §4.4 de-rotate by the query position (in place), grouped output projection.
  const int64_t S = o.dim(0);
  DI_RETURN_IF_ERROR(be.rope(o, positions, rope.inv_freq, backend::RopeStyle::kInterleavedTrailing,
                             rope.mscale, true));
  DI_EMPTY(z, be, DType::kF32, {S, d.G * d.Ro});
  DI_RETURN_IF_ERROR(be.linear(o.view({S, d.nH * d.D}), w.wo_a, z, d.G));
  return be.linear(z, w.wo_b, y);
}

Status attention_forward(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                         const RopeTable& rope, const Tensor& x, const StepBatch& batch, int layer,
                         Tensor& y) {
  AttentionProjections p;
  DI_RETURN_IF_ERROR(attention_project(be, d, w, rope, x, batch.positions, p));
  DI_EMPTY(o, be, DType::kF32, {x.dim(0), d.nH, d.D});
  DI_RETURN_IF_ERROR(attention_core(be, d, w, rope, x, batch, layer, p, o));
  return attention_output(be, d, w, rope, batch.positions, o, y);
}

}  // namespace deepinfer::model::v4
