#include "model/deepseek_v4/compressor.h"

#include <cstring>
#include <limits>

namespace deepinfer::model::v4 {

Status compressor_update(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                         const RopeTable& rope, const Tensor& x, DeepseekV4State& state, int layer,
                         CompressorKind kind) {
  const int64_t S = x.dim(0), m = w.m, coff = w.coff, dw = w.d, cd = coff * dw;
  Tensor c = Tensor::empty(DType::kF32, {S, cd});  // raw kv projections   [S, coff·d]
  Tensor z = Tensor::empty(DType::kF32, {S, cd});  // raw gate projections [S, coff·d]
  DI_RETURN_IF_ERROR(be.matmul(x, w.wkv, c));
  DI_RETURN_IF_ERROR(be.matmul(x, w.wgate, z));

  CompressorTail& tail = state.tail(layer, kind);
  const int64_t total = tail.rows + S;
  std::vector<float> raw_kv(total * cd), raw_gate(total * cd);  // tail ++ chunk, token order
  std::memcpy(raw_kv.data(), tail.kv.data(), tail.rows * cd * sizeof(float));
  std::memcpy(raw_gate.data(), tail.gate.data(), tail.rows * cd * sizeof(float));
  std::memcpy(raw_kv.data() + tail.rows * cd, c.data<float>(), S * cd * sizeof(float));
  std::memcpy(raw_gate.data() + tail.rows * cd, z.data<float>(), S * cd * sizeof(float));
  const int64_t n = total / m, used = n * m;

  if (n > 0) {
    const int64_t slots = coff * m;
    const float* ape = w.ape.data<float>();  // [m, coff·d]
    Tensor values = Tensor::empty(DType::kF32, {n, slots, dw});
    Tensor scores = Tensor::empty(DType::kF32, {n, slots, dw});
    float* V = values.data<float>();
    float* Z = scores.data<float>();
    auto slot = [&](int64_t i, int64_t l) { return (i * slots + l) * dw; };
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        const float* kv_row = raw_kv.data() + (i * m + j) * cd;
        const float* g_row = raw_gate.data() + (i * m + j) * cd;
        if (coff == 1) {  // HCA: the window's own m slots
          for (int64_t ch = 0; ch < dw; ++ch) {
            V[slot(i, j) + ch] = kv_row[ch];
            Z[slot(i, j) + ch] = g_row[ch] + ape[j * cd + ch];
          }
          continue;
        }
        // CSA: slot j = a-half of window i-1 (bias B^a[j]); slot m+j = b-half of window i (B^b[j]).
        for (int64_t ch = 0; ch < dw; ++ch) {
          V[slot(i, m + j) + ch] = kv_row[dw + ch];
          Z[slot(i, m + j) + ch] = g_row[dw + ch] + ape[j * cd + dw + ch];
        }
        if (i > 0) {
          const float* pkv = raw_kv.data() + ((i - 1) * m + j) * cd;
          const float* pg = raw_gate.data() + ((i - 1) * m + j) * cd;
          for (int64_t ch = 0; ch < dw; ++ch) {
            V[slot(i, j) + ch] = pkv[ch];
            Z[slot(i, j) + ch] = pg[ch] + ape[j * cd + ch];
          }
        } else if (tail.has_overlap) {
          for (int64_t ch = 0; ch < dw; ++ch) {
            V[slot(i, j) + ch] = tail.overlap_kv[j * dw + ch];
            Z[slot(i, j) + ch] = tail.overlap_gate[j * dw + ch];
          }
        } else {  // entry 0 has no a-part: weight exactly 0
          for (int64_t ch = 0; ch < dw; ++ch) {
            V[slot(i, j) + ch] = 0.f;
            Z[slot(i, j) + ch] = -std::numeric_limits<float>::infinity();
          }
        }
      }
    if (coff == 2) {  // overlap <- a-halves of the last closed window, gate already biased
      tail.overlap_kv.assign(m * dw, 0.f);
      tail.overlap_gate.assign(m * dw, 0.f);
      for (int64_t j = 0; j < m; ++j) {
        const float* kv_row = raw_kv.data() + ((n - 1) * m + j) * cd;
        const float* g_row = raw_gate.data() + ((n - 1) * m + j) * cd;
        for (int64_t ch = 0; ch < dw; ++ch) {
          tail.overlap_kv[j * dw + ch] = kv_row[ch];
          tail.overlap_gate[j * dw + ch] = g_row[ch] + ape[j * cd + ch];
        }
      }
      tail.has_overlap = true;
    }
    Tensor pooled = Tensor::empty(DType::kF32, {n, dw});   // C_w
    DI_RETURN_IF_ERROR(be.softmax_pool(values, scores, pooled));
    Tensor entries = Tensor::empty(DType::kF32, {n, dw});  // K_w = rope(rmsw(C_w), w·m)
    DI_RETURN_IF_ERROR(be.rms_norm(pooled, &w.norm, d.eps, entries));
    const int64_t first = state.num_entries(layer, kind);
    Tensor pos = Tensor::empty(DType::kI32, {n});
    for (int64_t i = 0; i < n; ++i) pos.data<int32_t>()[i] = static_cast<int32_t>((first + i) * m);
    Tensor e3 = entries.view({n, 1, dw});
    DI_RETURN_IF_ERROR(be.rope(e3, pos, rope.inv_freq, backend::RopeStyle::kInterleavedTrailing,
                               rope.mscale, false));
    DI_RETURN_IF_ERROR(state.append_entries(layer, kind, entries));
  }
  tail.rows = total - used;
  tail.kv.assign(raw_kv.begin() + used * cd, raw_kv.end());
  tail.gate.assign(raw_gate.begin() + used * cd, raw_gate.end());
  return OkStatus();
}

}  // namespace deepinfer::model::v4
