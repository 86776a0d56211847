#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/cuda/attention_fd.h"
#include "backend/cuda/dequant.h"
#include "backend/cuda/experts_mma.h"
#include "backend/cuda/experts_wg.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/head_blas.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_tc_small.h"
#include "backend/cuda/linear_tc_wa.h"
#include "backend/cuda/linear_tc_wg.h"
#include "backend/cuda/moe_tc.h"
#include "backend/cuda/prefill_gemm.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/skinny_mma.h"
#include "backend/cuda/skinny_wg.h"
#include "backend/op_checks.h"
#include "backend/sample_checks.h"
#include "common/env.h"

namespace deepinfer::cuda {

using namespace backend;  // op argument checks (backend/op_checks.h)
using backend::OpKind;
using backend::Tensor;

// Caching allocator behind CudaBackend::alloc. Blocks are bucketed by rounded size; a freed
// block goes back to its bucket and is handed out again in stream order (one stream, so later
// work using it is ordered after earlier work). Shared with every tensor's deleter so that it
// outlives the backend when tensors do; the destructor frees what is cached.
class TensorCache {
 public:
  ~TensorCache() {
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) cudaFree(p);
  }
  static uint64_t bucket(uint64_t bytes) {
    if (bytes <= 512) return 512;
    if (bytes <= (uint64_t{1} << 20)) {  // next power of two up to 1 MiB
      uint64_t b = 512;
      while (b < bytes) b <<= 1;
      return b;
    }
    const uint64_t step = uint64_t{2} << 20;  // 2 MiB steps beyond
    return (bytes + step - 1) / step * step;
  }
  StatusOr<void*> get(uint64_t b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(b);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, b);
    if (err != cudaSuccess) {  // give the cached blocks back and try once more
      cudaGetLastError();
      release_cached();
      err = cudaMalloc(&p, b);
      if (err != cudaSuccess) {
        cudaGetLastError();
        return ResourceExhausted("cuda alloc: out of device memory allocating " +
                                 std::to_string(b) + " bytes (" + cudaGetErrorString(err) + ")");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    held_ += b;
    return p;
  }
  void put(uint64_t b, void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (hold_)
      held_blocks_.emplace_back(b, p);
    else
      free_[b].push_back(p);
  }
  // Side queue (begin_side .. join_side): freed blocks are kept out of the free lists, so that
  // neither stream gets a block the other may still use; released when the streams join.
  void hold(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = on;
    if (on) return;
    for (auto& [b, p] : held_blocks_) free_[b].push_back(p);
    held_blocks_.clear();
  }
  uint64_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }

 private:
  void release_cached() {
    cudaDeviceSynchronize();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [bytes, blocks] : free_) {
      for (void* p : blocks) cudaFree(p);
      held_ -= bytes * blocks.size();
      blocks.clear();
    }
  }
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<void*>> free_;
  uint64_t held_ = 0;
  bool hold_ = false;
  std::vector<std::pair<uint64_t, void*>> held_blocks_;
};

struct CudaBackend::State {
  std::shared_ptr<TensorCache> cache = std::make_shared<TensorCache>();
  Stream stream;
  CublasHandle blas;
  DeviceBuffer error_flag;  // int32 on the device
  DeviceBuffer workspace;   // grows on demand (top-k sort)
  const char* last_op = "";
  bool batch_invariant = false;
  bool decode_fusion = true;  // env().decode_fusion: the fused decode ops (session 12)
  bool fp8_activations = false;
  std::unique_ptr<Fp8Gemm> fp8 = nullptr;  // when fp8_activations: FP8 block-scaled GEMM (shares blas.lt())
  int device = 0;
  int num_sms = 132;  // sizes work splits
  // CUDA graphs: allowed by the options; while capturing, tensors come from capture_cache (owned
  // by the graph being recorded) and the first call that needed the host is named here.
  bool graphs = true;
  bool capturing = false;
  std::shared_ptr<TensorCache> capture_cache = nullptr;
  std::string capture_refused = std::string();
  // Small downloads (download, download_async): pinned slots with an event each, one per ticket
  // in flight, kept for reuse when the ticket goes (the engine has one or two in flight); the
  // data and the error flag land in a slot by two asynchronous copies (a pageable copy blocks
  // until it lands: a second round trip).
  struct DownloadSlot {
    PinnedBuffer buf;
    Event landed;
  };
  std::mutex slots_mu = std::mutex();
  std::vector<std::unique_ptr<DownloadSlot>> free_slots = {};
  // Side queue (session 14, begin_side): made on first use; `on_side` routes stream() there.
  bool side_enabled = true;
  std::optional<Stream> side = std::nullopt;
  std::optional<Event> fork_ev = std::nullopt, join_ev = std::nullopt;
  bool on_side = false, side_open = false;
  std::vector<std::shared_ptr<TensorCache>> holding = {};  // caches holding frees until join
};

// download_async's ticket: the slot holds the data at [0, n) and the error flag at flag_at.
class CudaBackend::AsyncDownload final : public backend::Backend::PendingDownload {
 public:
  AsyncDownload(CudaBackend* be, std::unique_ptr<State::DownloadSlot> slot, void* host, uint64_t n,
                uint64_t flag_at)
      : be_(be), slot_(std::move(slot)), host_(host), n_(n), flag_at_(flag_at) {}
  ~AsyncDownload() override {
    if (waited_ || slot_->landed.synchronize().ok()) {  // the copies still target the slot
      std::lock_guard<std::mutex> lock(be_->st_->slots_mu);
      be_->st_->free_slots.push_back(std::move(slot_));
    }
  }
  Status wait() override {
    if (waited_) return FailedPrecondition("download_async: wait() called twice");
    waited_ = true;
    DI_RETURN_IF_ERROR(slot_->landed.synchronize());
    const auto* base = static_cast<const uint8_t*>(slot_->buf.data());
    std::memcpy(host_, base, n_);
    int32_t code = 0;
    std::memcpy(&code, base + flag_at_, 4);
    if (code != kernels::kErrNone) return be_->clear_error_flag(code);
    return OkStatus();
  }

 private:
  CudaBackend* be_;
  std::unique_ptr<State::DownloadSlot> slot_;
  void* host_;
  uint64_t n_, flag_at_;
  bool waited_ = false;
};

// A captured decode segment: the executable graph and the cache its tensors came from (kept
// while the graph lives, so replays write to the same memory and nothing else reuses it).
class CudaGraph final : public backend::Backend::Graph {
 public:
  CudaGraph(cudaGraph_t g, cudaGraphExec_t exec, std::shared_ptr<TensorCache> cache)
      : g_(g), exec_(exec), cache_(std::move(cache)) {}
  ~CudaGraph() override {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (g_ != nullptr) cudaGraphDestroy(g_);
  }
  cudaGraphExec_t exec() const { return exec_; }
  const std::shared_ptr<TensorCache>& cache() const { return cache_; }

 private:
  cudaGraph_t g_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::shared_ptr<TensorCache> cache_;
};

CudaBackend::CudaBackend(std::unique_ptr<State> state) : st_(std::move(state)) {}
CudaBackend::~CudaBackend() = default;

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaBackendOptions& options) {
  DI_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  DI_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  DI_ASSIGN_OR_RETURN(CublasHandle blas, CublasHandle::create(stream.get()));
  DI_ASSIGN_OR_RETURN(DeviceBuffer flag, DeviceBuffer::allocate(sizeof(int32_t)));
  DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag.data(), 0, sizeof(int32_t), stream.get()));
  auto st = std::unique_ptr<State>(new State{std::make_shared<TensorCache>(), std::move(stream),
                                             std::move(blas), std::move(flag), DeviceBuffer(),
                                             ""});
  st->batch_invariant = options.batch_invariant;
  st->decode_fusion = env().decode_fusion;
  st->device = options.device;
  st->fp8_activations = options.fp8_activations;
  st->graphs = options.graphs && env().cuda_graphs;
  st->side_enabled = options.side_stream && env().side_stream;
  if (options.fp8_activations) {
    DI_ASSIGN_OR_RETURN(st->fp8, Fp8Gemm::create({}, st->blas.lt()));
  }
  DI_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&st->num_sms, cudaDevAttrMultiProcessorCount, options.device));
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(st)));
}

cudaStream_t CudaBackend::stream() const {
  return st_->on_side ? st_->side->get() : st_->stream.get();
}

// The fused split sums of linear_tc_wa / wa2 count finished CTAs in one __device__ array that
// launches may only use in stream order: on the side stream (beside the main one) the partials
// are summed by the separate reduce launch instead (the same adds, the same bits).
kernels::Wa2Options CudaBackend::wa2_options(int variant, int fmt, int64_t rows, int64_t K,
                                             int64_t M) const {
  kernels::Wa2Options o = kernels::linear_tc_wa2_options(variant, fmt, rows, K, M);
  if (st_->on_side) o.fused_reduce = false;
  return o;
}

Status CudaBackend::begin_side() {
  if (!st_->side_enabled) return Unimplemented("begin_side: the side stream is off");
  if (st_->side_open) return FailedPrecondition("begin_side: the side queue is already open");
  if (!st_->side) {
    DI_ASSIGN_OR_RETURN(Stream side, Stream::create());
    DI_ASSIGN_OR_RETURN(Event fork_ev, Event::create());
    DI_ASSIGN_OR_RETURN(Event join_ev, Event::create());
    st_->side.emplace(std::move(side));
    st_->fork_ev.emplace(std::move(fork_ev));
    st_->join_ev.emplace(std::move(join_ev));
  }
  const cudaStream_t main = st_->stream.get(), side = st_->side->get();
  DI_RETURN_IF_ERROR(st_->fork_ev->record(main));
  DI_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, st_->fork_ev->get(), 0));
  st_->holding = {st_->cache};
  if (st_->capturing) st_->holding.push_back(st_->capture_cache);
  for (auto& c : st_->holding) c->hold(true);
  DI_CUBLAS_RETURN_IF_ERROR(cublasSetStream(st_->blas.get(), side));
  st_->on_side = st_->side_open = true;
  return OkStatus();
}

Status CudaBackend::end_side() {
  if (!st_->on_side) return FailedPrecondition("end_side without begin_side");
  st_->on_side = false;
  DI_CUBLAS_RETURN_IF_ERROR(cublasSetStream(st_->blas.get(), st_->stream.get()));
  return st_->join_ev->record(st_->side->get());
}

Status CudaBackend::join_side() {
  if (!st_->side_open || st_->on_side)
    return FailedPrecondition("join_side without begin_side / end_side");
  st_->side_open = false;
  const cudaError_t err = cudaStreamWaitEvent(st_->stream.get(), st_->join_ev->get(), 0);
  for (auto& c : st_->holding) c->hold(false);
  st_->holding.clear();
  DI_CUDA_RETURN_IF_ERROR(err);
  return OkStatus();
}

Status CudaBackend::launched(const char* op) {
  st_->last_op = op;
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_status(err, op, __FILE__, __LINE__);
  return OkStatus();
}

Status CudaBackend::synchronize() {
  if (st_->capturing) return refuse_in_capture("synchronize");
  if (st_->side_open) return FailedPrecondition("synchronize: the side queue is open");
  // The error flag is read on the backend's stream, behind the queued work (a device-to-host copy
  // into pageable memory returns once it has landed), so the stream sync finds nothing left: one
  // round trip per sync instead of a sync and then a second copy (session 12 trace: ~13 µs of
  // idle device between the two at every decode step).
  int32_t code = 0;
  DI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&code, st_->error_flag.data(), 4, cudaMemcpyDeviceToHost, stream()));
  DI_RETURN_IF_ERROR(st_->stream.synchronize());
  if (code != kernels::kErrNone) return clear_error_flag(code);
  return OkStatus();
}

// The flag is reset on the backend's stream: a plain cudaMemset runs on the legacy default stream,
// which a non-blocking stream does not wait for, so the next flag read could still see the old
// code (session 13: an error reported twice, cuda_attention_fd_test).
// Always the main stream: an async download's wait() may call this from the engine thread
// while the worker issues to the side stream (stream() follows the worker's side queue).
Status CudaBackend::clear_error_flag(int32_t code) {
  DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(st_->error_flag.data(), 0, 4, st_->stream.get()));
  return OutOfRange(std::string("cuda backend: ") + kernels::error_code_name(code));
}

StatusOr<Tensor> CudaBackend::alloc(DType dtype, backend::Shape shape) {
  DI_ASSIGN_OR_RETURN(Tensor t, empty(dtype, std::move(shape)));
  if (t.nbytes()) DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream()));
  return t;
}

StatusOr<Tensor> CudaBackend::empty(DType dtype, backend::Shape shape) {
  for (int64_t d : shape)
    if (d < 0) return InvalidArgument("alloc: negative dimension in " + backend::shape_str(shape));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const uint64_t bytes = dtype_bytes(dtype, static_cast<uint64_t>(numel));
  const uint64_t b = TensorCache::bucket(bytes);
  std::shared_ptr<TensorCache> cache = st_->capturing ? st_->capture_cache : st_->cache;
  DI_ASSIGN_OR_RETURN(void* p, cache->get(b));
  std::shared_ptr<void> owner(p, [cache, b](void* q) { cache->put(b, q); });
  return Tensor::adopt(p, dtype, std::move(shape), std::move(owner), /*on_device=*/true);
}

uint64_t CudaBackend::allocated_bytes() const { return st_->cache->held(); }

Status CudaBackend::refuse_in_capture(const char* what) {
  if (st_->capture_refused.empty()) st_->capture_refused = what;
  return FailedPrecondition(std::string("cuda graphs: ") + what + " while capturing (after op '" +
                            st_->last_op + "')");
}

bool CudaBackend::supports_graphs() const { return st_->graphs; }

Status CudaBackend::begin_capture(const backend::Backend::Graph* pool_of) {
  if (!st_->graphs) return FailedPrecondition("cuda graphs: disabled (--enforce-eager or DEEPINFER_CUDA_GRAPHS=0)");
  if (st_->capturing) return FailedPrecondition("cuda graphs: begin_capture while capturing");
  if (pool_of != nullptr) {
    const auto* g = dynamic_cast<const CudaGraph*>(pool_of);
    if (g == nullptr) return InvalidArgument("cuda graphs: pool_of is not a graph of this backend");
    st_->capture_cache = g->cache();
  } else {
    st_->capture_cache = std::make_shared<TensorCache>();
  }
  st_->capture_refused.clear();
  if (st_->side_open)
    return FailedPrecondition("cuda graphs: begin_capture with the side queue open");
  DI_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(st_->stream.get(), cudaStreamCaptureModeRelaxed));
  st_->capturing = true;
  return OkStatus();
}

StatusOr<std::shared_ptr<backend::Backend::Graph>> CudaBackend::end_capture() {
  if (!st_->capturing) return FailedPrecondition("cuda graphs: end_capture without begin_capture");
  cudaGraph_t g = nullptr;
  if (st_->side_open) {  // an unjoined branch would invalidate the capture: join it first
    if (st_->on_side) (void)end_side();
    (void)join_side();
  }
  const cudaError_t err = cudaStreamEndCapture(st_->stream.get(), &g);
  st_->capturing = false;
  std::shared_ptr<TensorCache> cache = std::move(st_->capture_cache);
  const std::string refused = std::move(st_->capture_refused);
  if (err != cudaSuccess || g == nullptr || !refused.empty()) {
    cudaGetLastError();  // an invalidated capture leaves its error behind
    if (g != nullptr) cudaGraphDestroy(g);
    return FailedPrecondition(std::string("cuda graphs: capture failed (") +
                              (!refused.empty() ? refused + " while capturing"
                                                : std::string(cudaGetErrorString(err))) + ")");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ierr = cudaGraphInstantiate(&exec, g, 0);
  if (ierr != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(g);
    return FailedPrecondition(std::string("cuda graphs: instantiate failed (") +
                              cudaGetErrorString(ierr) + ")");
  }
  return std::shared_ptr<backend::Backend::Graph>(std::make_shared<CudaGraph>(g, exec, std::move(cache)));
}

Status CudaBackend::replay(const backend::Backend::Graph& graph) {
  const auto* g = dynamic_cast<const CudaGraph*>(&graph);
  if (g == nullptr) return InvalidArgument("cuda graphs: replay of a graph another backend captured");
  if (st_->capturing) return refuse_in_capture("replay");
  if (st_->side_open) return FailedPrecondition("cuda graphs: replay with the side queue open");
  DI_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(g->exec(), st_->stream.get()));
  st_->last_op = "graph";
  return OkStatus();
}

