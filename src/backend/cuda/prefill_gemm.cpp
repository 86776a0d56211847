// Host side of the prefill products on cuBLAS (prefill_gemm.h): plans, workspace layout and the
// cuBLAS calls.
#include "backend/cuda/prefill_gemm.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/prefill_gemm_kernels.h"
#include "common/env.h"

namespace deepinfer::cuda::prefill {

namespace {

constexpr uint64_t kAlign = 256;
constexpr uint64_t kHeader = kAlign;  // the inexact flag (int32)
constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

uint64_t align_up(uint64_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
bool aligned(const void* p, uint64_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }
char* at(void* ws, uint64_t off) { return static_cast<char*>(ws) + off; }

// A 16-bit-element (bf16) workspace matrix view.
uint16_t* u16(void* p) { return static_cast<uint16_t*>(p); }

bool weight_aligned(int fmt, const void* w) {
  return aligned(w, fmt == 0 ? 16 : fmt == 1 ? 8 : 4);
}

// Set to false after the grouped call is refused once (e.g. a cuBLAS without bf16 support for it).
std::atomic<bool> g_grouped_ok{true};

}  // namespace

uint64_t workspace_request(uint64_t bytes) {
  uint64_t b = uint64_t{64} << 20;
  while (b < bytes) b <<= 1;
  return b;
}

int mode() { return env().prefill_gemm; }
int64_t chunk_experts() { return std::max(1, env().prefill_gemm_chunk); }

// ---------------------------------------------------------------------------------------------
// Dense
// ---------------------------------------------------------------------------------------------

DensePlan plan_dense(const DenseProblem& p) {
  DensePlan plan;
  if (p.fmt < 0 || p.fmt > 2 || p.M <= 0 || p.N <= 0 || p.K <= 0 || p.G < 1) return plan;
  if (p.K % 8 != 0 || !aligned(p.x, 16) || !weight_aligned(p.fmt, p.w)) return plan;
  if (p.fmt != 0 && (p.scale == nullptr || p.br < 1 || p.bc < 8 || p.bc % 8 != 0)) return plan;
  const int64_t Kp = 3 * p.K;
  if (p.M > kIntMax || p.G * p.N > kIntMax || p.G * Kp > kIntMax) return plan;
  const uint64_t budget = kWorkspaceBytes - kHeader;
  const uint64_t x_row = static_cast<uint64_t>(p.G * Kp) * 2;  // one row of x terms
  const uint64_t w_row = static_cast<uint64_t>(Kp) * 2;                      // one tripled weight row
  const uint64_t w_all = align_up(static_cast<uint64_t>(p.G * p.N) * w_row);
  if (w_all < budget) {
    const int64_t slab = std::min<int64_t>(p.M, static_cast<int64_t>((budget - w_all) / x_row));
    if (slab >= std::min(p.M, kDenseMinRows)) {
      plan.whole = true;
      plan.slab_rows = slab;
      plan.chunk_rows = p.N;
      plan.bytes = kHeader + w_all + align_up(static_cast<uint64_t>(slab) * x_row);
      plan.ok = true;
      return plan;
    }
  }
  // Half the budget for x terms, the rest for weight chunks (rows of one group at a time).
  const int64_t slab = std::min<int64_t>(p.M, static_cast<int64_t>(budget / 2 / x_row));
  if (slab < 1) return plan;
  const uint64_t x_bytes = align_up(static_cast<uint64_t>(slab) * x_row);
  const int64_t chunk = std::min<int64_t>(p.N, static_cast<int64_t>((budget - x_bytes) / w_row));
  if (chunk < 1) return plan;
  plan.slab_rows = slab;
  plan.chunk_rows = chunk;
  plan.bytes = kHeader + align_up(static_cast<uint64_t>(chunk) * w_row) + x_bytes;
  plan.ok = true;
  return plan;
}

Status dense_linear(cublasHandle_t blas, const DenseProblem& p, const DensePlan& plan, void* ws,
                    int num_sms, cudaStream_t stream) {
  if (!plan.ok) return InvalidArgument("prefill dense_linear: no plan for this product");
  const int64_t K = p.K, Kp = 3 * K, N = p.N, G = p.G;
  auto* flag = reinterpret_cast<int32_t*>(ws);
  const uint64_t w_bytes = plan.whole ? align_up(static_cast<uint64_t>(G * N * Kp) * 2)
                                      : align_up(static_cast<uint64_t>(plan.chunk_rows * Kp) * 2);
  uint16_t* wt = u16(at(ws, kHeader));             // [rows][3K] bf16
  uint16_t* xs = u16(at(ws, kHeader + w_bytes));   // [slab][G][3K] bf16
  if (p.fmt != 0) DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream));
  DequantArgs d;
  d.fmt = p.fmt;
  d.w = p.w;
  d.scale = p.scale;
  d.scale_f32 = p.scale_f32;
  d.K = K;
  d.br = p.fmt == 0 ? 1 : p.br;
  d.bc = p.fmt == 0 ? 8 : p.bc;
  d.copies = 3;
  d.out = wt;
  d.inexact = flag;
  if (plan.whole) {
    d.row0 = 0;
    d.rows = G * N;
    dequant_bf16(d, stream);
    DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  const float alpha = 1.f, beta = 0.f;
  for (int64_t r0 = 0; r0 < p.M; r0 += plan.slab_rows) {
    const int64_t rows = std::min(plan.slab_rows, p.M - r0);
    // x rows [r0, r0 + rows) viewed as rows·G rows of K: row (m, g) -> terms at xs + (m·G + g)·3K.
    split_rows(p.x + r0 * G * K, K, nullptr, 0, 1, rows * G, xs, stream);
    DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    float* out = p.out + r0 * G * N;
    // Column-major: out_g^T [N, rows] (ld G·N) = W'_g [N, 3K] (op T, ld 3K) · xs_g^T [3K, rows]
    // (ld G·3K): every (n, m) an fp32 sum over the 3K stacked products.
    if (plan.whole) {
      DI_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
          blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(rows),
          static_cast<int>(Kp), &alpha, wt, CUDA_R_16BF, static_cast<int>(Kp),
          static_cast<long long>(N * Kp), xs, CUDA_R_16BF, static_cast<int>(G * Kp),
          static_cast<long long>(Kp), &beta, out, CUDA_R_32F, static_cast<int>(G * N),
          static_cast<long long>(N), static_cast<int>(G), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      continue;
    }
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t n0 = 0; n0 < N; n0 += plan.chunk_rows) {
        const int64_t nc = std::min(plan.chunk_rows, N - n0);
        d.row0 = g * N + n0;
        d.rows = nc;
        dequant_bf16(d, stream);
        DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
        DI_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
            blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nc), static_cast<int>(rows),
            static_cast<int>(Kp), &alpha, wt, CUDA_R_16BF, static_cast<int>(Kp), xs + g * Kp,
            CUDA_R_16BF, static_cast<int>(G * Kp), &beta, out + g * N + n0, CUDA_R_32F,
            static_cast<int>(G * N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
    }
  }
  if (p.fmt != 0) {
    FallbackArgs f;
    f.inexact = flag;
    f.fmt = p.fmt;
    f.x = p.x;
    f.G = G;
    f.w = p.w;
    f.scale = p.scale;
    f.scale_f32 = p.scale_f32;
    f.R = p.M * G;
    f.N = N;
    f.K = K;
    f.br = p.br;
    f.bc = p.bc;
    f.out = p.out;
    exact_fallback(f, num_sms, stream);
    DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Routed experts
// ---------------------------------------------------------------------------------------------

namespace {
// Workspace of the expert path: [flag][piece experts: int32 P][pointers: A, B, C × P][chunk
// region]; a chunk's region holds its dequantized weights, then its term rows, then its
// partial products, so the region is as large as the largest chunk.
struct ExpertsLayout {
  uint64_t ids = 0, ptrs = 0, region = 0;
};
ExpertsLayout layout_of(int64_t total_pieces) {
  ExpertsLayout l;
  l.ids = kHeader;
  l.ptrs = l.ids + align_up(static_cast<uint64_t>(total_pieces) * sizeof(int32_t));
  l.region = l.ptrs + align_up(static_cast<uint64_t>(total_pieces) * 3 * sizeof(void*));
  return l;
}
struct ChunkRegion {
  uint64_t xs = 0, y = 0, end = 0;  // offsets from the region start (weights at 0)
};
ChunkRegion region_of(int64_t pieces, int64_t rows, int64_t N, int64_t K) {
  ChunkRegion c;
  c.xs = align_up(static_cast<uint64_t>(pieces * N * K) * 2);
  c.y = c.xs + align_up(static_cast<uint64_t>(rows * 3 * K) * 2);
  c.end = c.y + align_up(static_cast<uint64_t>(rows * 3 * N) * 4);
  return c;
}
}  // namespace

bool experts_supported(int fmt, const float* x, bool scaled, int64_t N, int64_t K, int64_t bc) {
  return (fmt == 1 || fmt == 2) && scaled && N > 0 && K > 0 && K % 8 == 0 && bc >= 8 &&
         bc % 8 == 0 && aligned(x, 16) && N <= kIntMax && K <= kIntMax;
}

ExpertsPlan plan_experts(const ExpertsProblem& p, int64_t max_chunk_experts) {
  ExpertsPlan plan;
  if (p.row_off == nullptr || p.E < 1) return plan;
  const uint64_t w_one = static_cast<uint64_t>(p.N * p.K) * 2;
  const uint64_t per_row = static_cast<uint64_t>(3 * p.K) * 2 + static_cast<uint64_t>(3 * p.N) * 4;
  // Budget for weights + terms + partials; the header (ids, pointer tables: ≤ a few MB) and
  // per-region alignment come out of a reserve.
  const uint64_t reserve = uint64_t{16} << 20;
  const uint64_t budget = kWorkspaceBytes - reserve;
  if (w_one + per_row > budget) return plan;
  const int64_t rows_cap_max = std::min<int64_t>(kIntMax / 3, static_cast<int64_t>((budget - w_one) / per_row));
  ExpertChunk cur;
  int64_t cur_rows = 0;
  auto close = [&]() {
    if (cur.count == 0) return;
    plan.chunks.push_back(cur);
    plan.max_pieces = std::max(plan.max_pieces, cur.count);
    plan.max_rows = std::max(plan.max_rows, cur_rows);
    cur = ExpertChunk{};
    cur.first = static_cast<int64_t>(plan.pieces.size());
    cur_rows = 0;
  };
  for (int64_t e = 0; e < p.E; ++e) {
    int64_t begin = p.row_off[e];
    const int64_t end = p.row_off[e + 1];
    if (begin < 0 || end < begin || end > p.slots) return ExpertsPlan{};  // not moe_group's output
    while (begin < end) {
      const uint64_t used = static_cast<uint64_t>(cur.count + 1) * w_one +
                            static_cast<uint64_t>(cur_rows) * per_row;
      const int64_t fit = used >= budget ? 0 : std::min<int64_t>(
          rows_cap_max - cur_rows, static_cast<int64_t>((budget - used) / per_row));
      const int64_t m = end - begin;
      if (cur.count > 0 && (fit < m || cur.count >= max_chunk_experts)) {
        close();
        continue;
      }
      const int64_t take = std::min(m, std::max<int64_t>(fit, 1));
      if (cur.count == 0) cur.p0 = begin;
      plan.pieces.push_back({static_cast<int32_t>(e), begin, begin + take});
      ++cur.count;
      cur_rows += take;
      cur.p1 = begin + take;
      begin += take;
    }
  }
  close();
  uint64_t region = 0;
  for (const ExpertChunk& c : plan.chunks)
    region = std::max(region, region_of(c.count, c.p1 - c.p0, p.N, p.K).end);
  plan.bytes = layout_of(static_cast<int64_t>(plan.pieces.size())).region + region;
  plan.ok = plan.bytes <= kWorkspaceBytes;
  return plan;
}

Status experts_linear(cublasHandle_t blas, const ExpertsProblem& p, const ExpertsPlan& plan,
                      void* ws, int num_sms, bool grouped, cudaStream_t stream) {
  if (!plan.ok) return InvalidArgument("prefill experts_linear: no plan for this projection");
  const int64_t P = static_cast<int64_t>(plan.pieces.size());
  if (P == 0) return OkStatus();  // no valid slot
  const ExpertsLayout l = layout_of(P);
  auto* flag = reinterpret_cast<int32_t*>(ws);
  auto* d_ids = reinterpret_cast<int32_t*>(at(ws, l.ids));
  auto* d_ptrs = reinterpret_cast<void**>(at(ws, l.ptrs));  // [3][P]: A (weights), B (terms), C (partials)
  uint16_t* wt = u16(at(ws, l.region));                    // [pieces][N][K] bf16
  const int64_t N = p.N, K = p.K;
  auto xs_of = [&](const ExpertChunk& c) {  // [rows][3][K] bf16
    return u16(at(ws, l.region + region_of(c.count, c.p1 - c.p0, N, K).xs));
  };
  auto y_of = [&](const ExpertChunk& c) {  // [rows][3][N] fp32
    return reinterpret_cast<float*>(at(ws, l.region + region_of(c.count, c.p1 - c.p0, N, K).y));
  };

  // Every piece's expert and GEMM pointers, uploaded once (the pageable source is staged before
  // cudaMemcpyAsync returns).
  std::vector<int32_t> ids(P);
  std::vector<void*> ptrs(3 * P);
  for (const ExpertChunk& c : plan.chunks) {
    for (int64_t i = 0; i < c.count; ++i) {
      const ExpertPiece& pc = plan.pieces[c.first + i];
      ids[c.first + i] = pc.e;
      ptrs[c.first + i] = wt + i * N * K;
      ptrs[P + c.first + i] = xs_of(c) + 3 * (pc.p_begin - c.p0) * K;
      ptrs[2 * P + c.first + i] = y_of(c) + 3 * (pc.p_begin - c.p0) * N;
    }
  }
  DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream));
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_ids, ids.data(), P * sizeof(int32_t),
                                          cudaMemcpyHostToDevice, stream));
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_ptrs, ptrs.data(), 3 * P * sizeof(void*),
                                          cudaMemcpyHostToDevice, stream));
  DequantArgs d;
  d.fmt = p.fmt;
  d.w_table = p.w_table;
  d.s_table = p.s_table;
  d.scale_f32 = p.scale_f32;
  d.rows = N;
  d.K = K;
  d.br = p.br;
  d.bc = p.bc;
  d.copies = 1;
  d.out = wt;
  d.inexact = flag;
  const float alpha = 1.f, beta = 0.f;
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> ms, ns, ks, lds_a, lds_b, lds_c, sizes;
  std::vector<float> alphas, betas;
  for (const ExpertChunk& c : plan.chunks) {
    d.experts = d_ids + c.first;
    d.count = c.count;
    dequant_bf16(d, stream);
    DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    // Terms of the chunk's rows in sorted order: position q -> xs rows 3q, 3q+1, 3q+2.
    split_rows(p.x, K, p.perm, c.p0, p.x_div, c.p1 - c.p0, xs_of(c), stream);
    DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    // Per piece i (column-major): Y_i^T [N, 3·m_i] (ld N) = W_i [N, K] (op T, ld K) · Xs_i^T
    // [K, 3·m_i] (ld K): each of the three term rows of a slot against the expert's weight.
    const int gc = static_cast<int>(c.count);
    bool done = false;
    if (grouped && g_grouped_ok.load(std::memory_order_relaxed)) {
      ta.assign(gc, CUBLAS_OP_T);
      tb.assign(gc, CUBLAS_OP_N);
      ms.assign(gc, static_cast<int>(N));
      ks.assign(gc, static_cast<int>(K));
      lds_a.assign(gc, static_cast<int>(K));
      lds_b.assign(gc, static_cast<int>(K));
      lds_c.assign(gc, static_cast<int>(N));
      sizes.assign(gc, 1);
      alphas.assign(gc, 1.f);
      betas.assign(gc, 0.f);
      ns.resize(gc);
      for (int i = 0; i < gc; ++i) {
        const ExpertPiece& pc = plan.pieces[c.first + i];
        ns[i] = static_cast<int>(3 * (pc.p_end - pc.p_begin));
      }
      const cublasStatus_t st = cublasGemmGroupedBatchedEx(
          blas, ta.data(), tb.data(), ms.data(), ns.data(), ks.data(), alphas.data(),
          const_cast<const void* const*>(d_ptrs + c.first), CUDA_R_16BF, lds_a.data(),
          const_cast<const void* const*>(d_ptrs + P + c.first), CUDA_R_16BF, lds_b.data(),
          betas.data(), d_ptrs + 2 * P + c.first, CUDA_R_32F, lds_c.data(), gc, sizes.data(),
          CUBLAS_COMPUTE_32F);
      if (st == CUBLAS_STATUS_SUCCESS) {
        done = true;
      } else if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
        g_grouped_ok.store(false, std::memory_order_relaxed);  // per-expert calls from now on
      } else {
        DI_CUBLAS_RETURN_IF_ERROR(st);
      }
    }
    if (!done) {
      for (int i = 0; i < gc; ++i) {
        const ExpertPiece& pc = plan.pieces[c.first + i];
        const int64_t m3 = 3 * (pc.p_end - pc.p_begin);
        DI_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
            blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(m3),
            static_cast<int>(K), &alpha, ptrs[c.first + i], CUDA_R_16BF, static_cast<int>(K),
            ptrs[P + c.first + i], CUDA_R_16BF, static_cast<int>(K), &beta,
            ptrs[2 * P + c.first + i], CUDA_R_32F, static_cast<int>(N), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT));
      }
    }
    sum_terms(y_of(c), p.perm, c.p0, c.p1 - c.p0, N, p.out, stream);
    DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  FallbackArgs f;
  f.inexact = flag;
  f.fmt = p.fmt;
  f.x = p.x;
  f.x_div = p.x_div;
  f.ids = p.ids;
  f.E = p.E;
  f.w_table = p.w_table;
  f.s_table = p.s_table;
  f.scale_f32 = p.scale_f32;
  f.R = p.slots;
  f.N = N;
  f.K = K;
  f.br = p.br;
  f.bc = p.bc;
  f.out = p.out;
  exact_fallback(f, num_sms, stream);
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

}  // namespace deepinfer::cuda::prefill
