#include "kernel_trace.h"

#ifdef DEEPINFER_TRACE_CUPTI

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace deepinfer::bench {

namespace {

struct Record {
  bool kernel = true;  // else a memcpy
  std::string name;
  uint64_t start = 0, end = 0, node = 0, bytes = 0;
};

// The CUPTI entry points bench_model uses, resolved from the dlopen'ed library.
struct Cupti {
  void* lib = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
  CUptiResult (*callback_name)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;  // optional

  std::string error(const char* what, CUptiResult r) const {
    const char* s = nullptr;
    if (result_string != nullptr) result_string(r, &s);
    return std::string(what) + ": " + (s != nullptr ? s : "CUPTI error " + std::to_string(int(r)));
  }
};

// "void deepinfer::cuda::kernels::(anonymous namespace)::rms_norm_kernel<512, 4>(float const*, …)"
// → "rms_norm_kernel<512, 4>".
std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  // Drop the parameter list: the last top-level '(' (templates may hold parentheses).
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<')
      ++depth;
    else if (c == '>')
      --depth;
    else if (c == '(' && depth == 0 && i > 0 && s.compare(i, 21, "(anonymous namespace)") != 0) {
      s.resize(i);
      break;
    }
  }
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  for (const char* drop :
       {"(anonymous namespace)::", "deepinfer::cuda::kernels::", "deepinfer::cuda::"}) {
    for (size_t p; (p = s.find(drop)) != std::string::npos;) s.erase(p, std::strlen(drop));
  }
  return s;
}

class CuptiTrace;
CuptiTrace* g_trace = nullptr;  // the one live trace (CUPTI's buffer callbacks are plain functions)

class CuptiTrace final : public KernelTrace {
 public:
  explicit CuptiTrace(Cupti api) : api_(api) {}
  ~CuptiTrace() override {
    if (api_.disable != nullptr) {
      api_.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      api_.disable(CUPTI_ACTIVITY_KIND_MEMCPY);
      api_.disable(CUPTI_ACTIVITY_KIND_MEMSET);
      if (host_api_) api_.disable(CUPTI_ACTIVITY_KIND_RUNTIME);
      api_.flush_all(1);
    }
    g_trace = nullptr;
  }