Status CudaBackend::bind_thread() {
  DI_CUDA_RETURN_IF_ERROR(cudaSetDevice(st_->device));
  return OkStatus();
}

bool CudaBackend::memory_info(uint64_t* free_bytes, uint64_t* total_bytes) const {
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  *free_bytes = f;
  *total_bytes = t;
  return true;
}

Status CudaBackend::upload(const Tensor& host, Tensor& dst) {
  if (host.dtype() != dst.dtype() || host.numel() != dst.numel())
    return InvalidArgument("upload: " + host.describe() + " and " + dst.describe() +
                           " differ in dtype or element count");
  if (host.on_device()) return InvalidArgument("upload: source " + host.describe() + " is on the device");
  if (st_->capturing) return refuse_in_capture("upload");
  if (host.nbytes() == 0) return OkStatus();
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw(), host.raw(), host.nbytes(),
                                          cudaMemcpyHostToDevice, stream()));
  // Pageable source: the copy is staged before the call returns, so `host` may be reused.
  return OkStatus();
}

Status CudaBackend::download(const Tensor& src, Tensor& host) {
  if (host.dtype() != src.dtype() || host.numel() != src.numel())
    return InvalidArgument("download: " + src.describe() + " and " + host.describe() +
                           " differ in dtype or element count");
  if (host.on_device()) return InvalidArgument("download: destination " + host.describe() + " is on the device");
  if (st_->capturing) return refuse_in_capture("download");
  // With the side queue open (not issuing to it) a download waits for the main queue only.
  if (st_->on_side) return FailedPrecondition("download: issued to the side queue");
  // Up to kMaxAsyncDownloadBytes (the sampled ids of a step, flags, counts): download_async's
  // pinned slot and its wait — the data and the error flag in one round trip (session 13 trace:
  // a pageable copy and then the flag's cost two, ~12-17 us of idle device per decode step).
  const uint64_t n = src.nbytes();
  if (n > 0 && n <= kMaxAsyncDownloadBytes) {
    DI_ASSIGN_OR_RETURN(auto ticket, download_async(src, host));
    return ticket->wait();
  }
  if (n > 0)
    DI_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host.raw(), src.raw(), n, cudaMemcpyDeviceToHost, stream()));
  return synchronize();
}

StatusOr<std::unique_ptr<backend::Backend::PendingDownload>> CudaBackend::download_async(
    const Tensor& src, Tensor& host) {
  if (host.dtype() != src.dtype() || host.numel() != src.numel())
    return InvalidArgument("download_async: " + src.describe() + " and " + host.describe() +
                           " differ in dtype or element count");
  if (host.on_device())
    return InvalidArgument("download_async: destination " + host.describe() + " is on the device");
  const uint64_t n = src.nbytes();
  if (n > kMaxAsyncDownloadBytes)
    return InvalidArgument("download_async: " + src.describe() + " is over " +
                           std::to_string(kMaxAsyncDownloadBytes) + " bytes");
  if (st_->capturing) return refuse_in_capture("download_async");
  if (st_->on_side) return FailedPrecondition("download_async: issued to the side queue");
  std::unique_ptr<State::DownloadSlot> slot;
  {
    std::lock_guard<std::mutex> lock(st_->slots_mu);
    if (!st_->free_slots.empty()) {
      slot = std::move(st_->free_slots.back());
      st_->free_slots.pop_back();
    }
  }
  if (!slot) {
    DI_ASSIGN_OR_RETURN(PinnedBuffer buf, PinnedBuffer::allocate(kMaxAsyncDownloadBytes + 16));
    DI_ASSIGN_OR_RETURN(Event landed, Event::create());
    slot.reset(new State::DownloadSlot{std::move(buf), std::move(landed)});
  }
  const uint64_t flag_at = (n + 15) / 16 * 16;
  auto* base = static_cast<uint8_t*>(slot->buf.data());
  if (n > 0)
    DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base, src.raw(), n, cudaMemcpyDeviceToHost, stream()));
  DI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(base + flag_at, st_->error_flag.data(), 4, cudaMemcpyDeviceToHost, stream()));
  DI_RETURN_IF_ERROR(slot->landed.record(stream()));
  return std::unique_ptr<backend::Backend::PendingDownload>(
      new AsyncDownload(this, std::move(slot), host.raw(), n, flag_at));
}

Status CudaBackend::compressor_slots(const Tensor& kv, const Tensor& gate, const Tensor& ape,
                                     const Tensor* overlap_kv, const Tensor* overlap_gate,
                                     int64_t m, Tensor& values, Tensor& scores,
                                     Tensor* next_overlap_kv, Tensor* next_overlap_gate) {
  DI_ASSIGN_OR_RETURN(const auto d,
                      check_compressor_slots(kv, gate, ape, overlap_kv, overlap_gate, m, values,
                                             scores, next_overlap_kv, next_overlap_gate));
  kernels::compressor_slots(kv.data<float>(), gate.data<float>(), ape.data<float>(),
                            overlap_kv ? overlap_kv->data<float>() : nullptr,
                            overlap_gate ? overlap_gate->data<float>() : nullptr, d.n, d.m, d.coff,
                            d.d, values.data<float>(), scores.data<float>(),
                            next_overlap_kv ? next_overlap_kv->data<float>() : nullptr,
                            next_overlap_gate ? next_overlap_gate->data<float>() : nullptr,
                            stream());
  return launched("compressor_slots");
}

bool CudaBackend::supports_op(OpKind op, DType dtype) const {
  if (op == OpKind::kDequantize) {
    return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
           dtype == DType::kF8E4M3 || dtype == DType::kI8 || dtype == DType::kU8;
  }
  if (op == OpKind::kMatmul)  // through linear(): weights kept in their stored format
    return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF8E4M3 ||
           dtype == DType::kF4E2M1;
  return dtype == DType::kF32;
}

namespace {
int32_t* flag_of(const DeviceBuffer& b) { return static_cast<int32_t*>(b.data()); }

// DEEPINFER_GEMV_KERNEL, parsed once for linear and linear_multi: gemv_v3's options, or null
// when session 7's kernels are selected.
const kernels::Gemv3Options* gemv3_selected() {
  static kernels::Gemv3Options options;
  // Session 9: auto | tc | tc1..tc3 (skinny_mma) leave the products they do not take to gemv_v3's
  // picks (session 8's auto, now also selectable alone as "b").
  static const bool on = kernels::gemv3_options_for(
      kernels::skinny_options_for(env().gemv_kernel.c_str(), nullptr) ? "auto" : env().gemv_kernel.c_str(),
      &options);
  return on ? &options : nullptr;
}

// Session 9 (skinny_mma.h): DEEPINFER_GEMV_KERNEL tc | tc1..tc3 selects the small-M tensor-core
// product for M <= 16 in the default mode; null for every other value (the dispatch unchanged).
const kernels::SkinnyOptions* skinny_selected() {
  static kernels::SkinnyOptions options;
  static const bool on = kernels::skinny_options_for(env().gemv_kernel.c_str(), &options);
  return on ? &options : nullptr;
}
}  // namespace

Status CudaBackend::dequantize(const Tensor& w, const Tensor* scale, int64_t block_rows,
                               int64_t block_cols, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_dequantize(w, scale, block_rows, block_cols, out));
  const DType dt = w.dtype();
  if (!d.quantized) {
    kernels::to_f32(w.raw(), dt == DType::kF32 ? 0 : dt == DType::kBF16 ? 1 : 2, d.N * d.K,
                    out.data<float>(), stream());
    return launched("dequantize");
  }
  const ScaleType type = scale->dtype() == DType::kF8E8M0 ? ScaleType::kUe8m0
                         : scale->dtype() == DType::kF32  ? ScaleType::kF32
                                                          : ScaleType::kBf16;
  return dequant_block_scaled(w.data<uint8_t>(), d.packed_fp4, scale->raw(), type, d.N, d.K,
                              block_rows, block_cols, out.data<float>(), stream());
}

Status CudaBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_embedding(table, ids, out));
  kernels::gather_rows(table.data<float>(), ids.data<int32_t>(), d.M, d.N, d.H, out.data<float>(),
                       flag_of(st_->error_flag), kernels::kErrEmbeddingId, stream());
  return launched("embedding");
}

Status CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out, int64_t groups) {
  DI_ASSIGN_OR_RETURN(const auto d, check_matmul(x, w, out, groups));
  if (d.M == 0 || d.N == 0) return OkStatus();
  if (st_->batch_invariant) {
    kernels::matmul_fixed(x.data<float>(), w.data<float>(), d.M, d.N, d.K, groups,
                          out.data<float>(), stream());
    return launched("matmul");
  }
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: out_g^T [N, M] = W_g [N, K] · X_g^T [K, M] for each group g.
  DI_CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
      st_->blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(d.N), static_cast<int>(d.M),
      static_cast<int>(d.K), &alpha, w.data<float>(), static_cast<int>(d.K), d.N * d.K,
      x.data<float>(), static_cast<int>(groups * d.K), d.K, &beta, out.data<float>(),
      static_cast<int>(groups * d.N), d.N, static_cast<int>(groups)));
  return OkStatus();
}

