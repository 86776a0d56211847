// The GEMV's host side for plain (grouped) linears and the checks shared with the expert launch
// (gemv_experts.cu); the kernel is gemv.cuh.
#include "backend/cuda/gemv.h"

#include <atomic>

#include "backend/cuda/gemv.cuh"

namespace deepinfer::cuda::kernels {

namespace {

std::atomic<int64_t> g_pdl_prefetch{kGemvPdlPrefetchDefault};

int elems_per_chunk(int fmt) { return fmt == 0 ? 8 : fmt == 1 ? 16 : fmt == 2 ? 32 : 4; }
int64_t row_bytes_of(int fmt, int64_t K) { return fmt == 0 ? 2 * K : fmt == 1 ? K : fmt == 2 ? K / 2 : 4 * K; }

int log2_exact(int64_t v) {
  int l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}

}  // namespace

bool gemv_supported(int fmt, int64_t K, bool scaled, int64_t block_cols) {
  if (fmt < 0 || fmt > 3 || K <= 0 || (fmt == 2 && K % 2 != 0)) return false;
  if (scaled) {
    if (fmt != 1 && fmt != 2) return false;
    const int64_t E = elems_per_chunk(fmt);
    if (block_cols < E || block_cols % E != 0) return false;
    const int64_t cpb = block_cols / E;
    if ((cpb & (cpb - 1)) != 0) return false;
  }
  return gemv::x_stride_floats(K) * 4 <= gemv::kSmemBudget;
}

void gemv_set_pdl_prefetch_bytes(int64_t bytes) {
  g_pdl_prefetch.store(bytes < 0 ? 0 : bytes, std::memory_order_relaxed);
}
int64_t gemv_pdl_prefetch_bytes() { return g_pdl_prefetch.load(std::memory_order_relaxed); }

int gemv_tile_rows(int64_t M, int64_t K) {
  const int64_t cap = gemv::kSmemBudget / (gemv::x_stride_floats(K) * 4);
  int mt = 1;
  while (mt < 8 && mt < M && 2 * mt <= cap) mt *= 2;
  return mt;
}

void gemv_linear(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                 int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                 int64_t block_cols, float* out, cudaStream_t s, bool pdl) {
  if (M == 0 || N == 0 || G == 0) return;
  gemv::Args a;
  a.x = x;
  a.lda = G * K;
  a.w = static_cast<const uint8_t*>(w);
  a.scale = scale;
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && K % 4 == 0;
  a.M = M;
  a.N = N;
  a.K = K;
  a.br = scale ? block_rows : 1;
  a.scale_cols = scale ? (K + block_cols - 1) / block_cols : 0;
  a.cpb_log2 = scale ? log2_exact(block_cols / elems_per_chunk(fmt)) : 0;
  a.x_stride = gemv::x_stride_floats(K);
  a.out = out;
  a.ldo = G * N;
  const bool vec = row_bytes_of(fmt, K) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const int mt = gemv_tile_rows(M, K);
  const int64_t pf = pdl ? gemv_pdl_prefetch_bytes() : 0;
  if (fmt == 0) gemv::launch_mt<0, false>(a, mt, G, vec, s, pdl, pf);
  else if (fmt == 1) gemv::launch_mt<1, false>(a, mt, G, vec, s, pdl, pf);
  else if (fmt == 2) gemv::launch_mt<2, false>(a, mt, G, vec, s, pdl, pf);
  else gemv::launch_mt<3, false>(a, mt, G, vec, s, pdl, pf);
}

}  // namespace deepinfer::cuda::kernels