  bool enable(std::string& why) {
    g_trace = this;
    CUptiResult r = api_.register_callbacks(&CuptiTrace::on_request, &CuptiTrace::on_complete);
    if (r != CUPTI_SUCCESS) return why = api_.error("cuptiActivityRegisterCallbacks", r), false;
    for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                 CUPTI_ACTIVITY_KIND_MEMSET}) {
      r = api_.enable(k);
      if (r != CUPTI_SUCCESS) return why = api_.error("cuptiActivityEnable", r), false;
    }
    // DEEPINFER_TRACE_API=1: the CUDA runtime calls too (CSV rows "api"; they slow the host).
    if (const char* e = std::getenv("DEEPINFER_TRACE_API");
        e != nullptr && std::strcmp(e, "1") == 0) {
      r = api_.enable(CUPTI_ACTIVITY_KIND_RUNTIME);
      if (r != CUPTI_SUCCESS) return why = api_.error("cuptiActivityEnable(RUNTIME)", r), false;
      host_api_ = true;
    }
    return true;
  }

  void note(const char* label) override {
    uint64_t t = 0;
    if (api_.timestamp(&t) != CUPTI_SUCCESS) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (t >= t_begin_ && t <= t_end_) host_.push_back({false, label, t, t, 0, 0});
  }

  bool begin(std::string& why) override {
    // Records so far are flushed (and dropped) first; the flush stalls the host for a while, so
    // the window itself opens at mark(), a step later.
    if (CUptiResult r = api_.flush_all(1); r != CUPTI_SUCCESS)
      return why = api_.error("cuptiActivityFlushAll", r), false;
    std::lock_guard<std::mutex> lock(mu_);
    recs_.clear();
    host_.clear();
    t_begin_ = 0;
    t_end_ = UINT64_MAX;
    return true;
  }

  bool mark(std::string& why) override {
    uint64_t t = 0;
    if (CUptiResult r = api_.timestamp(&t); r != CUPTI_SUCCESS)
      return why = api_.error("cuptiGetTimestamp", r), false;
    std::lock_guard<std::mutex> lock(mu_);
    t_begin_ = t;
    std::erase_if(recs_, [&](const Record& x) { return x.start < t_begin_; });
    std::erase_if(host_, [&](const Record& x) { return x.start < t_begin_; });
    return true;
  }

  bool end(std::string& why) override {
    uint64_t t = 0;
    if (CUptiResult r = api_.timestamp(&t); r != CUPTI_SUCCESS)
      return why = api_.error("cuptiGetTimestamp", r), false;
    if (CUptiResult r = api_.flush_all(1); r != CUPTI_SUCCESS)
      return why = api_.error("cuptiActivityFlushAll", r), false;
    std::lock_guard<std::mutex> lock(mu_);
    t_end_ = t;
    std::erase_if(recs_, [&](const Record& x) { return x.start < t_begin_ || x.end > t_end_; });
    std::erase_if(host_, [&](const Record& x) { return x.start < t_begin_ || x.end > t_end_; });
    return true;
  }

  void print(std::FILE* out, int steps, int top, std::FILE* csv) const override;

 private:
  static void on_request(uint8_t** buffer, size_t* size, size_t* max_records) {
    constexpr size_t kBytes = 8u << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
    *size = *buffer != nullptr ? kBytes : 0;
    *max_records = 0;
  }
  static void on_complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    if (g_trace != nullptr) g_trace->take(buffer, valid);
    std::free(buffer);
  }
  void take(uint8_t* buffer, size_t valid) {
    std::lock_guard<std::mutex> lock(mu_);
    CUpti_Activity* a = nullptr;
    while (api_.next_record(buffer, valid, &a) == CUPTI_SUCCESS) {
      Record rec;
      if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
          a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
        auto [it, fresh] = names_.try_emplace(k->name);  // demangling every record is slow
        if (fresh) it->second = short_name(k->name);
        rec = {true, it->second, k->start, k->end, k->graphNodeId, 0};
      } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
        const char* dir = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "memcpy HtoD"
                          : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "memcpy DtoH"
                          : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "memcpy DtoD"
                                                                           : "memcpy other";
        rec = {false, dir, m->start, m->end, m->graphNodeId, m->bytes};
      } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
        rec = {false, "memset", m->start, m->end, m->graphNodeId, m->bytes};
      } else if (a->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
        const auto* f = reinterpret_cast<const CUpti_ActivityAPI*>(a);
        const char* nm = nullptr;
        if (api_.callback_name != nullptr)
          api_.callback_name(CUPTI_CB_DOMAIN_RUNTIME_API, f->cbid, &nm);
        Record h{false,    nm != nullptr ? nm : "runtime " + std::to_string(f->cbid),
                 f->start, f->end,
                 0,        0};
        if (h.start >= t_begin_ && h.end <= t_end_) host_.push_back(std::move(h));
        continue;
      } else {
        continue;
      }
      if (rec.start >= t_begin_ && rec.end <= t_end_) recs_.push_back(std::move(rec));
    }
  }

  Cupti api_;
  mutable std::mutex mu_;
  std::vector<Record> recs_;
  std::vector<Record> host_;  // runtime calls and note()s: CSV only, not GPU time
  bool host_api_ = false;
  std::unordered_map<const char*, std::string> names_;  // CUPTI's name pointer → short name
  uint64_t t_begin_ = UINT64_MAX, t_end_ = UINT64_MAX;  // nothing is kept before begin()
};