Status CudaBackend::linear(const Tensor& x, const backend::Weight& w, Tensor& out,
                           int64_t groups) {
  const DType dt = w.w.dtype();
  if (dt == DType::kF32 && !w.scale.defined()) return matmul(x, w.w, out, groups);
  const char* op = "linear";
  const int fmt = dt == DType::kBF16 ? 0 : dt == DType::kF8E4M3 ? 1 : dt == DType::kF4E2M1 ? 2 : -1;
  if (fmt < 0)
    return Unimplemented(std::string("linear (cuda): weight dtype ") + dtype_name(dt) +
                         " (F32, BF16, F8_E4M3, F4_E2M1)");
  if (groups < 1) return InvalidArgument("linear: groups must be >= 1");
  DI_RETURN_IF_ERROR(check_rank(op, "w", w.w, dt, 2));
  DI_RETURN_IF_ERROR(check_rank(op, "x", x, DType::kF32, 2));
  const int64_t GN = w.rows(), K = w.cols(), M = x.dim(0);
  if (GN % groups != 0 || x.dim(1) != groups * K)
    return InvalidArgument("linear: x " + x.describe() + " and w " + w.w.describe() +
                           " do not form a " + std::to_string(groups) + "-group product");
  DI_RETURN_IF_ERROR(check_tensor(op, "out", out, DType::kF32, {M, GN}));
  if ((fmt == 0) == w.scale.defined())
    return InvalidArgument(std::string("linear: ") + w.w.describe() +
                           (fmt == 0 ? " takes no scale" : " needs its scale tensor"));
  if (fmt == 2 && K % 2 != 0) return InvalidArgument("linear: FP4 weights need an even K");
  bool scale_f32 = false;
  if (fmt != 0) {
    const DType st = w.scale.dtype();
    if (st != DType::kF8E8M0 && st != DType::kF32)
      return InvalidArgument("linear: scale must be F8_E8M0 or F32, got " + w.scale.describe());
    scale_f32 = st == DType::kF32;
    if (w.block_rows < 1 || w.block_cols < 8 || w.block_cols % 8 != 0)
      return InvalidArgument("linear: block " + std::to_string(w.block_rows) + "x" +
                             std::to_string(w.block_cols) + " (columns must be a multiple of 8)");
    DI_RETURN_IF_ERROR(check_tensor(op, "scale", w.scale, st,
                                    {(GN + w.block_rows - 1) / w.block_rows,
                                     (K + w.block_cols - 1) / w.block_cols}));
  }
  if (M == 0 || GN == 0) return OkStatus();
  // --fp8-activations: DeepSeek's recipe (activations quantized per 1×128 to e4m3, cuBLASLt
  // block-scaled FP8 GEMM) for prefill-sized products; lossy, so opt-in, and not batch-invariant.
  if (fmt == 1 && st_->fp8 && !st_->batch_invariant && M > 16) {
    const Status s = fp8_linear(*st_->fp8, x, w, out, groups, stream());
    if (s.code() != StatusCode::kUnimplemented) return s.ok() ? launched(op) : s;
  }  // shapes it refuses fall through
  // Session 12 (DEEPINFER_HEAD_BLAS, head_blas.h): the BF16 head at a few rows through cuBLAS on
  // x's exact bf16 terms (the weight read once for the 3M term rows), default mode only.
  if (static const int head_blas = env().head_blas;
      head_blas > 0 && !st_->batch_invariant && fmt == 0 && groups == 1 &&
      kernels::head_blas_takes(head_blas == 1 ? 9 : 2, M, GN, K, x.raw(), w.w.raw(),
                               env().head_blas_max_rows)) {
    const auto ws_bytes = static_cast<int64_t>(kernels::head_blas_workspace_bytes(M, GN, K));
    DI_ASSIGN_OR_RETURN(Tensor hws, empty(DType::kU8, {ws_bytes}));
    DI_RETURN_IF_ERROR(kernels::head_blas_linear(st_->blas.get(), x.data<float>(), w.w.raw(), M, GN,
                                                 K, hws.raw(), out.data<float>(), stream()));
    return launched(op);
  }
  // Session 16 (DEEPINFER_DENSE_WG, skinny_wg.h): e4m3 products with ue8m0 scales at
  // dense_wg..64 rows (default 17) on wgmma — x split once into bf16 planes laid out as the
  // shared-memory image, the weight rows in registers; plain and grouped (wo_a). Its own bits,
  // independent of M. Refusals fall through. Session 17 (DEEPINFER_DENSE_WG_MAX_ROWS, default
  // 384): up to that many rows in slabs of 64 (a row's bits are the same in any slab), instead
  // of the prefill path's per-call dequantization (batch 128: see docs/cuda.md "Session 17").
  if (static const int wg_min = env().dense_wg, wg_max = env().dense_wg_max_rows;
      wg_min > 0 && !st_->batch_invariant && fmt == 1 && !scale_f32 && M >= wg_min && M <= wg_max &&
      kernels::skinny_wg_supported(w.w.raw(), groups, GN / groups, K, scale_f32, w.block_rows,
                                   w.block_cols)) {
    const int64_t slab = kernels::kSkinnyWgMaxRows;
    // One workspace for every slab (sized for the largest): a slab's x split writes it only after
    // griddepcontrol.wait, i.e. after the previous slab's product and split sums have finished
    // (head_blas's slabs share theirs the same way).
    const auto wsb = static_cast<int64_t>(
        kernels::skinny_wg_workspace_bytes(std::min(M, slab), groups, GN / groups, K));
    DI_ASSIGN_OR_RETURN(Tensor wws, empty(DType::kU8, {wsb}));
    static const bool pdl_wg = env().gemv_pdl;
    bool taken = true;
    for (int64_t r0 = 0; r0 < M && taken; r0 += slab)
      taken =
          kernels::skinny_wg_linear(x.data<float>() + r0 * groups * K, w.w.raw(), w.scale.raw(),
                                    std::min(slab, M - r0), groups, GN / groups, K, w.block_rows,
                                    out.data<float>() + r0 * GN, wws.raw(), stream(), pdl_wg);
    if (taken) return launched(op);
    // A refusal depends on the layout and the slab's rows only: the first slab refuses or none.
    DI_RETURN_IF_ERROR(launched(op));  // a failed launch is an error; a refusal falls through
  }
  // Session 9 (DEEPINFER_GEMV_KERNEL tc | tc1..tc3, skinny_mma.h): M <= 16 rows against e4m3
  // (128-column block scales) or bf16 weights on tensor cores — the weight rows as the MMA's A
  // operand, x split into three 16-bit planes (one extra small launch); its own bits, independent
  // of M. tc takes the shapes / M where it measured faster (skinny_takes), tc1 all it supports;
  // the rest fall through to the code below unchanged.
  if (!st_->batch_invariant && M <= kernels::kSkinnyMaxRows && groups == 1 && (fmt == 0 || fmt == 1)) {
    const kernels::SkinnyOptions* sk = skinny_selected();
    if (sk != nullptr &&
        kernels::skinny_supported(fmt, w.w.raw(), GN, K, fmt != 0, w.block_rows, w.block_cols) &&
        kernels::skinny_takes(fmt, GN, K, M, *sk)) {
      static const bool pdl_sk = env().gemv_pdl;
      const size_t wsb = kernels::skinny_linear_workspace_bytes(fmt, GN, M, K, *sk);  // 0 at M <= 2
      Tensor sws;
      if (wsb > 0) {
        DI_ASSIGN_OR_RETURN(sws, empty(DType::kU8, {static_cast<int64_t>(wsb)}));
      }
      if (kernels::skinny_linear(fmt, x.data<float>(), w.w.raw(), fmt == 0 ? nullptr : w.scale.raw(),
                                 scale_f32, M, GN, K, w.block_rows, w.block_cols, out.data<float>(),
                                 sws.defined() ? sws.raw() : nullptr, stream(), pdl_sk, *sk))
        return launched(op);
      DI_RETURN_IF_ERROR(launched(op));  // a failed launch is an error; a refusal falls through
    }
  }
  // Session 15: grouped products (V4's wo_a: 8 groups of 1024 × 4096 e4m3) on skinny_mma too —
  // the groups as the projections of one launch (skinny_grouped_linear); taken as skinny_takes
  // takes the whole weight. Its own bits (fixed by (fmt, G, N, K), independent of M).
  if (!st_->batch_invariant && M <= kernels::kSkinnyMaxRows && groups > 1 &&
      (fmt == 0 || fmt == 1)) {
    const kernels::SkinnyOptions* sk = skinny_selected();
    const int64_t N = GN / groups;
    if (sk != nullptr &&
        kernels::skinny_grouped_supported(fmt, w.w.raw(), groups, N, K, fmt != 0, w.block_rows,
                                          w.block_cols) &&
        kernels::skinny_takes(fmt, GN, K, M, *sk)) {
      static const bool pdl_sk = env().gemv_pdl;
      const size_t wsb = kernels::skinny_grouped_workspace_bytes(fmt, groups, N, M, K, *sk);
      Tensor sws;
      if (wsb > 0) {
        DI_ASSIGN_OR_RETURN(sws, empty(DType::kU8, {static_cast<int64_t>(wsb)}));
      }
      if (kernels::skinny_grouped_linear(
              fmt, x.data<float>(), w.w.raw(), fmt == 0 ? nullptr : w.scale.raw(), scale_f32, M,
              groups, N, K, w.block_rows, w.block_cols, out.data<float>(),
              sws.defined() ? sws.raw() : nullptr, stream(), pdl_sk, *sk))
        return launched(op);
      DI_RETURN_IF_ERROR(launched(op));  // a failed launch is an error; a refusal falls through
    }
  }
  // Decode-sized M: the streaming GEMV (gemv.cu; the weight read once per tile of x rows staged
  // in shared memory, many 16-byte loads in flight). Its bits do not depend on M either, but they
  // differ from the tensor-core kernel's, so --batch-invariant keeps one kernel for every M.
  // Session 8 (DEEPINFER_GEMV_KERNEL auto | v1..v4, gemv_v3.cuh): bf16 / e4m3 weights streamed
  // through a TMA ring (its own row-independent arithmetic); "s7" (or a shape it refuses) keeps
  // session 7's kernels below.
  if (!st_->batch_invariant && M <= kernels::kGemvMaxRows && (fmt == 0 || fmt == 1) && groups <= 8) {
    const kernels::Gemv3Options* g3 = gemv3_selected();
    static const bool pdl3 = env().gemv_pdl;
    if (g3 && kernels::gemv3_supported(fmt, K, fmt != 0, w.block_cols) &&
        kernels::gemv3_dispatch_takes(*g3, fmt, GN, K, groups)) {
      const int passes = kernels::gemv3_passes(fmt, M, K, *g3);
      if (passes >= 1 && passes <= 2 &&
          kernels::gemv3_linear(fmt, x.data<float>(), w.w.raw(), fmt == 0 ? nullptr : w.scale.raw(),
                                scale_f32, M, GN / groups, K, groups, w.block_rows, w.block_cols,
                                out.data<float>(), stream(), pdl3, *g3))
        return launched(op);
    }
  }
  if (!st_->batch_invariant && M <= kernels::kGemvMaxRows &&
      kernels::gemv_supported(fmt, K, fmt != 0, w.block_cols)) {
    const int64_t mt = kernels::gemv_tile_rows(M, K);
    if ((M + mt - 1) / mt <= 2) {  // the weight read at most twice (K ≤ 6400 at M = 8)
      // One projection: session 5's kernel (gemv.cuh) — on the H200 it beat the pipelined
      // gemv_multi.cuh on every V4 shape alone (wo_b 19.5 vs 25.2 µs); the latter (same bits) wins
      // when it fuses projections (linear_multi) and runs alone only with DEEPINFER_GEMV_DENSE=
      // single|deep.
      static const std::string dense = env().gemv_dense;
      // Session 7: programmatic dependent launch (pdl.cuh; DEEPINFER_GEMV_PDL, default on) — the
      // weight stream starts while the previous kernel drains; same bits.
      static const bool pdl = env().gemv_pdl;
      if (groups == 1 && (dense == "single" || dense == "deep")) {
        const kernels::GemvProjection pr{w.w.raw(), fmt == 0 ? nullptr : w.scale.raw(),
                                         out.data<float>(), GN};
        if (kernels::gemv_multi(fmt, x.data<float>(), &pr, 1, scale_f32, M, K, w.block_rows,
                                w.block_cols, dense == "deep", stream(), pdl))
          return launched(op);
      }
      kernels::gemv_linear(fmt, x.data<float>(), w.w.raw(), fmt == 0 ? nullptr : w.scale.raw(),
                           scale_f32, M, GN / groups, K, groups, w.block_rows, w.block_cols,
                           out.data<float>(), stream(), pdl);
      return launched(op);
    }
  }
  // Prefill-sized M (prefill_gemm.h, DEEPINFER_PREFILL_GEMM != 0, not under --batch-invariant):
  // the weight dequantized exactly to bf16 into a workspace (≤ prefill::kWorkspaceBytes) and one
  // cuBLAS bf16 GEMM over x's three bf16 terms stacked along K (fp32 accumulation). When the
  // workspace cannot be had, the tensor-core kernel below serves the product.
  // f32 scales (e.g. V3-style checkpoints) are almost never exact in bf16: left to the tensor
  // cores rather than to the slow exact fallback.
  if (!st_->batch_invariant && prefill::mode() != 0 && M >= prefill::kDenseMinRows && !scale_f32) {
    prefill::DenseProblem pp;
    pp.fmt = fmt;
    pp.x = x.data<float>();
    pp.w = w.w.raw();
    pp.scale = fmt == 0 ? nullptr : w.scale.raw();
    pp.scale_f32 = scale_f32;
    pp.M = M;
    pp.N = GN / groups;
    pp.K = K;
    pp.G = groups;
    pp.br = fmt == 0 ? 1 : w.block_rows;
    pp.bc = fmt == 0 ? 1 : w.block_cols;
    pp.out = out.data<float>();
    const prefill::DensePlan plan = prefill::plan_dense(pp);
    if (plan.ok) {
      auto ws = empty(DType::kU8, {static_cast<int64_t>(prefill::workspace_request(plan.bytes))});
      if (ws.ok()) {
        DI_RETURN_IF_ERROR(prefill::dense_linear(st_->blas.get(), pp, plan, ws.value().raw(),
                                                 st_->num_sms, stream()));
        return launched(op);
      }
    }
  }
  // Tensor cores (linear_tc.cu) wherever the layout allows: for every M with --batch-invariant
  // (the kernel's bits do not depend on M), else from tc_min_rows rows. Below that the weight-only
  // kernel is faster (H200, bench_ops --tc-m): bf16 at one row (it streams the head at ~70 % of
  // copy bandwidth) and FP8/FP4 at one or two rows of weights under 24 M elements (e.g. wq_a
  // 14 vs 33 µs; the wide ones, wq_b / wo_a, are faster on tensor cores already at one row).
  const int64_t tc_min_rows = fmt == 0 ? 2 : GN * K < (int64_t{24} << 20) ? 3 : 1;
  if (kernels::linear_tc_supported(fmt, w.w.raw(), x.data<float>(), M, K, fmt != 0, w.block_cols) &&
      (fmt == 0 || w.scale.numel() < (int64_t{1} << 31)) &&
      (st_->batch_invariant || M >= tc_min_rows)) {
    const int64_t k_split = kernels::linear_tc_k_split(M, GN, K, fmt != 0 ? w.block_cols : 0,
                                                       st_->batch_invariant);
    // Session 18 (DEEPINFER_LINEAR_WG, linear_tc_wg.h): under --batch-invariant, bf16 / e4m3
    // products of linear_wg..linear_wg_max_rows rows on warpgroup MMA with linear_tc's bits, in
    // slabs of 64 rows. One workspace serves every slab: a slab's x split writes it only after
    // griddepcontrol.wait, i.e. after the previous slab's product and split sums have finished.
    if (static const int wg_min = env().linear_wg, wg_max = env().linear_wg_max_rows;
        st_->batch_invariant && wg_min > 0 && M >= wg_min && M <= wg_max &&
        kernels::linear_tc_wg_supported(fmt, w.w.raw(), x.data<float>(),
                                        std::min(M, kernels::kLinearTcWgMaxRows), GN / groups, K,
                                        groups, w.block_cols, k_split)) {
      const int64_t slab = kernels::kLinearTcWgMaxRows;
      const auto wsb = static_cast<int64_t>(kernels::linear_tc_wg_workspace_bytes(
          std::min(M, slab), GN / groups, K, groups, k_split));
      DI_ASSIGN_OR_RETURN(Tensor wws, empty(DType::kU8, {wsb}));
      static const bool pdl_wg = env().gemv_pdl;
      for (int64_t r0 = 0; r0 < M; r0 += slab)
        if (!kernels::linear_tc_wg(fmt, x.data<float>() + r0 * groups * K, w.w.raw(),
                                   fmt == 0 ? nullptr : w.scale.raw(), scale_f32,
                                   std::min(slab, M - r0), GN / groups, K, groups, w.block_rows,
                                   k_split, out.data<float>() + r0 * GN, wws.raw(), stream(),
                                   pdl_wg))
          return Internal("linear: linear_tc_wg refused a slab it had taken");
      return launched(op);
    }
    // Split partials in slabs of rows (the workspace of one launch bounded; rows independent).
    const int64_t slab = kernels::linear_tc_slab_rows(M, GN, K, k_split);
    Tensor ws;
    if (k_split < K) {
      DI_ASSIGN_OR_RETURN(ws, empty(DType::kF32, {(K + k_split - 1) / k_split, slab, GN}));
    }
    // Small M: the ring-streaming kernel with linear_tc's bits (linear_tc_small.cuh, session 8: the
    // same MMAs, the same k_split and in-order split sums, so it may replace linear_tc for any M it
    // takes, in either mode). DEEPINFER_SMALL_LINEAR (H200, bench_ops --tc-m, session 8 mid-run:
    // FP8 33 MB shapes 40 vs 44 µs at M ≤ 8, 54 vs 47 at M = 16, 100–120 vs 134–156 at M = 64;
    // the head equal at M ≤ 8, 509 vs 484 at 16): b (session 8's auto) = it at M ≤ 8 under --batch-invariant
    // (x split per warp) and at 17 ≤ M ≤ 64 in both modes (x split once per CTA), linear_tc at
    // 9..16 (and the GEMV at M ≤ 8 in the default mode); a = it for every M ≤ 64 it may take
    // (M ≤ 8 only under --batch-invariant); v1 = b without programmatic dependent launch;
    // v2 = a with the ring filled by TMA bulk copies (slower); v3 = a with x split per warp;
    // v4 = a with 256-byte ring slots per weight row (longer DRAM runs; not measured yet);
    // s7 = session 7's dispatch (linear_tc; session 7's gemv_tc, DEEPINFER_BI_LINEAR=gemv_tc, was
    // deleted in session 9: linear_tc_wa has the same bits and is faster at every shape).
    static const std::string small_sel = env().small_linear;
    // Session 9 (DEEPINFER_SMALL_LINEAR=w / w1..w3): the weight-as-A kernel with linear_tc's bits
    // (linear_tc_wa.cuh: weight rows in the MMA's A operand, x's terms as B columns) at
    // M <= kLinearTcWaMaxRows in both modes; other M as auto. w = PDL, x split once per CTA,
    // 128-row CTAs; w1 = w without PDL; w2 = w with x split per warp; w3 = w with the short e4m3
    // decode (linear_tc_wa_decode.h: the same bits unless a weight holds a NaN code). BF16 weights
    // of >= 16 M elements (the head) use 256-byte ring slots per row (longer DRAM runs; M <= 8).
    // Session 9 default: auto = w (H200, bench_model: --batch-invariant batch-1 step 1.95 vs
    // 2.21 ms, default batch-16 step 4.84 vs ~5.08 ms; the same bits as linear_tc, so nothing
    // else changes); b = session 8's auto (linear_tc_small / linear_tc below).
    static const bool wa_sel = small_sel == "auto" || small_sel == "w" || small_sel == "w1" ||
                               small_sel == "w2" || small_sel == "w3" ||
                               kernels::linear_tc_wa2_variant(small_sel.c_str()) > 0;  // x*: FP4 / refusals
    const bool wa = wa_sel && kernels::linear_tc_wa_supported(fmt, w.w.raw(), x.data<float>(), M, K,
                                                              fmt != 0, w.block_cols);
    const bool wr = wa && env().linear_wr == 1 && (small_sel == "auto" || small_sel == "w") &&
                    kernels::linear_tc_wr_supported(fmt, w.w.raw(), x.data<float>(), M, GN / groups,
                                                    K, groups, w.block_cols, k_split);
    const bool small_auto = small_sel == "b" || small_sel == "v1" || wa_sel;
    const bool small_range = M <= kernels::kLinearTcSmallMaxRows &&
                             (st_->batch_invariant || M > kernels::kGemvMaxRows) &&
                             (!small_auto || M <= 8 || M > 16);
    const bool small = small_sel != "s7" && small_range &&
                       kernels::linear_tc_small_supported(fmt, w.w.raw(), x.data<float>(), M, K,
                                                          fmt != 0, w.block_cols);
    const bool small_share = small_sel == "v3" ? false : small_auto ? M > 16 : true;
    // Session 10 (DEEPINFER_SMALL_LINEAR=x1..x4, linear_tc_wa.h "wa2"): linear_tc_wa's arithmetic
    // (linear_tc's bits) at M <= kLinearTcWaMaxRows through a persistent grid whose ring streams
    // across work items. x1, x2, x4 put the bf16 head on it with the ring filled by 2-D TMA boxes
    // (H200: 300 vs 366 µs at M = 1, 84 % of copy; 430 vs 491 at M = 16); x2..x4 fuse
    // linear_multi's small weights of one x under --batch-invariant (linear_multi); x3 = the
    // fusion alone, x4 = x2 without the in-kernel split sums at M = 1. Everything else as `w`
    // (below). `auto` = x2 under --batch-invariant (session 10: BI batch 1 1.73 vs 1.85 ms,
    // batch 16 4.21 vs 4.27), x1 in the default mode, where only the head at M 9..16 gets here
    // (session 10 final run: batch 16 4.00 vs 4.07-4.10 ms with `w`; the same bits) — since
    // session 16 only with DEEPINFER_HEAD_BLAS=0 (cuBLAS takes the head up to 64 rows).
    static const int wa2_sel = kernels::linear_tc_wa2_variant(small_sel.c_str());
    const int wa2_var = wa2_sel > 0               ? wa2_sel
                        : small_sel != "auto"     ? 0
                        : st_->batch_invariant    ? 2
                                                  : 1;
    if (kernels::linear_tc_wa2_takes_single(wa2_var, fmt, GN, K, M)) {
      kernels::WaProjection pr;
      pr.w = w.w.raw();
      pr.scale = fmt == 0 ? nullptr : w.scale.raw();
      pr.x = x.data<float>();
      pr.lda = groups * K;
      pr.out = out.data<float>();
      pr.N = GN / groups;
      pr.G = groups;
      pr.k_split = k_split;
      // ws (allocated above) is [splits, M, G·N]: what wa2 needs for one projection at M <= 16.
      if (kernels::linear_tc_wa2(fmt, &pr, 1, scale_f32, M, K, w.block_rows, w.block_cols,
                                 ws.defined() ? ws.data<float>() : nullptr, stream(),
                                 wa2_options(wa2_var, fmt, GN, K, M)))
        return launched(op);
    }
    for (int64_t r0 = 0; r0 < M; r0 += slab) {
      const int64_t rows = std::min(slab, M - r0);
      const float* xr = x.data<float>() + r0 * groups * K;
      const void* sc = fmt == 0 ? nullptr : w.scale.raw();
      float* o = out.data<float>() + r0 * GN;
      float* wsp = ws.defined() ? ws.data<float>() : nullptr;
      // Session 17 (DEEPINFER_LINEAR_WR, linear_tc_wa.h "wr"): the e4m3 products wa would run,
      // with the weight rows loaded straight into registers — the same bits (linear_tc's).
      // H200 (bench_model, --batch-invariant batch 1): see docs/cuda.md "linear_tc_wr".
      if (wr)
        kernels::linear_tc_wr(xr, w.w.raw(), sc, scale_f32, rows, GN / groups, K, groups,
                              w.block_rows, k_split, o, wsp, stream(), true,
                              rows == 1 && env().wa_fused_reduce && !st_->on_side);
      else if (wa)
        kernels::linear_tc_wa(fmt, xr, w.w.raw(), sc, scale_f32, rows, GN / groups, K, groups,
                              w.block_rows, w.block_cols, k_split, o, wsp, stream(),
                              small_sel != "w1", small_sel != "w2", 2, small_sel == "w3",
                              fmt == 0 && GN * K >= (int64_t{16} << 20), false,
                              rows == 1 && env().wa_fused_reduce && !st_->on_side);
      else if (small)
        kernels::linear_tc_small(fmt, xr, w.w.raw(), sc, scale_f32, rows, GN / groups, K, groups,
                                 w.block_rows, w.block_cols, k_split, o, wsp, stream(),
                                 small_sel != "v1", small_sel == "v2", small_share,
                                 small_sel == "v4");
      else
        kernels::linear_tc(fmt, xr, w.w.raw(), sc, scale_f32, rows, GN / groups, K, groups,
                           w.block_rows, w.block_cols, k_split, o, wsp, stream());
    }
    return launched(op);
  }
  // The weight-only kernel reads 16-byte chunks (16 e4m3 / 32 e2m1 values) under one scale.
  const bool chunk_fits_block = fmt == 0 || w.block_cols % (fmt == 1 ? 16 : 32) == 0;
  if ((!st_->batch_invariant && M > 16) || !chunk_fits_block) {  // dequantize once, cuBLAS
    DI_ASSIGN_OR_RETURN(Tensor wf, alloc(DType::kF32, {GN, K}));
    DI_RETURN_IF_ERROR(dequantize(w.w, fmt == 0 ? nullptr : &w.scale, w.block_rows, w.block_cols, wf));
    return matmul(x, wf, out, groups);
  }
  kernels::linear_wq(fmt, x.data<float>(), w.w.raw(), fmt == 0 ? nullptr : w.scale.raw(),
                     scale_f32, M, GN / groups, K, groups, w.block_rows, w.block_cols,
                     out.data<float>(), stream());
  return launched(op);
}

