// Host-memory defaults of the Backend memory interface (the CPU backend uses them as they are).
#include <cstring>

#include "backend/backend.h"

namespace deepinfer::backend {

namespace {
Status check_transfer(const char* what, const Tensor& from, const Tensor& to) {
  if (from.dtype() != to.dtype() || from.numel() != to.numel())
    return InvalidArgument(std::string(what) + ": " + from.describe() + " and " + to.describe() +
                           " differ in dtype or element count");
  if (from.numel() > 0 && (from.raw() == nullptr || to.raw() == nullptr))
    return InvalidArgument(std::string(what) + ": a tensor has no data");
  return OkStatus();
}
}  // namespace

StatusOr<Tensor> Backend::alloc(DType dtype, Shape shape) {
  for (int64_t d : shape)
    if (d < 0) return InvalidArgument("alloc: negative dimension in " + shape_str(shape));
  return Tensor::empty(dtype, std::move(shape));
}

Status Backend::upload(const Tensor& host, Tensor& dst) {
  DI_RETURN_IF_ERROR(check_transfer("upload", host, dst));
  if (host.on_device() || dst.on_device())
    return InvalidArgument(std::string("upload: backend ") + name() + " has host memory only");
  if (host.nbytes()) std::memmove(dst.raw(), host.raw(), host.nbytes());
  return OkStatus();
}

Status Backend::download(const Tensor& src, Tensor& host) {
  DI_RETURN_IF_ERROR(check_transfer("download", src, host));
  if (host.on_device() || src.on_device())
    return InvalidArgument(std::string("download: backend ") + name() + " has host memory only");
  if (src.nbytes()) std::memmove(host.raw(), src.raw(), src.nbytes());
  return OkStatus();
}

}  // namespace deepinfer::backend
