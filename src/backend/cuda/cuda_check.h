// Error handling for CUDA runtime and cuBLAS calls. At module boundaries a failed call becomes a
// Status naming the call, file:line and the CUDA error; DI_CUDA_CHECK aborts (programming errors,
// e.g. a failed launch of a kernel whose arguments were already validated).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "common/check.h"
#include "common/status.h"

namespace deepinfer::cuda {

Status cuda_status(cudaError_t err, const char* call, const char* file, int line);
Status cublas_status(cublasStatus_t st, const char* call, const char* file, int line);
const char* cublas_status_name(cublasStatus_t st);

}  // namespace deepinfer::cuda

#define DI_CUDA_RETURN_IF_ERROR(call) \
  DI_RETURN_IF_ERROR(::deepinfer::cuda::cuda_status((call), #call, __FILE__, __LINE__))
#define DI_CUBLAS_RETURN_IF_ERROR(call) \
  DI_RETURN_IF_ERROR(::deepinfer::cuda::cublas_status((call), #call, __FILE__, __LINE__))
#define DI_CUDA_CHECK(call)                                                        \
  do {                                                                             \
    cudaError_t di_err_ = (call);                                                  \
    DI_CHECK(di_err_ == cudaSuccess) << #call << ": " << cudaGetErrorString(di_err_); \
  } while (0)