// Projections of one x in one GEMV launch (gemv_multi.cuh) where the decode path would run the
// GEMV anyway: the same conditions as linear's GEMV branch, groups = 1, weights of one format
// class (bf16, or e4m3 with the same scale dtype and block shape) fused up to 8 at a time. Every
// other pair goes through linear (its checks, its errors), so the bits are linear's either way.
Status CudaBackend::linear_multi(const Tensor& x, std::span<const backend::Weight* const> ws,
                                 std::span<Tensor* const> outs) {
  // Pair i's format class for the fused launches below: -1 unless weight i is bf16 (0) or e4m3
  // with ue8m0 / f32 scales of its block shape (1 | f32 << 1), [rows, K] with rows >= 1, and
  // outs[i] an F32 [M, rows] that is not x.
  auto pair_class = [&](size_t i, int64_t M, int64_t K) -> int {
    const backend::Weight* w = ws[i];
    Tensor* o = outs[i];
    if (w == nullptr || o == nullptr || !w->w.defined() || w->w.rank() != 2) return -1;
    const DType dt = w->w.dtype();
    const int fmt = dt == DType::kBF16 ? 0 : dt == DType::kF8E4M3 ? 1 : -1;
    if (fmt < 0 || w->w.raw() == nullptr || w->cols() != K || w->rows() < 1) return -1;
    if (o->dtype() != DType::kF32 || o->rank() != 2 || o->dim(0) != M || o->dim(1) != w->rows() ||
        o->raw() == nullptr || o->raw() == x.raw())
      return -1;
    if ((fmt == 1) != w->scale.defined()) return -1;
    if (fmt == 0) return 0;
    const DType st = w->scale.dtype();
    if (st != DType::kF8E8M0 && st != DType::kF32) return -1;
    if (w->scale.rank() != 2 || w->scale.raw() == nullptr ||
        w->scale.dim(0) != (w->rows() + w->block_rows - 1) / std::max<int64_t>(w->block_rows, 1) ||
        w->scale.dim(1) != (K + w->block_cols - 1) / std::max<int64_t>(w->block_cols, 1))
      return -1;
    return 1 | (st == DType::kF32 ? 2 : 0);
  };
  // Session 10 (DEEPINFER_SMALL_LINEAR=x2..x4 and auto, --batch-invariant, linear_tc_wa.h "wa2"):
  // the small weights (linear_tc_wa2_multi_member) of one x at M <= 16 go in one launch per class
  // (format, scale dtype, block shape; up to kLinearTcWa2MaxProj each), every weight with the
  // k_split it has alone (linear_tc_k_split), so every output has linear's (linear_tc's) bits;
  // the rest go through linear one by one.
  if (st_->batch_invariant && ws.size() == outs.size() && ws.size() >= 2 && x.dtype() == DType::kF32 &&
      x.rank() == 2 && x.raw() != nullptr && x.dim(0) >= 1 && x.dim(0) <= kernels::kLinearTcWaMaxRows) {
    static const int wa2_sel = kernels::linear_tc_wa2_variant(env().small_linear.c_str());
    const int wa2_var = wa2_sel > 0 ? wa2_sel : env().small_linear == "auto" ? 2 : 0;  // auto = x2 here
    if (kernels::linear_tc_wa2_fuses_multi(wa2_var, x.dim(0))) {
      const int64_t M = x.dim(0), K = x.dim(1);
      // Class of pair i: -1 when not for the fused launch, else fmt | f32 scales << 1.
      auto klass = [&](size_t i) -> int {
        const int c = pair_class(i, M, K);
        if (c < 0) return -1;
        const backend::Weight* w = ws[i];
        const int fmt = c & 1;
        if (fmt == 1 && (w->block_rows < 1 || w->block_cols < 32 || w->block_cols % 32 != 0 ||
                         w->scale.numel() >= (int64_t{1} << 31)))
          return -1;
        if (!kernels::linear_tc_wa_supported(fmt, w->w.raw(), x.data<float>(), M, K, fmt == 1, w->block_cols) ||
            !kernels::linear_tc_wa2_multi_member(w->rows(), K))
          return -1;
        return c;
      };
      std::vector<int> cls(ws.size());
      for (size_t i = 0; i < ws.size(); ++i) cls[i] = klass(i);
      std::vector<char> done(ws.size(), 0);
      for (size_t i = 0; i < ws.size(); ++i) {
        if (cls[i] < 0 || done[i]) continue;
        const int fmt = cls[i] & 1;
        std::vector<size_t> members{i};
        for (size_t j = i + 1; j < ws.size() && members.size() < kernels::kLinearTcWa2MaxProj; ++j)
          if (!done[j] && cls[j] == cls[i] &&
              (fmt == 0 || (ws[j]->block_rows == ws[i]->block_rows && ws[j]->block_cols == ws[i]->block_cols)))
            members.push_back(j);
        if (members.size() < 2) continue;  // alone: linear (below) runs the same kernel
        const int64_t bc = fmt == 1 ? ws[i]->block_cols : 0;
        std::vector<kernels::WaProjection> pr;
        int64_t rows = 0;
        for (size_t j : members) {
          kernels::WaProjection p;
          p.w = ws[j]->w.raw();
          p.scale = fmt == 0 ? nullptr : ws[j]->scale.raw();
          p.x = x.data<float>();
          p.lda = K;
          p.out = outs[j]->data<float>();
          p.N = ws[j]->rows();
          p.G = 1;
          p.k_split = kernels::linear_tc_k_split(M, p.N, K, bc, /*batch_invariant=*/true);
          rows = std::max(rows, p.N);
          pr.push_back(p);
        }
        const int n = static_cast<int>(pr.size());
        if (!kernels::linear_tc_wa2_supported(fmt, pr.data(), n, M, K, fmt == 1 ? bc : 0)) continue;
        Tensor wsp;
        const int64_t wsf = kernels::linear_tc_wa2_workspace_floats(pr.data(), n, M, K);
        if (wsf > 0) {
          DI_ASSIGN_OR_RETURN(wsp, empty(DType::kF32, {wsf}));
        }
        if (kernels::linear_tc_wa2(fmt, pr.data(), n, (cls[i] & 2) != 0, M, K,
                                   fmt == 1 ? ws[i]->block_rows : 1, fmt == 1 ? bc : 0,
                                   wsp.defined() ? wsp.data<float>() : nullptr, stream(),
                                   wa2_options(wa2_var, fmt, rows, K, M))) {
          DI_RETURN_IF_ERROR(launched("linear_multi"));
          for (size_t j : members) done[j] = 1;
        }
      }
      bool any = false;
      for (char d : done) any = any || d != 0;
      if (any) {
        for (size_t i = 0; i < ws.size(); ++i)
          if (!done[i]) DI_RETURN_IF_ERROR(linear(x, *ws[i], *outs[i], 1));
        return OkStatus();
      }
    }
  }
  // Session 9 (DEEPINFER_GEMV_KERNEL tc | tc1..tc3): the projections skinny_mma takes share ONE
  // x split per weight format and are fused, up to 8 per launch, when their format, scale dtype,
  // block shape and cluster size agree (each keeps the split it has alone, so every output has
  // linear's bits); the rest go on below as before.
  std::vector<char> skinny_done(ws.size(), 0);
  if (const kernels::SkinnyOptions* sk = skinny_selected();
      sk != nullptr && !st_->batch_invariant && ws.size() == outs.size() && x.dtype() == DType::kF32 &&
      x.rank() == 2 && x.raw() != nullptr && x.dim(0) >= 1 && x.dim(0) <= kernels::kSkinnyMaxRows) {
    static const bool pdl = env().gemv_pdl;  // programmatic dependent launch
    const int64_t M = x.dim(0), K = x.dim(1);
    // Class of pair i: -1 when not for skinny_mma, else fmt | f32 scales << 1 | cluster size << 2.
    auto klass = [&](size_t i) -> int {
      const int c = pair_class(i, M, K);  // fmt | f32 scales << 1
      if (c < 0) return -1;
      const backend::Weight* w = ws[i];
      const int fmt = c & 1;
      if (!kernels::skinny_supported(fmt, w->w.raw(), w->rows(), K, fmt == 1, w->block_rows, w->block_cols) ||
          !kernels::skinny_takes(fmt, w->rows(), K, M, *sk))
        return -1;
      return c | (kernels::skinny_cluster_size(fmt, w->rows(), K, *sk) << 2);
    };
    std::vector<int> cls(ws.size());
    for (size_t i = 0; i < ws.size(); ++i) cls[i] = klass(i);
    Tensor planes[2];  // the x split for bf16 (0) and e4m3 (1) weights, made when first needed
    bool any = false;
    for (size_t i = 0; i < ws.size(); ++i) {
      if (cls[i] < 0 || skinny_done[i]) continue;
      const int fmt = cls[i] & 1;
      std::vector<size_t> members{i};
      for (size_t j = i + 1; j < ws.size() && members.size() < kernels::kSkinnyMaxProjections; ++j)
        if (!skinny_done[j] && cls[j] == cls[i] && (fmt == 0 || ws[j]->block_rows == ws[i]->block_rows))
          members.push_back(j);
      if (!planes[fmt].defined()) {
        DI_ASSIGN_OR_RETURN(planes[fmt], empty(DType::kU8, {static_cast<int64_t>(kernels::skinny_workspace_bytes(M, K))}));
        kernels::skinny_split_x(fmt, x.data<float>(), M, K, planes[fmt].raw(), stream(), pdl && sk->variant != 2);
        DI_RETURN_IF_ERROR(launched("linear_multi"));
      }
      std::vector<kernels::SkinnyProjection> pr;
      for (size_t j : members)
        pr.push_back({ws[j]->w.raw(), fmt == 0 ? nullptr : ws[j]->scale.raw(), outs[j]->data<float>(), ws[j]->rows()});
      if (kernels::skinny_product(fmt, pr.data(), static_cast<int>(pr.size()), (cls[i] & 2) != 0, M, K,
                                  ws[i]->block_rows, planes[fmt].raw(), stream(), pdl, *sk)) {
        DI_RETURN_IF_ERROR(launched("linear_multi"));
        for (size_t j : members) skinny_done[j] = 1;
        any = true;
      } else {
        DI_RETURN_IF_ERROR(launched("linear_multi"));
      }
    }
    if (any) {
      bool all = true;
      for (char d : skinny_done) all = all && d != 0;
      if (all) return OkStatus();
      std::vector<const backend::Weight*> rest_w;
      std::vector<Tensor*> rest_o;
      for (size_t i = 0; i < ws.size(); ++i)
        if (!skinny_done[i]) {
          rest_w.push_back(ws[i]);
          rest_o.push_back(outs[i]);
        }
      return linear_multi(x, rest_w, rest_o);
    }
  }
  static const std::string dense = env().gemv_dense;
  static const bool pdl = env().gemv_pdl;  // programmatic dependent launch (pdl.cuh); same bits
  // Session 8: DEEPINFER_GEMV_KERNEL auto | v1..v4 fuses with the v3 kernel (gemv_v3.cuh) under
  // the same conditions as linear's v3 branch, so every output has linear's bits; s7: as before.
  const kernels::Gemv3Options* g3 = gemv3_selected();
  if (ws.size() != outs.size() || st_->batch_invariant ||
      (!g3 && dense != "multi" && dense != "deep"))
    return Backend::linear_multi(x, ws, outs);
  std::vector<char> done(ws.size(), 0);
  const bool x_ok = x.dtype() == DType::kF32 && x.rank() == 2 && x.raw() != nullptr;
  const int64_t M = x_ok ? x.dim(0) : 0, K = x_ok ? x.dim(1) : 0;
  if (x_ok && M >= 1 && M <= kernels::kGemvMaxRows) {
    const int64_t mt = kernels::gemv_tile_rows(M, K);
    // Format class of pair i, or -1 when it is not for the fused launch: bit 0..1 fmt, bit 2
    // f32 scales; block shape compared separately.
    auto klass = [&](size_t i) -> int {
      const int c = pair_class(i, M, K);
      if (c < 0) return -1;
      const backend::Weight* w = ws[i];
      const int fmt = c & 1;
      const bool sf32 = (c & 2) != 0;
      if (fmt == 1 && (w->block_rows < 1 || w->block_cols < 8)) return -1;
      // Bit 3: the v3 kernel (linear would run it on this weight alone), else session 7's.
      if (g3 && kernels::gemv3_supported(fmt, K, fmt == 1, w->block_cols) &&
          kernels::gemv3_dispatch_takes(*g3, fmt, w->rows(), K, 1)) {
        const int passes = kernels::gemv3_passes(fmt, M, K, *g3);
        if (passes >= 1 && passes <= 2) return fmt | (sf32 ? 4 : 0) | 8;
      }
      if (dense != "multi" && dense != "deep") return -1;
      if (!kernels::gemv_multi_supported(fmt, K, fmt == 1, w->block_cols) || (M + mt - 1) / mt > 2)
        return -1;
      return fmt | (sf32 ? 4 : 0);
    };
    std::vector<int> cls(ws.size());
    for (size_t i = 0; i < ws.size(); ++i) cls[i] = klass(i);
    for (size_t i = 0; i < ws.size(); ++i) {
      if (cls[i] < 0 || done[i]) continue;
      // Pair i and the later ones of its class and block shape, up to the table size.
      std::vector<size_t> members{i};
      for (size_t j = i + 1; j < ws.size() && members.size() < kernels::kGemvMaxProjections; ++j)
        if (!done[j] && cls[j] == cls[i] &&
            ((cls[i] & 3) == 0 || (ws[j]->block_rows == ws[i]->block_rows &&
                             ws[j]->block_cols == ws[i]->block_cols)))
          members.push_back(j);
      if (members.size() < 2) continue;  // alone: linear runs the same kernel
      std::vector<kernels::GemvProjection> pr;
      for (size_t j : members)
        pr.push_back({ws[j]->w.raw(), (cls[i] & 3) == 0 ? nullptr : ws[j]->scale.raw(),
                      outs[j]->data<float>(), ws[j]->rows()});
      const int fmt = cls[i] & 3;
      const bool fused =
          (cls[i] & 8) != 0 ? kernels::gemv3_multi(fmt, x.data<float>(), pr.data(), static_cast<int>(pr.size()),
                                        (cls[i] & 4) != 0, M, K, ws[i]->block_rows, ws[i]->block_cols,
                                        stream(), pdl, *g3)
                 : kernels::gemv_multi(fmt, x.data<float>(), pr.data(), static_cast<int>(pr.size()),
                                       (cls[i] & 4) != 0, M, K, ws[i]->block_rows, ws[i]->block_cols,
                                       dense == "deep", stream(), pdl);
      if (fused) {
        DI_RETURN_IF_ERROR(launched("linear_multi"));
        for (size_t j : members) done[j] = 1;
      }
    }
  }
  for (size_t i = 0; i < ws.size(); ++i) {
    if (done[i]) continue;
    if (ws[i] == nullptr || outs[i] == nullptr)
      return InvalidArgument("linear_multi: weight or output " + std::to_string(i) + " is null");
    DI_RETURN_IF_ERROR(linear(x, *ws[i], *outs[i], 1));
  }
  return OkStatus();
}

