// The tensor-core decode attention kernel (attention_tc.cu) for DeepSeek-V4's layout: one shared
// K = V head of width 512 read by every query head (64 per block), key lists of window rows +
// selected compressed entries. Host-side declarations only (C++17; included by the backend, the
// tests and bench_ops).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

// Which kernel CudaBackend::attention uses for the layouts the tensor-core kernel supports:
// DEEPINFER_CUDA_ATTENTION=tc|simt (src/common/env.h; default simt, the session-4 kernel, until
// the tensor-core one is measured on the H200). Tests and bench_ops override it in-process:
// set_attention_tc_override(1) forces tc, 0 forces simt, −1 returns to the environment's choice.
bool attention_tc_enabled();
void set_attention_tc_override(int mode);
// The override set_attention_tc_override left: 1 (tc), 0 (simt) or −1 (none; the environment's
// choice). attention_fd.cu's attention_kernel_requested reads it.
int attention_tc_override_value();

// True when attention_tc handles the call: nH a multiple of 64, one KV head, K and V the same
// tensor, D = Dv = 512.
bool attention_tc_supports(int64_t nH, int64_t nKV, int64_t D, int64_t Dv, bool kv_same);

// The split scratch: tokens handled per launch (the launcher walks the batch in slices of that
// many tokens; 0 = no scratch needed) and the floats of scratch for one slice. Both depend on
// (S, nH, max_keys) only; a token's arithmetic never depends on them.
int64_t attention_tc_slice_tokens(int64_t S, int64_t nH, int64_t max_keys);
int64_t attention_tc_parts_floats(int64_t slice_tokens, int64_t nH, int64_t max_keys);

// out[S, nH, 512] = attention of q[S, nH, 512] over rows kv[T, 1, 512] listed per query by
// key_offsets[S+1] / key_ids[nnz], optional sinks[nH]; `parts`: attention_tc_parts_floats(
// slice_tokens, ...) floats when slice_tokens > 0, else null. max_keys bounds every key list
// (a smaller value still gives correct results, but then the split may differ from the canonical
// one and the bits with it).
void attention_tc(const float* q, const float* kv, const int32_t* key_offsets,
                  const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                  int64_t T, float scale, float* out, float* parts, int64_t slice_tokens,
                  int64_t max_keys, int32_t* error_flag, cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
