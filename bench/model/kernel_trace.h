// A timeline of the GPU work of a few decode steps at the clocks the model really runs at (issue 7,
// session 12): CUPTI activity records of every kernel (CUDA graph nodes one by one) and memcpy,
// summarised as the busy / idle time per step, the exclusive time per kernel name and the largest
// idle gaps. Nsight Compute (scripts/gpu_profile.sh) serialises kernels, locks base clocks and
// flushes L2, so its per-kernel sum is not a step; this is.
//
// CUPTI is loaded with dlopen when a trace is asked for (DEEPINFER_CUPTI_LIB names the library;
// else libcupti.so.13 from the loader path or the CUDA toolkit), so bench_model runs on machines
// without it.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

namespace deepinfer::bench {

class KernelTrace {
 public:
  // Loads CUPTI and enables kernel and memcpy records — call it before the model is loaded, so
  // that the CUDA graphs captured later are traced node by node. Null with a reason in `why`
  // when CUPTI cannot be loaded or this build has no CUDA.
  static std::unique_ptr<KernelTrace> open(std::string& why);
  virtual ~KernelTrace() = default;
  // The window summarised: records that start after mark() and end before end(). begin() drops
  // what was recorded so far (a flush, which stalls the host: call mark() a step later); end()
  // flushes — call it once the device has finished the window's work.
  virtual bool begin(std::string& why) = 0;
  virtual bool mark(std::string& why) = 0;
  virtual bool end(std::string& why) = 0;
  // The summary of the window as `steps` decode steps, the `top` largest rows per table; `csv`
  // (may be null) gets every record of the window: kind, name, start µs, end µs (relative to
  // the first record), graph node id.
  virtual void print(std::FILE* out, int steps, int top, std::FILE* csv) const = 0;
  // A host-side instant (CUPTI's clock) in the CSV as a "note" row: where the host is in a step.
  // With DEEPINFER_TRACE_API=1 the CSV also has the CUDA runtime calls ("api" rows).
  virtual void note(const char* label) = 0;
};

}  // namespace deepinfer::bench