namespace {
int weight_format(DType dt) {
  return dt == DType::kBF16 ? 0 : dt == DType::kF8E4M3 ? 1 : dt == DType::kF4E2M1 ? 2
         : dt == DType::kF32 ? 3 : -1;
}

// Device pointer tables of one projection of every expert (all of one format and shape).
struct ProjectionTable {
  DeviceBuffer w, s;  // const void* [E] each (s empty when unscaled)
  int fmt = -1;
  bool scale_f32 = false;
  bool tc = false;  // every expert's rows 16-byte aligned: the tensor-core grouped GEMM can read it
  bool gemv_vec = false;  // every expert's rows 16-byte aligned (the GEMV's vector loads)
  int64_t N = 0, K = 0, br = 1, bc = 1;
};
struct ExpertTables {
  ProjectionTable gate_up, down;
};

StatusOr<ProjectionTable> make_table(const std::vector<backend::Weight>& ws, cudaStream_t stream) {
  ProjectionTable t;
  const backend::Weight& w0 = ws.at(0);
  t.fmt = weight_format(w0.w.dtype());
  t.N = w0.rows();
  t.K = w0.cols();
  t.br = w0.block_rows;
  t.bc = w0.block_cols;
  t.scale_f32 = w0.scale.defined() && w0.scale.dtype() == DType::kF32;
  std::vector<const void*> wp, sp;
  for (const backend::Weight& w : ws) {
    const bool same = weight_format(w.w.dtype()) == t.fmt && w.rows() == t.N &&
                      w.cols() == t.K && w.scale.defined() == w0.scale.defined() &&
                      (!w.scale.defined() || (w.scale.dtype() == w0.scale.dtype() &&
                                              w.block_rows == t.br && w.block_cols == t.bc));
    if (t.fmt < 0 || !same) return Unimplemented("experts of mixed formats");
    wp.push_back(w.w.raw());
    if (w.scale.defined()) sp.push_back(w.scale.raw());
  }
  const int64_t row_bytes = t.fmt == 0 ? 2 * t.K : t.fmt == 1 ? t.K : t.K / 2;
  t.tc = t.fmt >= 0 && t.fmt <= 2 && row_bytes % 16 == 0 &&
         (!w0.scale.defined() || t.bc % 32 == 0);
  for (const void* p : wp) t.tc = t.tc && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  t.gemv_vec = t.fmt >= 0 && (t.fmt == 3 ? 4 * t.K : row_bytes) % 16 == 0;
  for (const void* p : wp) t.gemv_vec = t.gemv_vec && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (w0.scale.defined()) t.tc = t.tc && w0.scale.numel() < (int64_t{1} << 31);
  if (w0.scale.defined() && ((t.fmt != 1 && t.fmt != 2) || t.bc % (t.fmt == 1 ? 16 : 32) != 0))
    return Unimplemented("expert scale layout");
  DI_ASSIGN_OR_RETURN(t.w, DeviceBuffer::allocate(wp.size() * sizeof(void*)));
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.w.data(), wp.data(), wp.size() * sizeof(void*),
                                          cudaMemcpyHostToDevice, stream));
  if (!sp.empty()) {
    DI_ASSIGN_OR_RETURN(t.s, DeviceBuffer::allocate(sp.size() * sizeof(void*)));
    DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.s.data(), sp.data(), sp.size() * sizeof(void*),
                                            cudaMemcpyHostToDevice, stream));
  }
  DI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // host vectors go out of scope
  return t;
}
}  // namespace

Status CudaBackend::prepare_experts(backend::ExpertSet& experts) {
  experts.prepared.reset();
  if (experts.num_experts() == 0) return OkStatus();
  auto gu = make_table(experts.gate_up, stream());
  auto dn = make_table(experts.down, stream());
  if (!gu.ok() || !dn.ok()) return OkStatus();  // mixed formats: the grouped path serves them
  auto tables = std::make_shared<ExpertTables>();
  tables->gate_up = std::move(gu).value();
  tables->down = std::move(dn).value();
  experts.prepared = tables;
  return OkStatus();
}

Status CudaBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                const backend::ExpertSet& experts, float swiglu_limit,
                                Tensor& out) {
  return moe_experts_into(x, ids, weights, experts, swiglu_limit, out, /*set=*/false);
}

Status CudaBackend::moe_experts_set(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                    const backend::ExpertSet& experts, float swiglu_limit,
                                    Tensor& out) {
  return moe_experts_into(x, ids, weights, experts, swiglu_limit, out, /*set=*/true);
}

// Backend's host grouping (adds into out): with `set`, out is zero-filled first.
Status CudaBackend::moe_experts_host_grouped(const Tensor& x, const Tensor& ids,
                                             const Tensor& weights,
                                             const backend::ExpertSet& experts, float swiglu_limit,
                                             Tensor& out, bool set) {
  if (set && out.nbytes() > 0)
    DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream()));
  return Backend::moe_experts(x, ids, weights, experts, swiglu_limit, out);
}

