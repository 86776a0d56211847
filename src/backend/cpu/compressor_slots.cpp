// Compressor slot assembly (deepseek-v4.md §6.3; semantics in backend.h compressor_slots).
#include <limits>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status compressor_slots(const CpuContext& ctx, const Tensor& kv, const Tensor& gate,
                        const Tensor& ape, const Tensor* overlap_kv, const Tensor* overlap_gate,
                        int64_t m, Tensor& values, Tensor& scores, Tensor* next_overlap_kv,
                        Tensor* next_overlap_gate) {
  (void)ctx;
  DI_ASSIGN_OR_RETURN(const SlotsDims dims,
                      check_compressor_slots(kv, gate, ape, overlap_kv, overlap_gate, m, values,
                                             scores, next_overlap_kv, next_overlap_gate));
  const int64_t n = dims.n, coff = dims.coff, dw = dims.d, cd = coff * dw, slots = coff * m;
  const float* K = kv.data<float>();
  const float* G = gate.data<float>();
  const float* A = ape.data<float>();
  float* V = values.data<float>();
  float* Z = scores.data<float>();
  auto slot = [&](int64_t i, int64_t l) { return (i * slots + l) * dw; };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      const float* kv_row = K + (i * m + j) * cd;
      const float* g_row = G + (i * m + j) * cd;
      if (coff == 1) {  // HCA: the window's own m slots
        for (int64_t c = 0; c < dw; ++c) {
          V[slot(i, j) + c] = kv_row[c];
          Z[slot(i, j) + c] = g_row[c] + A[j * cd + c];
        }
        continue;
      }
      for (int64_t c = 0; c < dw; ++c) {  // b-half of this window
        V[slot(i, m + j) + c] = kv_row[dw + c];
        Z[slot(i, m + j) + c] = g_row[dw + c] + A[j * cd + dw + c];
      }
      if (i > 0) {  // a-half of the previous window
        const float* pk = K + ((i - 1) * m + j) * cd;
        const float* pg = G + ((i - 1) * m + j) * cd;
        for (int64_t c = 0; c < dw; ++c) {
          V[slot(i, j) + c] = pk[c];
          Z[slot(i, j) + c] = pg[c] + A[j * cd + c];
        }
      } else if (overlap_kv != nullptr) {
        const float* ok = overlap_kv->data<float>() + j * dw;
        const float* og = overlap_gate->data<float>() + j * dw;
        for (int64_t c = 0; c < dw; ++c) {
          V[slot(i, j) + c] = ok[c];
          Z[slot(i, j) + c] = og[c];
        }
      } else {  // entry 0 has no a-part: weight exactly 0
        for (int64_t c = 0; c < dw; ++c) {
          V[slot(i, j) + c] = 0.f;
          Z[slot(i, j) + c] = -std::numeric_limits<float>::infinity();
        }
      }
    }
  if (next_overlap_kv != nullptr) {  // written last: may alias overlap_kv / overlap_gate
    float* nk = next_overlap_kv->data<float>();
    float* ng = next_overlap_gate->data<float>();
    for (int64_t j = 0; j < m; ++j) {
      const float* kv_row = K + ((n - 1) * m + j) * cd;
      const float* g_row = G + ((n - 1) * m + j) * cd;
      for (int64_t c = 0; c < dw; ++c) {
        nk[j * dw + c] = kv_row[c];
        ng[j * dw + c] = g_row[c] + A[j * cd + c];
      }
    }
  }
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
