#include "backend/cuda/fp8_gemm.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace deepinfer::cuda {
namespace {

// ---- kernels ------------------------------------------------------------------------------------

// Where the activation scale of (token m, k-block b) goes (Fp8GemmPlan::act_scale_index).
struct ActScaleLayout {
  int64_t split_row;  // first row of part 1 (INT64_MAX when one part)
  int64_t rows0, rows1;  // rows_padded of each part
  int64_t offset1;       // scale_offset of part 1
};

__device__ __forceinline__ int64_t act_scale_at(const ActScaleLayout& l, int64_t m, int64_t b) {
  return m < l.split_row ? b * l.rows0 + m : l.offset1 + b * l.rows1 + (m - l.split_row);
}

__device__ __forceinline__ uint32_t e4m3_byte(float v) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// One warp per (token m, 1×128 group b): amax over the group (warp max), the scale, then each lane
// quantizes 4 consecutive elements y = x / s (IEEE division) to e4m3 (round to nearest even,
// saturating at ±448) and stores them as one 32-bit word. Rows m ≥ M (padding) get zeros.
//   x [M, GL·128] f32; q [q_rows, GL·128] e4m3; s: act scales (layout above)
template <bool kVec>
__global__ void act_quant_kernel(const float* __restrict__ x, int64_t M, int64_t q_rows, int64_t GL,
                                 bool pow2, ActScaleLayout layout, uint8_t* __restrict__ q,
                                 float* __restrict__ s) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (warp >= q_rows * GL) return;
  const int64_t m = warp / GL, b = warp % GL;
  const int64_t cols = GL * kFp8Block;
  const int64_t base = m * cols + b * kFp8Block + lane * 4;
  float v[4] = {0.f, 0.f, 0.f, 0.f};
  if (m < M) {
    if constexpr (kVec) {
      const float4 t = *reinterpret_cast<const float4*>(x + base);
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else {
      for (int i = 0; i < 4; ++i) v[i] = x[base + i];
    }
  }
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  uint32_t word = 0;
  float scale = 0.f;
  if (m < M) {
    scale = fp8_act_scale(amax, pow2);
    for (int i = 0; i < 4; ++i) word |= e4m3_byte(__fdiv_rn(v[i], scale)) << (8 * i);
  }
  *reinterpret_cast<uint32_t*>(q + base) = word;
  if (lane == 0) s[act_scale_at(layout, m, b)] = scale;
}

// Weight scales [ceil(GN/128), L] (ue8m0 bytes or f32) → f32 [ceil(GN/128), L4], zero padding.
__global__ void weight_scale_kernel(const void* __restrict__ in, bool in_f32, int64_t blocks,
                                    int64_t L, int64_t L4, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= blocks * L4) return;
  const int64_t p = i / L4, b = i % L4;
  float v = 0.f;
  if (b < L) {
    if (in_f32) {
      v = static_cast<const float*>(in)[p * L + b];
    } else {
      const uint8_t e = static_cast<const uint8_t*>(in)[p * L + b];
      v = e == 0xFF ? __int_as_float(0x7FC00000) : ldexpf(1.0f, static_cast<int>(e) - 127);
    }
  }
  out[i] = v;
}

// ---- cuBLASLt descriptors (RAII) ---------------------------------------------------------------

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
  template <typename T>
  Status set(cublasLtMatmulDescAttributes_t a, const T& v) {
    DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
    return OkStatus();
  }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() { if (d) cublasLtMatrixLayoutDestroy(d); }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() { if (d) cublasLtMatmulPreferenceDestroy(d); }
  template <typename T>
  Status set(cublasLtMatmulPreferenceAttributes_t a, const T& v) {
    DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(d, a, &v, sizeof(v)));
    return OkStatus();
  }
};

// Largest power of two ≤ 256 dividing the address (what the heuristic may assume).
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