Status CudaBackend::moe_experts_into(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                     const backend::ExpertSet& experts, float swiglu_limit,
                                     Tensor& out, bool set) {
  const auto* t = static_cast<const ExpertTables*>(experts.prepared.get());
  DI_RETURN_IF_ERROR(check_rank("moe_experts", "x", x, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank("moe_experts", "ids", ids, DType::kI32, 2));
  const int64_t S = x.dim(0), H = x.dim(1), k = ids.dim(1), slots = S * k;
  if (t == nullptr || t->gate_up.K != H || t->down.N != H || t->gate_up.N != 2 * t->down.K)
    return moe_experts_host_grouped(x, ids, weights, experts, swiglu_limit, out, set);
  // Tensor cores for every slot count when both projections allow it (the grouped GEMM's bits do
  // not depend on the batch, so --batch-invariant uses it too); else the per-slot weight-only
  // kernel (small batches, --batch-invariant) or the host grouping.
  const int64_t E_all = experts.num_experts();
  const bool tc_experts =
      t->gate_up.tc && t->down.tc &&
      kernels::experts_tc_supported(t->gate_up.fmt, x.data<float>(), slots, E_all, H,
                                    t->gate_up.s.size() > 0, t->gate_up.bc) &&
      kernels::experts_tc_supported(t->down.fmt, x.data<float>(), slots, E_all, t->down.K,
                                    t->down.s.size() > 0, t->down.bc);
  // Session 15: decode batches of up to 8 slots per expert (≤ kExpertsMmaDecodeMaxSlots; V4: 2048,
  // batch 341 — max_num_seqs is 256) on the decode kernels below (128 before, and with DEEPINFER_EXPERTS_KERNEL=x0): the
  // prefill grouped GEMM took V4's batch 22+ (H200: batch 32 19.3 vs 5.9 ms per step).
  static const bool x0 = env().experts_kernel == "x0";
  const int64_t decode_max_slots =
      x0 ? 128
         : std::max<int64_t>(128, std::min<int64_t>(kernels::kExpertsMmaDecodeMaxSlots,
                                                    8 * experts.num_experts()));
  if (!tc_experts && !st_->batch_invariant && slots > decode_max_slots)
    return moe_experts_host_grouped(x, ids, weights, experts, swiglu_limit, out, set);
  // Decode-sized batches: the per-slot weight-only kernel (two weight rows per warp, each x chunk
  // loaded once for both) reads the picked experts at higher bandwidth than the grouped GEMM's
  // one-row tiles (H200, FP4 top-6, batch 1: 229 vs 383 µs with one row per warp).
  // --batch-invariant needs one arithmetic for every slot count: the streaming GEMV experts
  // (their bits depend only on a slot's own row, as the grouped GEMM's do) wherever they apply —
  // faster than the grouped tensor-core GEMM at decode (H200, session 5 profile: 410 vs 1,992 µs
  // per step at batch 1, 8,040 vs 12,776 at batch 16) and, by bytes, at prefill (each expert
  // read once per 4 of its rows). kBiExpertsOnGemv = false: the grouped GEMM for every count.
  constexpr bool kBiExpertsOnGemv = true;
  const bool bi_gemv =
      kBiExpertsOnGemv && E_all <= 1024 &&
      kernels::gemv_supported(t->gate_up.fmt, H, t->gate_up.s.size() > 0, t->gate_up.bc) &&
      kernels::gemv_supported(t->down.fmt, t->down.K, t->down.s.size() > 0, t->down.bc);
  // Session 7: --batch-invariant with DEEPINFER_BI_EXPERTS=mma (the default) runs the tensor-core
  // decode kernel (experts_mma.h) for EVERY slot count where the layout allows it (FP4 with 1×32
  // ue8m0 scales): its bits depend only on a slot's own x row and expert (experts_mma_v2.cuh),
  // and it reads each expert once per 8 of its tokens. Chosen on the layout alone (slots = 1),
  // never on the slot count, so one arithmetic serves every batch.
  static const bool bi_mma_wanted = env().bi_experts == "mma";
  // Whether experts_mma takes projection pt's layout for n slots.
  auto mma_fits = [&](const ProjectionTable& pt, int64_t n) {
    return kernels::experts_mma_supported(pt.fmt, n, E_all, pt.s.size() > 0, pt.scale_f32,
                                          pt.gemv_vec, pt.N, pt.K, pt.br, pt.bc);
  };
  const bool bi_mma = st_->batch_invariant && bi_mma_wanted && E_all <= 1024 &&
                      mma_fits(t->gate_up, 1) && mma_fits(t->down, 1);
  if (bi_mma && (!mma_fits(t->gate_up, slots) || !mma_fits(t->down, slots)))
    return InvalidArgument("moe_experts: " + std::to_string(slots) +
                           " slots exceed the 32-bit indexing of the batch-invariant tensor-core "
                           "experts (split the batch)");
  // Session 20: batches of at least DEEPINFER_EXPERTS_WG slots on experts_wg (experts_wg.h:
  // experts_mma's bits on warpgroup MMA, 32-token tiles; sm_90) for both projections where the
  // layout allows — under --batch-invariant in place of experts_mma (the same bits), in the
  // default mode also above experts_mma's decode range (in place of the grouped GEMM moe_tc).
  static const int64_t wg_min = env().experts_wg;
  auto wg_fits = [&](const ProjectionTable& pt) {
    return kernels::experts_wg_supported(pt.fmt, slots, E_all, pt.s.size() > 0, pt.scale_f32,
                                         pt.gemv_vec, pt.N, pt.K, pt.br, pt.bc);
  };
  const bool wg_layout = wg_min > 0 && slots >= wg_min && wg_fits(t->gate_up) && wg_fits(t->down) &&
                         kernels::experts_wg_device_ok();
  const bool wg_both = wg_layout && (st_->batch_invariant ? bi_mma : env().experts_mma);
  const bool few_slots =
      st_->batch_invariant ? (bi_mma || bi_gemv) : (slots <= decode_max_slots || wg_both);
  DI_RETURN_IF_ERROR(check_tensor("moe_experts", "ids", ids, DType::kI32, {S, k}));
  DI_RETURN_IF_ERROR(check_tensor("moe_experts", "weights", weights, DType::kF32, {S, k}));
  DI_RETURN_IF_ERROR(check_tensor("moe_experts", "out", out, DType::kF32, {S, H}));
  if (S == 0) return OkStatus();
  const int64_t I = t->down.K;
  const ProjectionTable& g = t->gate_up;
  const ProjectionTable& d = t->down;
  if (tc_experts && !few_slots) {
    // Tensor cores: slots grouped by expert on the device (no host wait), one grouped GEMM per
    // projection, outputs in slot order so swiglu and combine_slots are those of the other paths.
    const int64_t E = experts.num_experts();
    // FP4 experts run the v2 kernels (moe_tc.h: x split into bf16 terms once per row, same bits
    // as v1) unless DEEPINFER_CUDA_MOE_TC=v1: with both projections on v2, its tile rows (32 for
    // decode-sized batches, else 64); else v1's (16 / 64; at 64 a projection v2 runs still uses it).
    const int variant = kernels::moe_tc_variant();
    const int v2_rows = kernels::moe_tc_tile_rows(slots, E);
    const bool v2_both =
        variant != 0 &&
        kernels::moe_tc_supported(g.fmt, x.data<float>(), slots, E, H, g.s.size() > 0, g.bc,
                                  v2_rows) &&
        kernels::moe_tc_supported(d.fmt, nullptr /* act: a fresh, aligned buffer */, slots, E, I,
                                  d.s.size() > 0, d.bc, v2_rows);
    const int tile_rows = v2_both ? v2_rows : kernels::experts_tc_tile_rows(slots, E);
    DI_ASSIGN_OR_RETURN(Tensor grp, empty(DType::kI32, {slots + 2 * (E + 1)}));
    int32_t* perm = grp.data<int32_t>();
    int32_t* row_off = perm + slots;
    int32_t* tile_off = row_off + E + 1;
    kernels::moe_group(ids.data<int32_t>(), slots, E, tile_rows, perm, row_off, tile_off,
                       flag_of(st_->error_flag), stream());
    DI_RETURN_IF_ERROR(launched("moe_experts"));
    // One projection: x_in [x_rows, Kp] (slot i reads row i / x_div) -> o [slots, Np].
    auto project = [&](const ProjectionTable& pt, const Tensor& x_in, int64_t x_div, int64_t Np,
                       int64_t Kp, Tensor& o) -> Status {
      const bool v2 = variant != 0 && kernels::moe_tc_supported(pt.fmt, x_in.data<float>(), slots, E,
                                                                Kp, pt.s.size() > 0, pt.bc, tile_rows);
      if (!v2 && tile_rows != 16 && tile_rows != 64)
        return Internal("moe_experts: the v2 expert GEMM rejected a projection it was planned for");
      if (v2) {
        const int64_t x_rows = x_in.dim(0);
        DI_ASSIGN_OR_RETURN(Tensor terms, empty(DType::kBF16, {3, x_rows, Kp}));
        kernels::moe_tc_split_terms(x_in.data<float>(), x_rows, Kp, terms.data<uint16_t>(), stream());
        DI_RETURN_IF_ERROR(launched("moe_experts"));
        kernels::moe_tc_experts(variant, terms.data<uint16_t>(), x_rows, x_div, perm, row_off,
                                tile_off, tile_rows, slots, E, static_cast<const void* const*>(pt.w.data()),
                                static_cast<const void* const*>(pt.s.data()), pt.scale_f32, Np,
                                Kp, pt.br, pt.bc, o.data<float>(), stream());
        return launched("moe_experts");
      }
      kernels::experts_tc(pt.fmt, x_in.data<float>(), x_div, perm, row_off, tile_off, tile_rows,
                          slots, E, static_cast<const void* const*>(pt.w.data()),
                          static_cast<const void* const*>(pt.s.data()), pt.scale_f32, Np, Kp,
                          pt.br, pt.bc, o.data<float>(), stream());
      return launched("moe_experts");
    };
    // Prefill-sized batches (prefill_gemm.h; ≥ prefill::kExpertMinAvgRows slots per expert, not
    // under --batch-invariant, DEEPINFER_PREFILL_GEMM = 2 or 3; off by default: 16×128 prefill of
    // the bench model 12.0k tok/s with it, 17.2k without, H200 session 6): per-expert cuBLAS bf16 GEMMs over
    // weights dequantized exactly to bf16, a chunk of experts at a time, in a workspace of at most
    // prefill::kWorkspaceBytes. The per-expert row counts are needed on the host (cuBLAS takes
    // the GEMM shapes there): one download of moe_group's offsets, i.e. one wait per MoE layer.
    const bool prefill_path = !st_->batch_invariant && prefill::mode() >= 2 &&
                              slots >= prefill::kExpertMinAvgRows * E;
    std::vector<int32_t> row_off_host;
    if (prefill_path) {
      row_off_host.resize(E + 1);
      DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(row_off_host.data(), row_off,
                                              (E + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                              stream()));
      DI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    }
    auto project_any = [&](const ProjectionTable& pt, const Tensor& x_in, int64_t x_div,
                           int64_t Np, int64_t Kp, Tensor& o) -> Status {
      if (prefill_path && !pt.scale_f32 &&  // f32 scales: see linear
          prefill::experts_supported(pt.fmt, x_in.data<float>(), pt.s.size() > 0, Np, Kp, pt.bc)) {
        prefill::ExpertsProblem pp;
        pp.fmt = pt.fmt;
        pp.x = x_in.data<float>();
        pp.x_div = x_div;
        pp.ids = ids.data<int32_t>();
        pp.perm = perm;
        pp.row_off = row_off_host.data();
        pp.slots = slots;
        pp.E = E;
        pp.w_table = static_cast<const void* const*>(pt.w.data());
        pp.s_table = static_cast<const void* const*>(pt.s.data());
        pp.scale_f32 = pt.scale_f32;
        pp.N = Np;
        pp.K = Kp;
        pp.br = pt.br;
        pp.bc = pt.bc;
        pp.out = o.data<float>();
        const prefill::ExpertsPlan plan = prefill::plan_experts(pp, prefill::chunk_experts());
        if (plan.ok) {
          auto ws = empty(DType::kU8, {static_cast<int64_t>(prefill::workspace_request(plan.bytes))});
          if (ws.ok()) {
            DI_RETURN_IF_ERROR(prefill::experts_linear(st_->blas.get(), pp, plan,
                                                       ws.value().raw(), st_->num_sms,
                                                       prefill::mode() == 2, stream()));
            return launched("moe_experts");
          }
        }
      }  // else (layout, or no workspace): the tensor-core grouped GEMM
      return project(pt, x_in, x_div, Np, Kp, o);
    };
    // gu and slot_out zero-filled: the rows of a slot with a bad expert id stay zero.
    DI_ASSIGN_OR_RETURN(Tensor gu, alloc(DType::kF32, {slots, 2 * I}));
    DI_RETURN_IF_ERROR(project_any(g, x, k, 2 * I, H, gu));
    DI_ASSIGN_OR_RETURN(Tensor act, empty(DType::kF32, {slots, I}));
    DI_RETURN_IF_ERROR(swiglu(gu, swiglu_limit, act));
    DI_ASSIGN_OR_RETURN(Tensor slot_out, alloc(DType::kF32, {slots, H}));
    DI_RETURN_IF_ERROR(project_any(d, act, 1, H, I, slot_out));
    return combine_slots_into(slot_out, weights, k, out, set);
  }
  // Decode-sized batches: slots grouped by expert on the device, then the streaming GEMV reads
  // each selected expert's weights once for all the tokens routed to it (gemv_experts.cu).
  const bool gemv_experts =
      E_all <= 1024 && kernels::gemv_supported(g.fmt, H, g.s.size() > 0, g.bc) &&
      kernels::gemv_supported(d.fmt, I, d.s.size() > 0, d.bc);
  if (few_slots && (gemv_experts || bi_mma)) {
    const int64_t E = E_all;
    // Session 6 (issue 7): the tensor-core kernel (experts_mma.h: FP4 with 1×32 ue8m0 scales)
    // where it applies, unless DEEPINFER_EXPERTS_MMA=0 (the GEMV below); under --batch-invariant
    // exactly when bi_mma (DEEPINFER_BI_EXPERTS, chosen above on the layout alone), else the
    // GEMV. Its bits do not depend on the grouping by construction (each output's operations are
    // fixed; this rests on the tensor core summing a column independently of the others, which
    // the bitwise tests of cuda_experts_mma_test check on the device).
    static const bool mma = env().experts_mma;
    const bool on = st_->batch_invariant ? bi_mma : mma;
    const bool mma_g = on && mma_fits(g, slots), mma_d = on && mma_fits(d, slots);
    // Session 7: both projections on experts_mma → moe_group's tiles of 8 rows (one work unit
    // per pass of 8 tokens: a crowded expert is spread over many warps; same bits); else one
    // "tile" per active expert (tile_rows ≥ slots), as the GEMV and session 6's variant need.
    // The kernel variant (experts_mma.h; all give the same bits, so the choice may follow the
    // slot count even under --batch-invariant): at most 8 slots (batch 1) the session-7 variant
    // built for 12 warps per SM (H200 bench_ops, batch 1: gate_up 42.8 vs 45.8 µs, down 25.3 vs
    // 29.8), else session 6's (faster from batch 16 on).
    // Session 8 (DEEPINFER_EXPERTS_KERNEL, env().experts_kernel; session 10: "auto" = "x1",
    // experts_mma_pick_x, below): "c" = per projection the kernel bench_ops measured fastest on the H200 (session 8
    // mid run): v3 (experts_mma_v3.cuh, 12 warps per SM) for gate_up up to 128 slots and for down
    // from 9 to 128 slots (batch 1 gate_up 39.5 vs 42.4 µs; batch 16 gate_up 328.7 vs 350.7, down
    // 177.6 vs 202.0), session 7's 12-warp kernel for down at <= 8 slots (25.4 vs 26.4), session
    // 6's above 128 slots (batch 64: 1305 / 728 vs 1540 / 861 µs) — slower inside the model at
    // batch 16; "a" = v3 everywhere, "b" = v3 at 16 warps per SM everywhere;
    // "s7" = session 7's choice; "v1" = session 6's kernel, "v2" / "v3" = session 7's 16- /
    // 12-warp kernel everywhere. All give the same bits (tested), so under --batch-invariant too
    // the choice may follow the slot count.
    static const std::string experts_kernel = env().experts_kernel;
    auto pick_variant = [&](bool gate_up) {
      if (experts_kernel == "s7") return slots <= 8 ? kernels::kExpertsMmaV2Regs : kernels::kExpertsMmaDefault;
      if (experts_kernel == "v1") return kernels::kExpertsMmaV1;
      if (experts_kernel == "v2") return kernels::kExpertsMmaV2;
      if (experts_kernel == "v3") return kernels::kExpertsMmaV2Regs;
      if (experts_kernel == "a") return kernels::kExpertsMmaV3;
      if (experts_kernel == "b") return kernels::kExpertsMmaV3w16;
      // Session 12 (experts_mma_xb.cuh, same bits; experts_mma_pick_s12): x1 / x2 / x3 = auto with
      // variant 22 / 21 / 19 up to 8 slots (batch-1 candidates); x4 = session 10's pick
      // (experts_mma_pick_x, auto until session 12).
      if (experts_kernel == "x1") return kernels::experts_mma_pick_s12(slots, gate_up ? H : I, 1);
      if (experts_kernel == "x2") return kernels::experts_mma_pick_s12(slots, gate_up ? H : I, 2);
      if (experts_kernel == "x3") return kernels::experts_mma_pick_s12(slots, gate_up ? H : I, 3);
      if (experts_kernel == "x4") return kernels::experts_mma_pick_x(slots, gate_up ? H : I);
      // Session 15: x0 = the session 12-14 auto (variant 15 from 9 to 128 slots; auto now takes
      // 33, the same kernel with pass-balanced warp ranges).
      if (experts_kernel == "x0") return kernels::experts_mma_pick_s12(slots, gate_up ? H : I, 10);
      // Session 13 (helper experts1): x5..x9 = auto with that mode's batch-1 variant up to 8 slots.
      if (experts_kernel.size() == 2 && experts_kernel[0] == 'x' && experts_kernel[1] >= '5' &&
          experts_kernel[1] <= '9')
        return kernels::experts_mma_pick_s12(slots, gate_up ? H : I, experts_kernel[1] - '0');
      if (experts_kernel == "c") {  // session 8's per-projection pick from bench_ops alone
        if (slots > 128) return kernels::kExpertsMmaV1;
        return gate_up || slots > 8 ? kernels::kExpertsMmaV3 : kernels::kExpertsMmaV2Regs;
      }
      // auto: session 10's pick (experts_mma_pick_x; bench_model, checkpoint 2, ms/step at batch
      // 1 / 8 / 16: 1.24 / 2.56 / 4.09 vs 1.31 / 2.67-2.69 / 4.13-4.22 with session 7's choice,
      // which "s7" keeps; --batch-invariant batch 1 / 16: 1.77 / 4.22 vs 1.85 / 4.27); session 12:
      // variant 15 from 9 to 128 slots (experts_mma_pick_s12; checkpoint 1: 1.06 / 2.31 / 3.72 vs
      // 1.05 / 2.41 / 3.86 ms). Same bits.
      return kernels::experts_mma_pick_s12(slots, gate_up ? H : I, 0);
    };
    const int variant_g = pick_variant(true), variant_d = pick_variant(false);
    const bool tiles8 =
        mma_g && mma_d && variant_g != kernels::kExpertsMmaV1 && variant_d != kernels::kExpertsMmaV1;
    const bool wg = wg_both && mma_g && mma_d;  // experts_wg for both projections
    const int64_t tile_rows = wg       ? int64_t{kernels::kExpertsWgTileRows}
                              : tiles8 ? int64_t{kernels::kExpertsMmaTileRows}
                                       : std::max<int64_t>(slots, 1);
    DI_ASSIGN_OR_RETURN(Tensor grp, empty(DType::kI32, {slots + 2 * (E + 1)}));
    int32_t* perm = grp.data<int32_t>();
    int32_t* row_off = perm + slots;
    int32_t* act_off = row_off + E + 1;  // [E+1] tiles before e (tile_rows ≥ slots: active experts)
    kernels::moe_group(ids.data<int32_t>(), slots, E, static_cast<int>(tile_rows), perm, row_off, act_off,
                       flag_of(st_->error_flag), stream());
    DI_RETURN_IF_ERROR(launched("moe_experts"));
    // One projection: session 5's kernel (gemv_experts.cuh: FP4 with scales, the routed experts
    // of V4) where it applies, else session 4's; both give the same bits.
    // DEEPINFER_GEMV_EXPERTS=1 keeps session 4's everywhere (to compare speed).
    static const bool v2 = env().gemv_experts_version != 1;
    auto project = [&](const ProjectionTable& t, bool on_mma, int mma_variant, const float* in,
                       int64_t x_div, int64_t N, int64_t K, float* o,
                       const int32_t* zero_bad_ids) -> Status {
      const auto* w = static_cast<const void* const*>(t.w.data());
      const auto* sc = static_cast<const void* const*>(t.s.data());
      if (on_mma) {
        const int64_t x_rows = (slots + x_div - 1) / x_div;  // [x_rows, K] input rows
        const int64_t ws_floats =
            static_cast<int64_t>((kernels::experts_mma_workspace_bytes(x_rows, K) + 3) / 4);
        DI_ASSIGN_OR_RETURN(Tensor ws, empty(DType::kF32, {ws_floats}));
        if (wg)
          kernels::experts_wg(in, x_rows, x_div, perm, row_off, act_off, slots, E, w, sc, N, K,
                              ws.data<float>(), o, stream(), zero_bad_ids, env().experts_wg_variant);
        else
          kernels::experts_mma(in, x_rows, x_div, perm, row_off, act_off, slots, E, w, sc, N, K,
                               ws.data<float>(), o, stream(), mma_variant, tile_rows, zero_bad_ids);
      } else if (v2 && kernels::gemv_experts_v2_supported(t.fmt, slots, E, t.s.size() > 0, t.gemv_vec,
                                                   N, K, t.bc)) {
        kernels::gemv_experts_v2(in, x_div, perm, row_off, act_off, slots, E, w, sc, t.scale_f32,
                                 N, K, t.br, t.bc, o, stream());
      } else {
        kernels::gemv_experts(t.fmt, in, x_div, perm, row_off, act_off, slots, E, w, sc,
                              t.scale_f32, t.gemv_vec, N, K, t.br, t.bc, o, stream());
      }
      return launched("moe_experts");
    };
    // slot_out: the rows of a slot with a bad expert id must be zero (combine_slots reads every
    // slot) — zero-filled by alloc for the GEMV; experts_mma writes them itself (session 12:
    // zero_bad_ids, in its x split: no memset node per layer in the decode graph). gu needs no
    // fill (session 10: one memset fewer per layer): the rows of such a slot (the only ones no
    // projection writes) go through swiglu into act rows that neither the down projection (it
    // reads grouped slots' rows only; the x split's row exponent is per row) nor combine_slots
    // (it reads slot_out) uses.
    DI_ASSIGN_OR_RETURN(Tensor gu, empty(DType::kF32, {slots, 2 * I}));
    DI_RETURN_IF_ERROR(
        project(g, mma_g, variant_g, x.data<float>(), k, 2 * I, H, gu.data<float>(), nullptr));
    DI_ASSIGN_OR_RETURN(Tensor act, empty(DType::kF32, {slots, I}));
    DI_RETURN_IF_ERROR(swiglu(gu, swiglu_limit, act));
    DI_ASSIGN_OR_RETURN(Tensor slot_out,
                        mma_d ? empty(DType::kF32, {slots, H}) : alloc(DType::kF32, {slots, H}));
    DI_RETURN_IF_ERROR(project(d, mma_d, variant_d, act.data<float>(), 1, H, I,
                               slot_out.data<float>(), ids.data<int32_t>()));
    return combine_slots_into(slot_out, weights, k, out, set);
  }
  DI_ASSIGN_OR_RETURN(Tensor gu, alloc(DType::kF32, {slots, 2 * I}));
  kernels::linear_slots(g.fmt, x.data<float>(), k, ids.data<int32_t>(), slots,
                        experts.num_experts(), static_cast<const void* const*>(g.w.data()),
                        static_cast<const void* const*>(g.s.data()), g.scale_f32, 2 * I, H, g.br,
                        g.bc, gu.data<float>(), flag_of(st_->error_flag), stream());
  DI_RETURN_IF_ERROR(launched("moe_experts"));
  DI_ASSIGN_OR_RETURN(Tensor act, alloc(DType::kF32, {slots, I}));
  DI_RETURN_IF_ERROR(swiglu(gu, swiglu_limit, act));
  DI_ASSIGN_OR_RETURN(Tensor slot_out, alloc(DType::kF32, {slots, H}));
  kernels::linear_slots(d.fmt, act.data<float>(), 1, ids.data<int32_t>(), slots,
                        experts.num_experts(), static_cast<const void* const*>(d.w.data()),
                        static_cast<const void* const*>(d.s.data()), d.scale_f32, H, I, d.br,
                        d.bc, slot_out.data<float>(), flag_of(st_->error_flag), stream());
  DI_RETURN_IF_ERROR(launched("moe_experts"));
  return combine_slots_into(slot_out, weights, k, out, set);
}

Status CudaBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_rms_norm(x, weight, out));
  kernels::rms_norm(x.data<float>(), weight ? weight->data<float>() : nullptr, d.M, d.N, eps,
                    out.data<float>(), stream());
  return launched("rms_norm");
}

