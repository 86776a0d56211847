#include "model/deepseek_v4/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/indexer.h"
#include "model/placement.h"

namespace deepinfer::model::v4 {

Status attention_forward(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                         const RopeTable& rope, const Tensor& x, const StepBatch& batch, int layer,
                         Tensor& y) {
  using backend::RopeStyle;
  const int64_t S = x.dim(0);
  const bool csa = w.type == io::AttentionType::kCompressedSparse;
  const bool compressed = w.compressor != nullptr;
  const Tensor& positions = batch.positions;

  // §4.1 projections, over every row of the step.
  DI_ALLOC(q_a, be, DType::kF32, {S, d.Rq});
  DI_RETURN_IF_ERROR(be.linear(x, w.wq_a, q_a));
  DI_ALLOC(q_res, be, DType::kF32, {S, d.Rq});               // also feeds the indexer
  DI_RETURN_IF_ERROR(be.rms_norm(q_a, &w.q_norm, d.eps, q_res));
  DI_ALLOC(q, be, DType::kF32, {S, d.nH * d.D});
  DI_RETURN_IF_ERROR(be.linear(q_res, w.wq_b, q));
  Tensor q_heads = q.view({S * d.nH, d.D});
  DI_RETURN_IF_ERROR(be.rms_norm(q_heads, nullptr, d.eps, q_heads));  // unweighted, per head
  Tensor q3 = q.view({S, d.nH, d.D});
  DI_RETURN_IF_ERROR(be.rope(q3, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, false));
  DI_ALLOC(kv_raw, be, DType::kF32, {S, d.D});
  DI_RETURN_IF_ERROR(be.linear(x, w.wkv, kv_raw));
  DI_ALLOC(kv, be, DType::kF32, {S, d.D});                   // key = value
  DI_RETURN_IF_ERROR(be.rms_norm(kv_raw, &w.kv_norm, d.eps, kv));
  Tensor kv3 = kv.view({S, 1, d.D});
  DI_RETURN_IF_ERROR(be.rope(kv3, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, false));

  // Per sequence: compressors (§6.3) and the indexer selection (§5.5).
  const size_t B = batch.seqs.size();
  std::vector<Tensor> picks(B), selected(B);  // [len, topk] I32: backend, then host (CSA)
  std::vector<int64_t> entries(B, 0), window(B, 0), base(B + 1, 0);
  for (size_t i = 0; i < B; ++i) {
    const SeqSlice& sq = batch.seqs[i];
    DeepseekV4State& state = *sq.state;
    const Tensor xs = x.rows(sq.begin, sq.begin + sq.len);
    if (compressed) {
      DI_RETURN_IF_ERROR(compressor_update(be, d, *w.compressor, rope, xs, state, layer,
                                           CompressorKind::kMain));
      entries[i] = state.num_entries(layer, CompressorKind::kMain);
      if (csa) {
        DI_RETURN_IF_ERROR(compressor_update(be, d, w.indexer->compressor, rope, xs, state, layer,
                                             CompressorKind::kIndexer));
        const int64_t TI = state.num_entries(layer, CompressorKind::kIndexer);
        DI_ALLOC(index_keys, be, DType::kF32, {TI, d.cI});  // J [T, cI]
        DI_RETURN_IF_ERROR(state.read_entries(layer, CompressorKind::kIndexer, index_keys));
        DI_ASSIGN_OR_RETURN(picks[i], be.alloc(DType::kI32, {sq.len, d.topk}));
        DI_RETURN_IF_ERROR(indexer_select(
            be, d, *w.indexer, rope, q_res.rows(sq.begin, sq.begin + sq.len), xs,
            positions.rows(sq.begin, sq.begin + sq.len),
            batch.positions_host.subspan(sq.begin, sq.len), index_keys, picks[i]));
      }
    }
    window[i] = state.window_rows(layer);
    base[i + 1] = base[i] + window[i] + sq.len + entries[i];
  }
  // The key lists are built on the host: one wait for every sequence's picks.
  if (csa)
    for (size_t i = 0; i < B; ++i) {
      DI_ASSIGN_OR_RETURN(selected[i], to_host(be, picks[i]));
    }

  // Keys of sequence i at [base_i, base_{i+1}): [window rows of its cache | its chunk's kv |
  // its compressed entries]; one softmax per query over its own list (§4.3, §5.6).
  DI_ALLOC(keys, be, DType::kF32, {std::max<int64_t>(base[B], 1), d.D});
  std::vector<int32_t> offsets(S + 1, 0), ids;
  for (size_t i = 0; i < B; ++i) {
    const SeqSlice& sq = batch.seqs[i];
    DeepseekV4State& state = *sq.state;
    const int64_t nwin = window[i], T = entries[i], b0 = base[i];
    Tensor cached = keys.rows(b0, b0 + nwin);
    DI_RETURN_IF_ERROR(state.read_window(layer, cached));
    Tensor chunk_rows = keys.rows(b0 + nwin, b0 + nwin + sq.len);
    DI_RETURN_IF_ERROR(be.copy(kv.rows(sq.begin, sq.begin + sq.len), chunk_rows));
    if (T > 0) {
      Tensor entry_rows = keys.rows(b0 + nwin + sq.len, b0 + nwin + sq.len + T);
      DI_RETURN_IF_ERROR(state.read_entries(layer, CompressorKind::kMain, entry_rows));
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
        for (int64_t j = 0; j < d.topk; ++j) {
          const int32_t t = selected[i].data<int32_t>()[s * d.topk + j];
          if (t >= 0) ids.push_back(static_cast<int32_t>(b0 + nwin + sq.len + t));
        }
      }
      offsets[sq.begin + s + 1] = static_cast<int32_t>(ids.size());
    }
  }
  DI_ASSIGN_OR_RETURN(Tensor key_offsets, to_backend_i32(be, offsets, {S + 1}));
  DI_ASSIGN_OR_RETURN(Tensor key_ids, to_backend_i32(be, ids, {static_cast<int64_t>(ids.size())}));
  Tensor keys3 = keys.view({keys.dim(0), 1, d.D});
  DI_ALLOC(o, be, DType::kF32, {S, d.nH, d.D});
  DI_RETURN_IF_ERROR(be.attention(q3, keys3, keys3, key_offsets, key_ids, &w.sinks,
                                  1.0f / std::sqrt(static_cast<float>(d.D)), o));

  // §4.4 de-rotate by the query position, grouped output projection.
  DI_RETURN_IF_ERROR(be.rope(o, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, true));
  DI_ALLOC(z, be, DType::kF32, {S, d.G * d.Ro});
  DI_RETURN_IF_ERROR(be.linear(o.view({S, d.nH * d.D}), w.wo_a, z, d.G));
  DI_RETURN_IF_ERROR(be.linear(z, w.wo_b, y));

  // Window cache <- last W−1 rows of [cached | chunk], per sequence.
  for (size_t i = 0; i < B; ++i) {
    const SeqSlice& sq = batch.seqs[i];
    const int64_t end = base[i] + window[i] + sq.len;
    const int64_t keep = std::min<int64_t>(d.W - 1, window[i] + sq.len);
    DI_RETURN_IF_ERROR(sq.state->write_window(layer, keys.rows(end - keep, end)));
  }
  return OkStatus();
}

}  // namespace deepinfer::model::v4