Status ensure(DeviceBuffer& buf, uint64_t bytes) {
  if (buf.size() >= bytes) return OkStatus();
  buf = DeviceBuffer();  // free first (cudaFree waits for the work queued on it)
  DI_ASSIGN_OR_RETURN(buf, DeviceBuffer::allocate(std::max<uint64_t>(bytes, 256)));
  return OkStatus();
}

}  // namespace

// ---- Fp8Gemm ------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Fp8Gemm>> Fp8Gemm::create(const Fp8GemmOptions& options,
                                                    cublasLtHandle_t lt) {
  bool owns = false;
  if (lt == nullptr) {
    DI_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&lt));
    owns = true;
  }
  auto g = std::unique_ptr<Fp8Gemm>(new Fp8Gemm(options, lt, owns));
  if (options.workspace_bytes > 0) {
    DI_ASSIGN_OR_RETURN(g->workspace_, DeviceBuffer::allocate(options.workspace_bytes));
  }
  return g;
}

Fp8Gemm::~Fp8Gemm() {
  if (owns_lt_ && lt_) cublasLtDestroy(lt_);
}

Status Fp8Gemm::prepare(const Fp8GemmPlan& plan) {
  DI_RETURN_IF_ERROR(ensure(q_, static_cast<uint64_t>(plan.q_rows * plan.groups * plan.K)));
  DI_RETURN_IF_ERROR(ensure(act_s_, 4 * static_cast<uint64_t>(plan.act_scale_floats)));
  DI_RETURN_IF_ERROR(ensure(w_s_, 4 * static_cast<uint64_t>(plan.w_scale_floats)));
  if (plan.scratch_rows > 0) {
    DI_RETURN_IF_ERROR(ensure(scratch_, 4 * static_cast<uint64_t>(plan.scratch_rows * plan.groups * plan.N)));
  }
  return OkStatus();
}

Status Fp8Gemm::quantize_activations(const float* x, const Fp8GemmPlan& plan, cudaStream_t stream) {
  const int64_t GL = plan.groups * plan.L;
  ActScaleLayout l{INT64_MAX, plan.part[0].rows_padded, 0, 0};
  if (plan.parts == 2) {
    l.split_row = plan.part[1].row0;
    l.rows1 = plan.part[1].rows_padded;
    l.offset1 = plan.part[1].scale_offset;
  }
  const int64_t threads = plan.q_rows * GL * 32;
  const int block = 256;
  const auto grid = static_cast<unsigned>((threads + block - 1) / block);
  auto* q = static_cast<uint8_t*>(q_.data());
  auto* s = static_cast<float*>(act_s_.data());
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    act_quant_kernel<true><<<grid, block, 0, stream>>>(x, plan.M, plan.q_rows, GL,
                                                      options_.pow2_scales, l, q, s);
  } else {
    act_quant_kernel<false><<<grid, block, 0, stream>>>(x, plan.M, plan.q_rows, GL,
                                                       options_.pow2_scales, l, q, s);
  }
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

Status Fp8Gemm::convert_weight_scales(const void* w_scale, bool w_scale_f32, const Fp8GemmPlan& plan,
                                      cudaStream_t stream) {
  const int64_t blocks = (plan.groups * plan.N + kFp8Block - 1) / kFp8Block;
  const int64_t n = blocks * plan.L4;
  weight_scale_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      w_scale, w_scale_f32, blocks, plan.L, plan.L4, static_cast<float*>(w_s_.data()));
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