Status CudaBackend::rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq,
                         backend::RopeStyle style, float mscale, bool inverse) {
  DI_ASSIGN_OR_RETURN(const auto d, check_rope(x, positions, inv_freq));
  if (d.half > kernels::kRopeMaxHalf)
    return InvalidArgument("rope: rotary width " + std::to_string(2 * d.half) + " exceeds the CUDA kernel's " +
                           std::to_string(2 * kernels::kRopeMaxHalf));
  kernels::rope(x.data<float>(), positions.data<int32_t>(), inv_freq.data<float>(), d.S, d.nh, d.D,
                d.half, style == backend::RopeStyle::kInterleavedTrailing, mscale, inverse,
                stream());
  return launched("rope");
}

Status CudaBackend::rms_norm_rope(const Tensor& x, const Tensor* weight, float eps,
                                  const Tensor& positions, const Tensor& inv_freq,
                                  backend::RopeStyle style, float mscale, Tensor& out) {
  if (x.rank() != 3 || !kernels::rms_norm_rope_supported(x.dim(2)))
    return Backend::rms_norm_rope(x, weight, eps, positions, inv_freq, style, mscale, out);
  const char* op = "rms_norm_rope";
  DI_ASSIGN_OR_RETURN(const auto d, check_rope(x, positions, inv_freq));
  DI_RETURN_IF_ERROR(check_tensor(op, "out", out, DType::kF32, {d.S, d.nh, d.D}));
  if (weight) DI_RETURN_IF_ERROR(check_tensor(op, "weight", *weight, DType::kF32, {d.D}));
  kernels::rms_norm_rope(x.data<float>(), weight ? weight->data<float>() : nullptr,
                         positions.data<int32_t>(), inv_freq.data<float>(), d.S, d.nh, d.D,
                         d.half, eps, style == backend::RopeStyle::kInterleavedTrailing, mscale,
                         out.data<float>(), stream());
  return launched(op);
}

Status CudaBackend::rms_norm_and_rope(const Tensor& a, const Tensor* weight_a, Tensor& out_a,
                                      const Tensor& b, const Tensor* weight_b, float eps,
                                      const Tensor& positions, const Tensor& inv_freq,
                                      backend::RopeStyle style, float mscale, Tensor& out_b) {
  const bool fusable =
      st_->decode_fusion && a.rank() == 2 && b.rank() == 3 && a.dtype() == DType::kF32 &&
      out_a.dtype() == DType::kF32 && (weight_a == nullptr || weight_a->dtype() == DType::kF32) &&
      kernels::rms_norm_rope_supported(b.dim(2)) && a.numel() > 0 && b.numel() > 0 &&
      kernels::rms_norm_scalar_rows(a.data<float>(), weight_a ? weight_a->data<float>() : nullptr,
                                    out_a.data<float>(), a.dim(1));
  if (!fusable)
    return Backend::rms_norm_and_rope(a, weight_a, out_a, b, weight_b, eps, positions, inv_freq,
                                      style, mscale, out_b);
  const char* op = "rms_norm_and_rope";
  DI_ASSIGN_OR_RETURN(const auto da, check_rms_norm(a, weight_a, out_a));
  DI_ASSIGN_OR_RETURN(const auto d, check_rope(b, positions, inv_freq));
  DI_RETURN_IF_ERROR(check_tensor(op, "out_b", out_b, DType::kF32, {d.S, d.nh, d.D}));
  if (weight_b) DI_RETURN_IF_ERROR(check_tensor(op, "weight_b", *weight_b, DType::kF32, {d.D}));
  kernels::rms_norm_and_rope(
      a.data<float>(), weight_a ? weight_a->data<float>() : nullptr, da.M, da.N,
      out_a.data<float>(), b.data<float>(), weight_b ? weight_b->data<float>() : nullptr,
      positions.data<int32_t>(), inv_freq.data<float>(), d.S, d.nh, d.D, d.half, eps,
      style == backend::RopeStyle::kInterleavedTrailing, mscale, out_b.data<float>(), stream());
  return launched(op);
}

Status CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& key_offsets, const Tensor& key_ids,
                              const Tensor* sinks, float scale, Tensor& out, int64_t max_keys) {
  DI_ASSIGN_OR_RETURN(const auto d, check_attention(q, k, v, key_offsets, key_ids, sinks, out));
  const bool kv_shared = k.raw() == v.raw() && d.D == d.Dv;
  if (d.Dv > 1024 || d.D > 1024 || kernels::attention_smem_bytes(d.D, d.Dv, kv_shared) > 200 * 1024)
    return Unimplemented("attention (cuda): head widths " + std::to_string(d.D) + "/" +
                         std::to_string(d.Dv) + " need more shared memory than a block has");
  if (max_keys < 0 || max_keys > d.nnz) max_keys = d.nnz;
  // V4's layout (64·n heads over one shared K = V head of 512): DEEPINFER_CUDA_ATTENTION picks
  // the kernel (attention_fd.h): fd / auto → the split-key tensor-core kernel (attention_fd.cu;
  // its plan cuts each token's keys by (batch, longest list) — under --batch-invariant by the
  // token's own key count only), simt → attention.cu (also every other layout).
  const int requested = kernels::attention_kernel_requested();
  if ((requested == kernels::kAttentionFd || requested == kernels::kAttentionAuto) &&
      kernels::attention_fd_supports(d.nH, d.nKV, d.D, d.Dv, k.raw() == v.raw())) {
    const kernels::AttentionFdPlan plan = kernels::attention_fd_plan(
        d.S, d.nH, max_keys, st_->num_sms, st_->batch_invariant);
    Tensor fd_parts;
    if (plan.parts_floats > 0) {
      DI_ASSIGN_OR_RETURN(fd_parts, empty(DType::kF32, {plan.parts_floats}));
    }
    kernels::attention_fd(q.data<float>(), k.data<float>(), key_offsets.data<int32_t>(),
                          key_ids.data<int32_t>(), d.nnz, sinks ? sinks->data<float>() : nullptr,
                          d.S, d.nH, d.T, scale, out.data<float>(),
                          plan.parts_floats > 0 ? fd_parts.data<float>() : nullptr, plan,
                          flag_of(st_->error_flag), stream());
    return launched("attention");
  }
  const int64_t parts_n = kernels::attention_parts_floats(d.S, d.nH, d.nKV, d.Dv, max_keys,
                                                          st_->num_sms);
  Tensor parts;
  if (parts_n > 0) {
    DI_ASSIGN_OR_RETURN(parts, empty(DType::kF32, {parts_n}));
  }
  kernels::attention(q.data<float>(), k.data<float>(), v.data<float>(),
                     key_offsets.data<int32_t>(), key_ids.data<int32_t>(), d.nnz,
                     sinks ? sinks->data<float>() : nullptr, d.S, d.nH, d.T, d.nKV, d.D, d.Dv,
                     scale, out.data<float>(), parts_n > 0 ? parts.data<float>() : nullptr,
                     max_keys, flag_of(st_->error_flag), stream());
  return launched("attention");
}

Status CudaBackend::softmax_pool(const Tensor& values, const Tensor& scores, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_softmax_pool(values, scores, out));
  kernels::softmax_pool(values.data<float>(), scores.data<float>(), d.n, d.L, d.d,
                        out.data<float>(), stream());
  return launched("softmax_pool");
}

Status CudaBackend::indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& keys,
                                   const Tensor& visible, float weight_scale, float dot_scale,
                                   Tensor& out, const Tensor* key_start) {
  DI_ASSIGN_OR_RETURN(const auto d,
                      check_indexer_scores(q, weights, keys, visible, out, key_start));
  kernels::indexer_scores(q.data<float>(), weights.data<float>(), keys.data<float>(),
                          visible.data<int32_t>(), key_start ? key_start->data<int32_t>() : nullptr,
                          d.S, d.nI, d.cI, d.T, keys.dim(0), weight_scale, dot_scale,
                          out.data<float>(), flag_of(st_->error_flag), stream());
  return launched("indexer_scores");
}

Status CudaBackend::place_ids(const Tensor& src, const Tensor& layout, Tensor& dst) {
  DI_RETURN_IF_ERROR(check_rank("place_ids", "src", src, DType::kI32, 2));
  DI_RETURN_IF_ERROR(check_tensor("place_ids", "layout", layout, DType::kI32, {src.dim(0), 3}));
  DI_RETURN_IF_ERROR(check_rank("place_ids", "dst", dst, DType::kI32, 1));
  kernels::place_ids(src.data<int32_t>(), src.dim(0), src.dim(1), layout.data<int32_t>(),
                     dst.data<int32_t>(), dst.dim(0), flag_of(st_->error_flag), stream());
  return launched("place_ids");
}

Status CudaBackend::scatter_ids(const Tensor& src, const Tensor& map, Tensor& dst) {
  DI_RETURN_IF_ERROR(check_rank("scatter_ids", "src", src, DType::kI32, 1));
  DI_RETURN_IF_ERROR(check_rank("scatter_ids", "map", map, DType::kI32, 2));
  if (map.dim(1) != 2)
    return InvalidArgument("scatter_ids: map must be [n, 2], got " + map.describe());
  DI_RETURN_IF_ERROR(check_rank("scatter_ids", "dst", dst, DType::kI32, 1));
  kernels::scatter_ids(src.data<int32_t>(), src.dim(0), map.data<int32_t>(), map.dim(0),
                       dst.data<int32_t>(), dst.dim(0), flag_of(st_->error_flag), stream());
  return launched("scatter_ids");
}

Status CudaBackend::gather_ids(const Tensor& table, const Tensor& ids, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("gather_ids", "table", table, DType::kI32, 2));
  DI_RETURN_IF_ERROR(check_rank("gather_ids", "ids", ids, DType::kI32, 1));
  DI_RETURN_IF_ERROR(
      check_tensor("gather_ids", "out", out, DType::kI32, {ids.dim(0), table.dim(1)}));
  kernels::gather_ids(table.data<int32_t>(), table.dim(0), table.dim(1), ids.data<int32_t>(),
                      ids.dim(0), out.data<int32_t>(), flag_of(st_->error_flag), stream());
  return launched("gather_ids");
}

Status CudaBackend::topk(const Tensor& scores, int64_t k, Tensor& ids) {
  DI_ASSIGN_OR_RETURN(const auto d, check_topk(scores, k, ids));
  if (d.S * d.T >= (int64_t{1} << 31)) return OutOfRange("topk (cuda): S*T exceeds 2^31");
  const uint64_t need = kernels::topk_workspace_bytes(d.S, d.T);
  if (st_->workspace.size() < need) {
    DI_RETURN_IF_ERROR(st_->stream.synchronize());  // the old workspace may still be in use
    DI_ASSIGN_OR_RETURN(st_->workspace, DeviceBuffer::allocate(need));
  }
  kernels::topk(scores.data<float>(), d.S, d.T, d.k, ids.data<int32_t>(), st_->workspace.data(),
                stream());
  return launched("topk");
}

Status CudaBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* hash_ids,
                              const backend::RouterParams& params, Tensor& ids, Tensor& weights) {
  DI_ASSIGN_OR_RETURN(const auto d, check_moe_route(logits, bias, hash_ids, params, ids, weights));
  if (d.E > 1024) return Unimplemented("moe_route (cuda): more than 1024 experts");
  const int scoring = params.scoring == backend::RouterScoring::kSqrtSoftplus ? 0
                      : params.scoring == backend::RouterScoring::kSigmoid    ? 1
                                                                              : 2;
  kernels::moe_route(logits.data<float>(), bias ? bias->data<float>() : nullptr,
                     hash_ids ? hash_ids->data<int32_t>() : nullptr, d.S, d.E, d.k, scoring,
                     params.routed_scaling_factor, params.renormalize, ids.data<int32_t>(),
                     weights.data<float>(), flag_of(st_->error_flag), stream());
  return launched("moe_route");
}

Status CudaBackend::swiglu(const Tensor& gate_up, float limit, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_swiglu(gate_up, out));
  kernels::swiglu(gate_up.data<float>(), d.M, d.I, limit, out.data<float>(), stream());
  return launched("swiglu");
}

Status CudaBackend::gather_rows(const Tensor& src, const Tensor& ids, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_gather_rows(src, ids, out));
  kernels::gather_rows(src.data<float>(), ids.data<int32_t>(), d.M, d.N, d.H, out.data<float>(),
                       flag_of(st_->error_flag), kernels::kErrGatherId, stream());
  return launched("gather_rows");
}

Status CudaBackend::combine_slots(const Tensor& slot_out, const Tensor& weights, int64_t k,
                                  Tensor& out) {
  return combine_slots_into(slot_out, weights, k, out, /*set=*/false);
}

Status CudaBackend::combine_slots_into(const Tensor& slot_out, const Tensor& weights, int64_t k,
                                       Tensor& out, bool set) {
  if (k < 1 || out.rank() != 2)
    return InvalidArgument("combine_slots: want k >= 1 and out [S, H]; got k = " + std::to_string(k) +
                           ", out " + out.describe());
  const int64_t S = out.dim(0), H = out.dim(1);
  DI_RETURN_IF_ERROR(check_tensor("combine_slots", "slot_out", slot_out, DType::kF32, {S * k, H}));
  if (weights.dtype() != DType::kF32 || weights.numel() != S * k)
    return InvalidArgument("combine_slots: weights must be F32 with S·k = " + std::to_string(S * k) +
                           " elements; got " + weights.describe());
  if (out.dtype() != DType::kF32) return InvalidArgument("combine_slots: out must be F32; got " + out.describe());
  kernels::combine_slots(slot_out.data<float>(), weights.data<float>(), S, k, H, out.data<float>(),
                         stream(), set);
  return launched("combine_slots");
}

Status CudaBackend::scatter_add_rows(const Tensor& src, const Tensor& ids, const Tensor* weights,
                                     Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_scatter_add_rows(src, ids, weights, out));
  kernels::scatter_add_rows(src.data<float>(), ids.data<int32_t>(),
                            weights ? weights->data<float>() : nullptr, d.M, d.N, d.H,
                            out.data<float>(), flag_of(st_->error_flag), stream());
  return launched("scatter_add_rows");
}

