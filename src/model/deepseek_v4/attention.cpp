#include "model/deepseek_v4/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/indexer.h"

namespace deepinfer::model::v4 {

Status attention_forward(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                         const RopeTable& rope, const Tensor& x, const Tensor& positions,
                         DeepseekV4State& state, int layer, Tensor& y) {
  using backend::RopeStyle;
  const int64_t S = x.dim(0);
  const int64_t P = state.num_tokens();
  const bool csa = w.type == io::AttentionType::kCompressedSparse;
  const bool compressed = w.compressor != nullptr;

  // §4.1 projections.
  Tensor q_a = Tensor::empty(DType::kF32, {S, d.Rq});
  DI_RETURN_IF_ERROR(be.matmul(x, w.wq_a, q_a));
  Tensor q_res = Tensor::empty(DType::kF32, {S, d.Rq});               // also feeds the indexer
  DI_RETURN_IF_ERROR(be.rms_norm(q_a, &w.q_norm, d.eps, q_res));
  Tensor q = Tensor::empty(DType::kF32, {S, d.nH * d.D});
  DI_RETURN_IF_ERROR(be.matmul(q_res, w.wq_b, q));
  Tensor q_heads = q.view({S * d.nH, d.D});
  DI_RETURN_IF_ERROR(be.rms_norm(q_heads, nullptr, d.eps, q_heads));  // unweighted, per head
  Tensor q3 = q.view({S, d.nH, d.D});
  DI_RETURN_IF_ERROR(be.rope(q3, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, false));
  Tensor kv_raw = Tensor::empty(DType::kF32, {S, d.D});
  DI_RETURN_IF_ERROR(be.matmul(x, w.wkv, kv_raw));
  Tensor kv = Tensor::empty(DType::kF32, {S, d.D});                   // key = value
  DI_RETURN_IF_ERROR(be.rms_norm(kv_raw, &w.kv_norm, d.eps, kv));
  Tensor kv3 = kv.view({S, 1, d.D});
  DI_RETURN_IF_ERROR(be.rope(kv3, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, false));

  // Compressors (§6.3) and the indexer selection (§5.5).
  Tensor selected;  // [S, topk] I32 (CSA)
  int64_t T = 0;
  if (compressed) {
    DI_RETURN_IF_ERROR(compressor_update(be, d, *w.compressor, rope, x, state, layer, CompressorKind::kMain));
    T = state.num_entries(layer, CompressorKind::kMain);
    if (csa) {
      DI_RETURN_IF_ERROR(compressor_update(be, d, w.indexer->compressor, rope, x, state, layer,
                                           CompressorKind::kIndexer));
      const int64_t TI = state.num_entries(layer, CompressorKind::kIndexer);
      Tensor index_keys = Tensor::empty(DType::kF32, {TI, d.cI});     // J [T, cI]
      DI_RETURN_IF_ERROR(state.read_entries(layer, CompressorKind::kIndexer, index_keys));
      selected = Tensor::empty(DType::kI32, {S, d.topk});
      DI_RETURN_IF_ERROR(indexer_select(be, d, *w.indexer, rope, q_res, x, positions, index_keys, selected));
    }
  }

  // Key set: [window rows of the cache | chunk kv | compressed entries], one softmax (§4.3, §5.6).
  const int64_t nwin = state.window_rows(layer);
  const int64_t first_pos = P - nwin;  // position of key row 0
  Tensor keys = Tensor::empty(DType::kF32, {nwin + S + T, d.D});
  Tensor cached = keys.rows(0, nwin);
  DI_RETURN_IF_ERROR(state.read_window(layer, cached));
  Tensor chunk_rows = keys.rows(nwin, nwin + S);
  DI_RETURN_IF_ERROR(be.copy(kv, chunk_rows));
  if (T > 0) {
    Tensor entry_rows = keys.rows(nwin + S, nwin + S + T);
    DI_RETURN_IF_ERROR(state.read_entries(layer, CompressorKind::kMain, entry_rows));
  }
  std::vector<int32_t> offsets(S + 1, 0), ids;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t p = P + s;
    for (int64_t j = std::max<int64_t>(first_pos, p - d.W + 1); j <= p; ++j)  // (p−W, p]
      ids.push_back(static_cast<int32_t>(j - first_pos));
    if (compressed && !csa) {
      const int64_t m = w.compressor->m;
      for (int64_t t = 0; t < (p + 1) / m; ++t) ids.push_back(static_cast<int32_t>(nwin + S + t));
    } else if (csa) {
      for (int64_t j = 0; j < d.topk; ++j) {
        const int32_t t = selected.data<int32_t>()[s * d.topk + j];
        if (t >= 0) ids.push_back(static_cast<int32_t>(nwin + S + t));
      }
    }
    offsets[s + 1] = static_cast<int32_t>(ids.size());
  }
  Tensor key_offsets = Tensor::from_i32({S + 1}, offsets);
  Tensor key_ids = Tensor::from_i32({static_cast<int64_t>(ids.size())}, ids);
  Tensor keys3 = keys.view({nwin + S + T, 1, d.D});
  Tensor o = Tensor::empty(DType::kF32, {S, d.nH, d.D});
  DI_RETURN_IF_ERROR(be.attention(q3, keys3, keys3, key_offsets, key_ids, &w.sinks,
                                  1.0f / std::sqrt(static_cast<float>(d.D)), o));

  // §4.4 de-rotate by the query position, grouped output projection.
  DI_RETURN_IF_ERROR(be.rope(o, positions, rope.inv_freq, RopeStyle::kInterleavedTrailing, rope.mscale, true));
  Tensor z = Tensor::empty(DType::kF32, {S, d.G * d.Ro});
  DI_RETURN_IF_ERROR(be.matmul(o.view({S, d.nH * d.D}), w.wo_a, z, d.G));
  DI_RETURN_IF_ERROR(be.matmul(z, w.wo_b, y));

  // Window cache <- last W−1 rows of [cached | chunk].
  const int64_t keep = std::min<int64_t>(d.W - 1, nwin + S);
  return state.write_window(layer, keys.rows(nwin + S - keep, nwin + S));
}

}  // namespace deepinfer::model::v4
