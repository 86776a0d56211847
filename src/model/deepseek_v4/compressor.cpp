#include "model/deepseek_v4/compressor.h"

#include <vector>

#include "model/placement.h"

namespace deepinfer::model::v4 {

Status compressor_project(backend::Backend& be, const CompressorWeights& w, const Tensor& x,
                          Tensor& kv, Tensor& gate) {
  const Weight* ws[] = {&w.wkv, &w.wgate};  // one x: one launch where the backend fuses them
  Tensor* outs[] = {&kv, &gate};
  return be.linear_multi(x, ws, outs);
}

Status compressor_update(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                         const RopeTable& rope, const Tensor& kv, const Tensor& gate,
                         DeepseekV4State& state, int layer, CompressorKind kind) {
  const int64_t S = kv.dim(0), m = w.m, coff = w.coff, dw = w.d, cd = coff * dw;
  CompressorTail& tail = state.tail(layer, kind);
  if (!tail.kv.defined()) {  // first use: fixed-size tail buffers
    DI_ASSIGN_OR_RETURN(tail.kv, be.alloc(DType::kF32, {m, cd}));
    DI_ASSIGN_OR_RETURN(tail.gate, be.alloc(DType::kF32, {m, cd}));
    if (coff == 2) {
      DI_ASSIGN_OR_RETURN(tail.overlap_kv, be.alloc(DType::kF32, {m, dw}));
      DI_ASSIGN_OR_RETURN(tail.overlap_gate, be.alloc(DType::kF32, {m, dw}));
    }
  }
  // raw = tail rows ++ this chunk's projections, in token order   [total, coff·d]
  const int64_t total = tail.rows + S;
  DI_EMPTY(raw_kv, be, DType::kF32, {total, cd});
  DI_EMPTY(raw_gate, be, DType::kF32, {total, cd});
  if (tail.rows > 0) {
    Tensor dk = raw_kv.rows(0, tail.rows), dg = raw_gate.rows(0, tail.rows);
    DI_RETURN_IF_ERROR(be.copy(tail.kv.rows(0, tail.rows), dk));
    DI_RETURN_IF_ERROR(be.copy(tail.gate.rows(0, tail.rows), dg));
  }
  Tensor ck = raw_kv.rows(tail.rows, total), cg = raw_gate.rows(tail.rows, total);
  DI_RETURN_IF_ERROR(be.copy(kv, ck));
  DI_RETURN_IF_ERROR(be.copy(gate, cg));
  const int64_t n = total / m, used = n * m;

  if (n > 0) {
    const int64_t slots = coff * m;
    DI_EMPTY(values, be, DType::kF32, {n, slots, dw});
    DI_EMPTY(scores, be, DType::kF32, {n, slots, dw});
    const bool csa = coff == 2;
    const bool overlap = csa && tail.has_overlap;
    DI_RETURN_IF_ERROR(be.compressor_slots(raw_kv.rows(0, used), raw_gate.rows(0, used), w.ape,
                                           overlap ? &tail.overlap_kv : nullptr,
                                           overlap ? &tail.overlap_gate : nullptr, m, values,
                                           scores, csa ? &tail.overlap_kv : nullptr,
                                           csa ? &tail.overlap_gate : nullptr));
    if (csa) tail.has_overlap = true;
    DI_EMPTY(pooled, be, DType::kF32, {n, dw});   // C_w
    DI_RETURN_IF_ERROR(be.softmax_pool(values, scores, pooled));
    DI_EMPTY(entries, be, DType::kF32, {n, dw});  // K_w = rope(rmsw(C_w), w·m)
    DI_RETURN_IF_ERROR(be.rms_norm(pooled, &w.norm, d.eps, entries));
    const int64_t first = state.num_entries(layer, kind);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>((first + i) * m);
    DI_ASSIGN_OR_RETURN(Tensor positions, to_backend_i32(be, pos, {n}));
    Tensor e3 = entries.view({n, 1, dw});
    DI_RETURN_IF_ERROR(be.rope(e3, positions, rope.inv_freq,
                               backend::RopeStyle::kInterleavedTrailing, rope.mscale, false));
    DI_RETURN_IF_ERROR(state.append_entries(layer, kind, entries));
  }
  tail.rows = total - used;
  if (tail.rows > 0) {
    Tensor tk = tail.kv.rows(0, tail.rows), tg = tail.gate.rows(0, tail.rows);
    DI_RETURN_IF_ERROR(be.copy(raw_kv.rows(used, total), tk));
    DI_RETURN_IF_ERROR(be.copy(raw_gate.rows(used, total), tg));
  }
  return OkStatus();
}

}  // namespace deepinfer::model::v4