Status CudaBackend::hc_coeffs(const Tensor& mix, const Tensor& base, const Tensor& scale,
                              const backend::HcParams& p, Tensor& pre, Tensor* post,
                              Tensor* comb) {
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_coeffs(mix, base, scale, p, pre, post, comb));
  if (d.hc > 16) return Unimplemented("hc_coeffs (cuda): hc > 16 streams");
  kernels::hc_coeffs(mix.data<float>(), base.data<float>(), scale.data<float>(), d.S, d.hc,
                     p.sinkhorn_iters, p.hc_eps, d.head, pre.data<float>(),
                     d.head ? nullptr : post->data<float>(), d.head ? nullptr : comb->data<float>(),
                     stream());
  return launched("hc_coeffs");
}

Status CudaBackend::hc_collapse(const Tensor& x, const Tensor& pre, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_collapse(x, pre, out));
  kernels::hc_collapse(x.data<float>(), pre.data<float>(), d.S, d.hc, d.H, out.data<float>(),
                       stream());
  return launched("hc_collapse");
}

Status CudaBackend::hc_expand(const Tensor& x, const Tensor& y, const Tensor& post,
                              const Tensor& comb, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_expand(x, y, post, comb, out));
  kernels::hc_expand(x.data<float>(), y.data<float>(), post.data<float>(), comb.data<float>(), d.S,
                     d.hc, d.H, out.data<float>(), stream());
  return launched("hc_expand");
}

Status CudaBackend::hc_expand_sum(const Tensor& x, const Tensor& y, const Tensor& y2,
                                  const Tensor& post, const Tensor& comb, Tensor& out) {
  if (!st_->decode_fusion) return Backend::hc_expand_sum(x, y, y2, post, comb, out);
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_expand(x, y, post, comb, out));
  DI_RETURN_IF_ERROR(check_add(y, y2, y));
  kernels::hc_expand(x.data<float>(), y.data<float>(), post.data<float>(), comb.data<float>(), d.S,
                     d.hc, d.H, out.data<float>(), stream(), y2.data<float>());
  return launched("hc_expand_sum");
}

namespace {
// How an mHC site runs. DEEPINFER_CUDA_HC (read once): fused (default) = hc_site.cu's two kernels
// for every S, with PDL; fused_nopdl = the same kernels launched plainly (same bits); fused_s6 =
// session 6's kernels (hyper_connection.cu hc_pre_s6) for S <= kHcPreMaxRows; composed = the base
// implementation (rms_norm → matmul → hc_coeffs → hc_collapse). hc_site gives a token the same
// bits at every S, so --batch-invariant uses it too; the session-6 kernels would switch paths
// (and bits) with the batch size at kHcPreMaxRows, so under --batch-invariant fused_s6 means
// composed for every S. hc > 4 streams: composed.
enum class HcPath { kComposed, kSite, kSiteNoPdl, kS6 };

HcPath hc_path(bool batch_invariant, const Tensor& x, const Tensor& scale,
               const backend::HcParams& p) {
  static const std::string mode = env().cuda_hc;
  const bool head = scale.numel() == 1;
  if (mode == "composed" || x.rank() != 3) return HcPath::kComposed;
  if (mode == "fused_s6")
    return !batch_invariant && x.dim(0) <= CudaBackend::kHcPreMaxRows &&
                   kernels::hc_pre_s6_supported(p.hc, head)
               ? HcPath::kS6
               : HcPath::kComposed;
  if (!kernels::hc_site_supported(p.hc, head)) return HcPath::kComposed;
  // Without --batch-invariant, sites of more tokens than this take the composed path: faster
  // there on the H200 (session 7 bench_ops, S = 2048: hc_expand_pre 513 µs composed vs 858 fused,
  // hc_pre site 243 vs 264; at S = 16 fused wins 16.4 vs 34.1). --batch-invariant keeps one path
  // (the fused one) for every S.
  if (!batch_invariant && x.dim(0) > CudaBackend::kHcSiteMaxRows) return HcPath::kComposed;
  return mode == "fused_nopdl" ? HcPath::kSiteNoPdl : HcPath::kSite;
}

bool hc_fused(bool batch_invariant, const Tensor& x, const Tensor& scale,
              const backend::HcParams& p) {
  return hc_path(batch_invariant, x, scale, p) != HcPath::kComposed;
}

// hc_pre's arguments (backend.h); S, hc, H of the streams.
StatusOr<StreamDims> check_hc_pre(const Tensor& x, const Tensor& fn, const Tensor& base,
                                  const Tensor& scale, const backend::HcParams& p,
                                  const Tensor* post, const Tensor* comb,
                                  const Tensor& collapsed) {
  const char* op = "hc_pre";
  DI_RETURN_IF_ERROR(check_rank(op, "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), hc = x.dim(1), H = x.dim(2);
  const bool head = scale.numel() == 1;
  if (hc != p.hc || p.sinkhorn_iters < 1)
    return InvalidArgument("hc_pre: x " + x.describe() + " has " + std::to_string(hc) +
                           " streams, params.hc is " + std::to_string(p.hc) +
                           " (sinkhorn_iters " + std::to_string(p.sinkhorn_iters) + ", need >= 1)");
  const int64_t N = head ? hc : (2 + hc) * hc;
  DI_RETURN_IF_ERROR(check_tensor(op, "fn", fn, DType::kF32, {N, hc * H}));
  DI_RETURN_IF_ERROR(check_tensor(op, "base", base, DType::kF32, {N}));
  DI_RETURN_IF_ERROR(check_tensor(op, "scale", scale, DType::kF32, {head ? 1 : 3}));
  DI_RETURN_IF_ERROR(check_tensor(op, "out", collapsed, DType::kF32, {S, H}));
  if (!head) {
    if (!post || !comb) return InvalidArgument("hc_pre: post and comb are required with scale [3]");
    DI_RETURN_IF_ERROR(check_tensor(op, "post", *post, DType::kF32, {S, hc}));
    DI_RETURN_IF_ERROR(check_tensor(op, "comb", *comb, DType::kF32, {S, hc, hc}));
  }
  return StreamDims{S, hc, H};
}
}  // namespace

Status CudaBackend::hc_pre_fused(const Tensor& x, const Tensor& fn, const Tensor& base,
                                 const Tensor& scale, const backend::HcParams& p, float norm_eps,
                                 Tensor* post, Tensor* comb, Tensor& collapsed,
                                 const kernels::HcExpandIn* expand,
                                 const kernels::HcSiteNorm* norm) {
  DI_ASSIGN_OR_RETURN(const auto d, check_hc_pre(x, fn, base, scale, p, post, comb, collapsed));
  if (d.S == 0 || d.H == 0) return OkStatus();
  const bool head = scale.numel() == 1;
  const int64_t N = head ? d.hc : (2 + d.hc) * d.hc;
  float* pp = head ? nullptr : post->data<float>();
  float* pc = head ? nullptr : comb->data<float>();
  const HcPath path = hc_path(st_->batch_invariant, x, scale, p);
  if (path == HcPath::kS6) {
    DI_ASSIGN_OR_RETURN(Tensor part,
                        empty(DType::kF32, {kernels::hc_pre_s6_chunks(d.hc * d.H), d.S, N + 1}));
    kernels::hc_pre_s6(x.data<float>(), fn.data<float>(), base.data<float>(), scale.data<float>(),
                       d.S, d.hc, d.H, p.sinkhorn_iters, p.hc_eps, norm_eps, head,
                       part.data<float>(), pp, pc, collapsed.data<float>(), stream(), expand);
    return launched(expand ? "hc_expand_pre (s6)" : "hc_pre (s6)");
  }
  const auto mode = kernels::HcSiteMode::kAuto;
  DI_ASSIGN_OR_RETURN(
      Tensor part,
      empty(DType::kF32, {kernels::hc_site_scratch_floats(d.S, d.hc, d.H, head, mode)}));
  kernels::hc_site(x.data<float>(), fn.data<float>(), base.data<float>(), scale.data<float>(), d.S,
                   d.hc, d.H, p.sinkhorn_iters, p.hc_eps, norm_eps, head, part.data<float>(), pp,
                   pc, collapsed.data<float>(), stream(), expand, path == HcPath::kSite, mode,
                   norm);
  if (norm != nullptr) return launched(expand ? "hc_expand_pre_norm" : "hc_pre_norm");
  return launched(expand ? "hc_expand_pre" : "hc_pre");
}

bool CudaBackend::hc_norm_fused(const Tensor& x, const Tensor& scale,
                                const backend::HcParams& p) const {
  if (!st_->decode_fusion) return false;
  const HcPath path = hc_path(st_->batch_invariant, x, scale, p);
  return path == HcPath::kSite || path == HcPath::kSiteNoPdl;
}

Status CudaBackend::hc_pre(const Tensor& x, const Tensor& fn, const Tensor& base,
                           const Tensor& scale, const backend::HcParams& p, float norm_eps,
                           Tensor* post, Tensor* comb, Tensor& collapsed) {
  if (!hc_fused(st_->batch_invariant, x, scale, p))
    return Backend::hc_pre(x, fn, base, scale, p, norm_eps, post, comb, collapsed);
  return hc_pre_fused(x, fn, base, scale, p, norm_eps, post, comb, collapsed, nullptr);
}

Status CudaBackend::hc_expand_pre(const Tensor& x_prev, const Tensor& y, const Tensor& post_prev,
                                  const Tensor& comb_prev, Tensor& x, const Tensor& fn,
                                  const Tensor& base, const Tensor& scale,
                                  const backend::HcParams& p, float norm_eps, Tensor* post,
                                  Tensor* comb, Tensor& collapsed) {
  if (!hc_fused(st_->batch_invariant, x, scale, p))
    return Backend::hc_expand_pre(x_prev, y, post_prev, comb_prev, x, fn, base, scale, p,
                                  norm_eps, post, comb, collapsed);
  DI_RETURN_IF_ERROR(check_hc_expand(x_prev, y, post_prev, comb_prev, x).status());
  const kernels::HcExpandIn ex{x_prev.data<float>(), y.data<float>(), post_prev.data<float>(),
                               comb_prev.data<float>(), x.data<float>()};
  return hc_pre_fused(x, fn, base, scale, p, norm_eps, post, comb, collapsed, &ex);
}

Status CudaBackend::hc_pre_norm(const Tensor& x, const Tensor& fn, const Tensor& base,
                                const Tensor& scale, const backend::HcParams& p, float norm_eps,
                                Tensor* post, Tensor* comb, Tensor& collapsed, const Tensor* weight,
                                float eps, Tensor& out) {
  if (!hc_norm_fused(x, scale, p))
    return Backend::hc_pre_norm(x, fn, base, scale, p, norm_eps, post, comb, collapsed, weight, eps,
                                out);
  DI_RETURN_IF_ERROR(check_rms_norm(collapsed, weight, out).status());
  const kernels::HcSiteNorm nm{weight ? weight->data<float>() : nullptr, eps, out.data<float>()};
  return hc_pre_fused(x, fn, base, scale, p, norm_eps, post, comb, collapsed, nullptr, &nm);
}

Status CudaBackend::hc_expand_pre_norm(const Tensor& x_prev, const Tensor& y, const Tensor* y2,
                                       const Tensor& post_prev, const Tensor& comb_prev, Tensor& x,
                                       const Tensor& fn, const Tensor& base, const Tensor& scale,
                                       const backend::HcParams& p, float norm_eps, Tensor* post,
                                       Tensor* comb, Tensor& collapsed, const Tensor* weight,
                                       float eps, Tensor& out) {
  if (!hc_norm_fused(x, scale, p))
    return Backend::hc_expand_pre_norm(x_prev, y, y2, post_prev, comb_prev, x, fn, base, scale, p,
                                       norm_eps, post, comb, collapsed, weight, eps, out);
  DI_RETURN_IF_ERROR(check_hc_expand(x_prev, y, post_prev, comb_prev, x).status());
  if (y2 != nullptr) DI_RETURN_IF_ERROR(check_add(y, *y2, y));
  DI_RETURN_IF_ERROR(check_rms_norm(collapsed, weight, out).status());
  kernels::HcExpandIn ex{x_prev.data<float>(), y.data<float>(), post_prev.data<float>(),
                         comb_prev.data<float>(), x.data<float>()};
  ex.y2 = y2 != nullptr ? y2->data<float>() : nullptr;
  const kernels::HcSiteNorm nm{weight ? weight->data<float>() : nullptr, eps, out.data<float>()};
  return hc_pre_fused(x, fn, base, scale, p, norm_eps, post, comb, collapsed, &ex, &nm);
}

Status CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  DI_RETURN_IF_ERROR(check_add(a, b, out));
  kernels::add(a.data<float>(), b.data<float>(), a.numel(), out.data<float>(), stream());
  return launched("add");
}

Status CudaBackend::copy(const Tensor& src, Tensor& dst) {
  DI_RETURN_IF_ERROR(check_copy(src, dst));
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(),
                                          cudaMemcpyDeviceToDevice, stream()));
  return OkStatus();
}

// One launch per kCopyManyMax pairs (copy_many.cu) instead of a cudaMemcpyAsync per pair; a
// single pair of over 4 MiB stays a memcpy. A small single pair is a kernel too (session 14):
// a memcpy node between two kernels breaks their programmatic launch overlap (the decode step's
// window write-back after attention left ~1-2 µs of idle device on each side).
Status CudaBackend::copy_many(std::span<const Tensor> srcs, std::span<Tensor> dsts) {
  if (srcs.size() != dsts.size())
    return InvalidArgument("copy_many: " + std::to_string(srcs.size()) + " sources for " +
                           std::to_string(dsts.size()) + " destinations");
  if (srcs.size() == 1 && srcs[0].nbytes() > (uint64_t{4} << 20)) return copy(srcs[0], dsts[0]);
  kernels::CopyManyTable t;
  for (size_t i = 0; i < srcs.size(); ++i) {
    DI_RETURN_IF_ERROR(check_copy(srcs[i], dsts[i]));
    const uint64_t bytes = srcs[i].nbytes();
    if (bytes == 0) continue;
    if (bytes % 4 != 0) {  // sub-word dtypes: one memcpy for this pair
      DI_RETURN_IF_ERROR(copy(srcs[i], dsts[i]));
      continue;
    }
    t.src[t.n] = srcs[i].raw();
    t.dst[t.n] = dsts[i].raw();
    t.bytes[t.n] = static_cast<int64_t>(bytes);
    if (++t.n == kernels::kCopyManyMax) {
      kernels::copy_many(t, stream());
      DI_RETURN_IF_ERROR(launched("copy_many"));
      t.n = 0;
    }
  }
  kernels::copy_many(t, stream());
  return launched("copy_many");
}

// The row parameters go to the device as they are: same layout on both sides.
static_assert(sizeof(kernels::SampleRow) == sizeof(backend::SampleRowParams) &&
                  offsetof(kernels::SampleRow, seed) == offsetof(backend::SampleRowParams, seed) &&
                  offsetof(kernels::SampleRow, output_position) ==
                      offsetof(backend::SampleRowParams, output_position),
              "kernels::SampleRow must mirror backend::SampleRowParams");

Status CudaBackend::sample(const Tensor& logits, std::span<const backend::SampleRowParams> rows,
                           Tensor& ids) {
  DI_ASSIGN_OR_RETURN(const auto d, check_sample(logits, rows, ids));
  if (d.S == 0) return OkStatus();
  const auto bytes = static_cast<int64_t>(rows.size_bytes());
  DI_ASSIGN_OR_RETURN(Tensor params, empty(DType::kU8, {bytes}));
  // Pageable source: staged before the call returns (as upload()), so `rows` may go away.
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params.raw(), rows.data(), rows.size_bytes(),
                                          cudaMemcpyHostToDevice, stream()));
  const auto scratch_bytes = static_cast<int64_t>(kernels::sample_rows_scratch_bytes(d.S));
  DI_ASSIGN_OR_RETURN(Tensor scratch, empty(DType::kU8, {scratch_bytes}));
  kernels::sample_rows(logits.data<float>(), d.S, d.V,
                       static_cast<const kernels::SampleRow*>(params.raw()), ids.data<int32_t>(),
                       scratch.raw(), stream());
  return launched("sample");
}

}  // namespace deepinfer::cuda