void CuptiTrace::print(std::FILE* out, int steps, int top, std::FILE* csv) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Record> r = recs_;
  if (r.empty()) {
    std::fprintf(out, "trace: no records in the window\n");
    return;
  }
  std::sort(r.begin(), r.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
  const double n = std::max(steps, 1);
  const uint64_t t0 = r.front().start;
  uint64_t t1 = 0;
  for (const Record& x : r) t1 = std::max(t1, x.end);
  // Exclusive time: each instant of the union of the records' intervals counts once, for the
  // record that covered it first (a PDL kernel that starts early and waits shows its own time only
  // once its predecessor has ended). A gap: an instant no record covers; it is charged to the pair
  // (last record to end before it → record that starts after it).
  struct Row {
    int count = 0;
    double incl = 0, excl = 0;
    uint64_t bytes = 0;
  };
  struct Gap {
    int count = 0;
    double total = 0;
  };
  std::map<std::string, Row> rows;
  std::map<std::string, Gap> gaps;
  int hist_count[4] = {0, 0, 0, 0};
  double hist_total[4] = {0, 0, 0, 0};
  uint64_t cover = r.front().start;
  std::string last = "(start)";
  double busy = 0, kernels = 0, host_turn = 0;
  for (const Record& x : r) {
    if (x.start > cover) {
      const double g = (x.start - cover) * 1e-3;  // µs
      Gap& gp = gaps[last + "  ->  " + x.name];
      ++gp.count, gp.total += g;
      const int b = g < 1 ? 0 : g < 3 ? 1 : g < 10 ? 2 : 3;
      ++hist_count[b], hist_total[b] += g;
      if (last == "memcpy DtoH") host_turn += g;
    }
    const double excl =
        x.end > std::max(x.start, cover) ? (x.end - std::max(x.start, cover)) * 1e-3 : 0.0;
    Row& row = rows[x.name];
    ++row.count, row.incl += (x.end - x.start) * 1e-3, row.excl += excl, row.bytes += x.bytes;
    busy += excl;
    kernels += x.kernel;
    if (x.end > cover) cover = x.end, last = x.name;
    if (csv != nullptr)
      std::fprintf(csv, "%s,\"%s\",%.3f,%.3f,%llu\n", x.kernel ? "kernel" : "memcpy",
                   x.name.c_str(), (x.start - t0) * 1e-3, (x.end - t0) * 1e-3,
                   static_cast<unsigned long long>(x.node));
  }
  if (csv != nullptr)
    for (const Record& h : host_)
      std::fprintf(csv, "%s,\"%s\",%.3f,%.3f,0\n", h.end > h.start ? "api" : "note", h.name.c_str(),
                   (static_cast<double>(h.start) - static_cast<double>(t0)) * 1e-3,
                   (static_cast<double>(h.end) - static_cast<double>(t0)) * 1e-3);
  const double span = (t1 - t0) * 1e-3;
  std::fprintf(out,
               "trace: %d steps, per step: span %.1f us, GPU busy %.1f us (%.1f %%), idle %.1f us, "
               "%.1f kernels, %.1f other records\n",
               steps, span / n, busy / n, 100.0 * busy / span, (span - busy) / n, kernels / n,
               (r.size() - kernels) / n);
  std::fprintf(
      out,
      "trace: of the idle time, %.1f us per step follow a device-to-host copy (the host's turn "
      "between steps, e.g. the sampled ids)\n",
      host_turn / n);
  const char* bucket[4] = {"< 1 us", "1-3 us", "3-10 us", ">= 10 us"};
  std::fprintf(out, "trace: idle gaps per step by length:");
  for (int b = 0; b < 4; ++b)
    std::fprintf(out, "  %s: %.1f gaps, %.1f us;", bucket[b], hist_count[b] / n, hist_total[b] / n);
  std::fprintf(out, "\n");
  std::vector<std::pair<std::string, Row>> by(rows.begin(), rows.end());
  std::sort(by.begin(), by.end(),
            [](const auto& a, const auto& b) { return a.second.excl > b.second.excl; });
  std::fprintf(
      out, "trace: per name, per step — exclusive us (share of busy), launches, inclusive us\n");
  for (int i = 0; i < static_cast<int>(by.size()) && i < top; ++i) {
    const Row& w = by[i].second;
    std::fprintf(
        out, "  %9.1f us %5.1f %%  x %5.1f  incl %9.1f us%s  %s\n", w.excl / n,
        100.0 * w.excl / busy, w.count / n, w.incl / n,
        w.bytes ? (" (" + std::to_string(w.bytes / static_cast<uint64_t>(n)) + " B)").c_str() : "",
        by[i].first.c_str());
  }
  std::vector<std::pair<std::string, Gap>> gs(gaps.begin(), gaps.end());
  std::sort(gs.begin(), gs.end(),
            [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  std::fprintf(out, "trace: largest idle gaps per step (after -> before)\n");
  for (int i = 0; i < static_cast<int>(gs.size()) && i < top; ++i)
    std::fprintf(out, "  %9.1f us  x %5.1f  %s\n", gs[i].second.total / n, gs[i].second.count / n,
                 gs[i].first.c_str());
}

}  // namespace

std::unique_ptr<KernelTrace> KernelTrace::open(std::string& why) {
  if (g_trace != nullptr) return why = "a trace is already open", nullptr;
  std::vector<std::string> names;
  if (const char* p = std::getenv("DEEPINFER_CUPTI_LIB")) names.push_back(p);
  for (const char* p :
       {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so.13",
        "/usr/local/cuda/lib/libcupti.so.13", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"})
    names.push_back(p);
  Cupti api;
  for (const std::string& n : names)
    if ((api.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  if (api.lib == nullptr)
    return why = "CUPTI not found (set DEEPINFER_CUPTI_LIB): " + std::string(dlerror()), nullptr;
  auto sym = [&](const char* s, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api.lib, s));
    return fn != nullptr;
  };
  if (!sym("cuptiActivityRegisterCallbacks", api.register_callbacks) ||
      !sym("cuptiActivityEnable", api.enable) || !sym("cuptiActivityDisable", api.disable) ||
      !sym("cuptiActivityFlushAll", api.flush_all) ||
      !sym("cuptiActivityGetNextRecord", api.next_record) ||
      !sym("cuptiGetTimestamp", api.timestamp) || !sym("cuptiGetResultString", api.result_string))
    return why = "CUPTI library lacks an entry point bench_model needs", nullptr;
  sym("cuptiGetCallbackName", api.callback_name);
  auto t = std::make_unique<CuptiTrace>(api);
  if (!t->enable(why)) return nullptr;
  return t;
}

}  // namespace deepinfer::bench

#else  // no CUDA in this build

namespace deepinfer::bench {
std::unique_ptr<KernelTrace> KernelTrace::open(std::string& why) {
  why = "this build has no CUDA backend";
  return nullptr;
}
}  // namespace deepinfer::bench

#endif
