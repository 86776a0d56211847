#include "model/deepseek_v4/compressor.h"

#include <vector>

#include "common/env.h"
#include "model/placement.h"

namespace deepinfer::model::v4 {

Status compressor_project(backend::Backend& be, const CompressorWeights& w, const Tensor& x,
                          Tensor& kv, Tensor& gate) {
  const Weight* ws[] = {&w.wkv, &w.wgate};  // one x: one launch where the backend fuses them
  Tensor* outs[] = {&kv, &gate};
  return be.linear_multi(x, ws, outs);
}

namespace {

// Entries [n, dw] of n windows' slot values / scores [n, slots, dw]: C_w = the softmax pool,
// K_w = rope(rmsw(C_w), pos[w]) — row-wise ops, so a row's bits do not depend on the others.
StatusOr<Tensor> pooled_entries(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                                const RopeTable& rope, const Tensor& values, const Tensor& scores,
                                std::span<const int32_t> pos) {
  const int64_t n = values.dim(0), dw = w.d;
  DI_EMPTY(pooled, be, DType::kF32, {n, dw});   // C_w
  DI_RETURN_IF_ERROR(be.softmax_pool(values, scores, pooled));
  DI_EMPTY(entries, be, DType::kF32, {n, dw});  // K_w = rope(rmsw(C_w), w·m)
  DI_ASSIGN_OR_RETURN(Tensor positions, to_backend_i32(be, pos, {n}));
  Tensor e3 = entries.view({n, 1, dw});
  if (env().decode_fusion) {  // one call (a device backend: one launch, the same bits)
    DI_RETURN_IF_ERROR(be.rms_norm_rope(pooled.view({n, 1, dw}), &w.norm, d.eps, positions,
                                        rope.inv_freq, backend::RopeStyle::kInterleavedTrailing,
                                        rope.mscale, e3));
    return entries;
  }
  DI_RETURN_IF_ERROR(be.rms_norm(pooled, &w.norm, d.eps, entries));
  DI_RETURN_IF_ERROR(be.rope(e3, positions, rope.inv_freq,
                             backend::RopeStyle::kInterleavedTrailing, rope.mscale, false));
  return entries;
}

// Pools the n = rows / m closed windows of raw_kv / raw_gate [rows, coff·d] (rows a multiple of
// m) and appends their entries to the state.
Status pool_windows(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                    const RopeTable& rope, const Tensor& raw_kv, const Tensor& raw_gate,
                    CompressorTail& tail, DeepseekV4State& state, int layer, CompressorKind kind) {
  const int64_t m = w.m, coff = w.coff, dw = w.d, n = raw_kv.dim(0) / m;
  const int64_t slots = coff * m;
  DI_EMPTY(values, be, DType::kF32, {n, slots, dw});
  DI_EMPTY(scores, be, DType::kF32, {n, slots, dw});
  const bool csa = coff == 2;
  const bool overlap = csa && tail.has_overlap;
  DI_RETURN_IF_ERROR(be.compressor_slots(raw_kv, raw_gate, w.ape,
                                         overlap ? &tail.overlap_kv : nullptr,
                                         overlap ? &tail.overlap_gate : nullptr, m, values,
                                         scores, csa ? &tail.overlap_kv : nullptr,
                                         csa ? &tail.overlap_gate : nullptr));
  if (csa) tail.has_overlap = true;
  const int64_t first = state.num_entries(layer, kind);
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>((first + i) * m);
  DI_ASSIGN_OR_RETURN(Tensor entries, pooled_entries(be, d, w, rope, values, scores, pos));
  return state.append_entries(layer, kind, entries);
}

}  // namespace

Status compressor_update(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                         const RopeTable& rope, const Tensor& kv, const Tensor& gate,
                         DeepseekV4State& state, int layer, CompressorKind kind,
                         CopyList* later, bool* closes) {
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
  if (closes != nullptr) *closes = false;
  if (later != nullptr && closes != nullptr && tail.rows + S <= m) {  // the rows join the tail
    later->add(kv, tail.kv.rows(tail.rows, tail.rows + S));
    later->add(gate, tail.gate.rows(tail.rows, tail.rows + S));
    tail.rows += S;
    *closes = tail.rows == m;  // full: compressor_pool_tails pools it and empties the tail
    return OkStatus();
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

  if (n > 0)
    DI_RETURN_IF_ERROR(pool_windows(be, d, w, rope, raw_kv.rows(0, used), raw_gate.rows(0, used),
                                    tail, state, layer, kind));
  tail.rows = total - used;
  if (tail.rows > 0) {
    Tensor tk = tail.kv.rows(0, tail.rows), tg = tail.gate.rows(0, tail.rows);
    DI_RETURN_IF_ERROR(be.copy(raw_kv.rows(used, total), tk));
    DI_RETURN_IF_ERROR(be.copy(raw_gate.rows(used, total), tg));
  }
  return OkStatus();
}

Status compressor_pool_tails(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                             const RopeTable& rope, std::span<DeepseekV4State* const> states,
                             int layer, CompressorKind kind) {
  const int64_t n = static_cast<int64_t>(states.size()), m = w.m, coff = w.coff, dw = w.d;
  if (n == 0) return OkStatus();
  const int64_t slots = coff * m;
  const bool csa = coff == 2;
  DI_EMPTY(values, be, DType::kF32, {n, slots, dw});
  DI_EMPTY(scores, be, DType::kF32, {n, slots, dw});
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) {
    CompressorTail& tail = states[i]->tail(layer, kind);
    if (tail.rows != m)
      return Internal("compressor_pool_tails: a tail holds " + std::to_string(tail.rows) +
                      " rows, not " + std::to_string(m));
    const bool overlap = csa && tail.has_overlap;
    Tensor v = values.rows(i, i + 1), sc = scores.rows(i, i + 1);
    DI_RETURN_IF_ERROR(be.compressor_slots(tail.kv, tail.gate, w.ape,
                                           overlap ? &tail.overlap_kv : nullptr,
                                           overlap ? &tail.overlap_gate : nullptr, m, v, sc,
                                           csa ? &tail.overlap_kv : nullptr,
                                           csa ? &tail.overlap_gate : nullptr));
    if (csa) tail.has_overlap = true;
    tail.rows = 0;
    pos[i] = static_cast<int32_t>(states[i]->num_entries(layer, kind) * m);
  }
  DI_ASSIGN_OR_RETURN(Tensor entries, pooled_entries(be, d, w, rope, values, scores, pos));
  for (int64_t i = 0; i < n; ++i)
    DI_RETURN_IF_ERROR(states[i]->append_entries(layer, kind, entries.rows(i, i + 1)));
  return OkStatus();
}

}  // namespace deepinfer::model::v4