Status Fp8Gemm::run_part(const uint8_t* w, const Fp8GemmPlan& plan, const Fp8GemmPart& part,
                         int64_t g, float* d, int64_t ldd, cudaStream_t stream) {
  const int64_t N = plan.N, K = plan.K, G = plan.groups, n = part.rows_padded;
  const uint8_t* a = w + g * N * K;                                       // [N, K] e4m3
  const uint8_t* b = quantized_x() + part.q_offset + g * K;               // [n, K] (ld G·K)
  const float* a_scale = w_scales() + plan.w_scale_group_offset(g);      // K-major [n_blocks][L4]
  const float* b_scale = act_scales() + plan.act_scale_group_offset(part, g);  // [L][n]
  float* dg = d + g * N;                                                  // [n, N] (ld ldd)

  MatmulDesc op;
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  DI_RETURN_IF_ERROR(op.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}));
  DI_RETURN_IF_ERROR(op.set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N}));
  DI_RETURN_IF_ERROR(op.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                            int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F}));
  DI_RETURN_IF_ERROR(op.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                            int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F}));
  DI_RETURN_IF_ERROR(op.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(a_scale)));
  DI_RETURN_IF_ERROR(op.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(b_scale)));
  Layout la, lb, ld;
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&la.d, CUDA_R_8F_E4M3, K, N, K));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lb.d, CUDA_R_8F_E4M3, K, n, G * K));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&ld.d, CUDA_R_32F, N, n, ldd));

  const uint32_t al_a = alignment_of(a), al_b = alignment_of(b), al_d = alignment_of(dg);
  const std::array<int64_t, 8> key{n, N, K, G * K, ldd, al_a, al_b, al_d};
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    Preference pref;
    DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref.d));
    DI_RETURN_IF_ERROR(pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{workspace_.size()}));
    DI_RETURN_IF_ERROR(pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a));
    DI_RETURN_IF_ERROR(pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b));
    DI_RETURN_IF_ERROR(pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_d));
    DI_RETURN_IF_ERROR(pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(lt_, op.d, la.d, lb.d, ld.d, ld.d,
                                                             pref.d, 1, &heur, &found));
    if (found == 0) {
      return Unimplemented("fp8 gemm: cuBLASLt has no block-scaled FP8 algorithm for m=" +
                           std::to_string(N) + " n=" + std::to_string(n) + " k=" +
                           std::to_string(K) + " (CUBLAS_STATUS_NOT_SUPPORTED: needs sm_90)");
    }
    it = algos_.emplace(key, heur.algo).first;
  }
  const float alpha = 1.f, beta = 0.f;
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt_, op.d, &alpha, a, la.d, b, lb.d, &beta, dg, ld.d, dg,
                                           ld.d, &it->second, workspace_.data(), workspace_.size(),
                                           stream));
  return OkStatus();
}

Status Fp8Gemm::matmul(const uint8_t* w, const Fp8GemmPlan& plan, float* out, cudaStream_t stream) {
  const int64_t GN = plan.groups * plan.N;
  for (int i = 0; i < plan.parts; ++i) {
    const Fp8GemmPart& part = plan.part[i];
    float* d = part.to_scratch ? static_cast<float*>(scratch_.data()) : out + part.row0 * GN;
    for (int64_t g = 0; g < plan.groups; ++g) {
      DI_RETURN_IF_ERROR(run_part(w, plan, part, g, d, GN, stream));
    }
    if (part.to_scratch) {
      DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out + part.row0 * GN, d, 4 * part.rows * GN,
                                              cudaMemcpyDeviceToDevice, stream));
    }
  }
  return OkStatus();
}

Status Fp8Gemm::gemm(const float* x, int64_t M, const uint8_t* w, const void* w_scale,
                     bool w_scale_f32, int64_t N, int64_t K, int64_t groups, float* out,
                     cudaStream_t stream) {
  DI_ASSIGN_OR_RETURN(Fp8GemmPlan plan, plan_fp8_gemm(M, N, K, groups));
  DI_RETURN_IF_ERROR(prepare(plan));
  DI_RETURN_IF_ERROR(quantize_activations(x, plan, stream));
  DI_RETURN_IF_ERROR(convert_weight_scales(w_scale, w_scale_f32, plan, stream));
  return matmul(w, plan, out, stream);
}

}  // namespace deepinfer::cuda
