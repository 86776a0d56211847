#include "backend/make_backend.h"

#include <cstdlib>

#ifdef DEEPINFER_WITH_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#endif

namespace deepinfer::backend {

StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device,
                                                const BackendOptions& options) {
  if (device == "cpu" || device == "cpu-reference") {
    if (options.fp8_activations)
      return InvalidArgument("fp8 activations (--fp8-activations) need the CUDA backend; device is '" +
                             device + "'");
    CpuBackendOptions o;
    o.reference = device == "cpu-reference";
    return make_cpu_backend(o);
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device.size() > 5) {
      char* end = nullptr;
      const long v = std::strtol(device.c_str() + 5, &end, 10);
      if (*end != '\0' || v < 0 || v > 1024)
        return InvalidArgument("device '" + device + "': expected cuda or cuda:N");
      index = static_cast<int>(v);
    }
#ifdef DEEPINFER_WITH_CUDA_BACKEND
    cuda::CudaBackendOptions o;
    o.device = index;
    o.batch_invariant = options.batch_invariant;
    o.fp8_activations = options.fp8_activations;
    o.graphs = options.graphs;
    o.side_stream = options.side_stream;
    DI_ASSIGN_OR_RETURN(auto be, cuda::CudaBackend::create(o));
    return std::unique_ptr<Backend>(std::move(be));
#else
    (void)index;
    (void)options;
    return Unimplemented("device '" + device +
                         "': this build has no CUDA backend (configure with the CUDA toolkit "
                         "present, -DDEEPINFER_CUDA=ON)");
#endif
  }
  return InvalidArgument("unknown device '" + device + "' (expected cpu, cpu-reference, cuda or cuda:N)");
}

}  // namespace deepinfer::backend
