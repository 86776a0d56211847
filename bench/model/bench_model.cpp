// Prefill and decode throughput of the model library (no engine): per model directory and batch
// size B, one forward prefilling B sequences of N pseudo-random token ids, then `decode` greedy
// steps of B tokens (one per sequence) through the sequence states; best of `reps` runs.
//
//   build/bench/model/bench_model [--device cpu|cpu-reference|cuda] [--batch 1,16]
//       [--prefill N] [--decode N] [--reps R] [--threads T] [--batch-invariant]
//       [--enforce-eager] [--no-feed] [--trace N [--trace-csv PREFIX]] [dir ...]
//
// Defaults: CPU, batch 1, the fixtures under tests/data (run from the repository root).
// On a device backend the greedy pick runs on the device, as in the engine (logits stay in device
// memory, `Backend::sample` with temperature 0, B ids downloaded); `--host-argmax` downloads the
// [B, V] logits and takes the argmax on the host instead (what sessions 2–5 measured).
// Decode steps are fed as in the engine (session 14; docs/engine.md "Token ids on the device"):
// step i+1 is queued with its tokens taken from step i's picked ids on the device, and only then
// does the host wait for step i's ids (download_async). `--no-feed` waits for each step's ids
// before queueing the next (what sessions 6–13 measured).
// CUDA decode steps replay captured CUDA graphs unless --enforce-eager (the first rep captures;
// the best rep is reported).
// --trace N: after the timed reps, N more decode steps per batch size under CUPTI (kernel_trace.h):
// GPU busy / idle per step, exclusive time per kernel at the clocks the model runs at, the largest
// idle gaps; --trace-csv PREFIX writes every record to PREFIX_b<B>.csv. CUPTI is enabled from the
// start (graphs must be captured under it), so the timed reps of a --trace run include its cost.
// --trace-prefill: after the timed reps, one more prefill forward (and its pick) per batch size
// under CUPTI, summarised as one step (the kernel table of a prefill); with --trace N as well, the
// decode window follows it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/make_backend.h"
#include "kernel_trace.h"
#include "model/model.h"

using namespace deepinfer;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int argmax(const float* row, int64_t V) {
  return static_cast<int>(std::max_element(row, row + V) - row);
}

}  // namespace

int main(int argc, char** argv) {
  int prefill = 128, decode = 64, threads = 0, reps = 3, trace_steps = 0;
  bool trace_prefill = false;
  std::string trace_csv;
  bool batch_invariant = false, fp8_activations = false, host_argmax = false, eager = false,
       no_feed = false;
  std::string device = "cpu";
  std::vector<int> batches = {1};
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--prefill" && i + 1 < argc) prefill = std::atoi(argv[++i]);
    else if (a == "--decode" && i + 1 < argc) decode = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a == "--reference") device = "cpu-reference";
    else if (a == "--batch-invariant") batch_invariant = true;
    else if (a == "--fp8-activations") fp8_activations = true;
    else if (a == "--enforce-eager") eager = true;
    else if (a == "--host-argmax") host_argmax = true;
    else if (a == "--no-feed")
      no_feed = true;
    else if (a == "--trace" && i + 1 < argc) trace_steps = std::atoi(argv[++i]);
    else if (a == "--trace-csv" && i + 1 < argc) trace_csv = argv[++i];
    else if (a == "--trace-prefill") trace_prefill = true;
    else if (a == "--batch" && i + 1 < argc) {
      batches.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p < list.size();) {
        const size_t c = list.find(',', p);
        batches.push_back(std::atoi(list.substr(p, c - p).c_str()));
        if (c == std::string::npos) break;
        p = c + 1;
      }
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: bench_model [--device D] [--batch 1,16] [--prefill N] [--decode N] [--reps R] "
          "[--threads T] [--batch-invariant] [--fp8-activations] [--host-argmax] [--enforce-eager] "
          "[--no-feed] "
          "[--trace N] [--trace-prefill] [--trace-csv PREFIX] [dir ...]\n");
      return 0;
    } else dirs.push_back(a);
  }
  for (int b : batches)
    if (b < 1) { std::printf("--batch: sizes must be >= 1\n"); return 2; }
  if (trace_steps < 0) { std::printf("--trace: steps must be >= 0\n"); return 2; }
  std::unique_ptr<bench::KernelTrace> trace;
  if (trace_steps > 0 || trace_prefill) {
    std::string why;
    trace = bench::KernelTrace::open(why);
    if (!trace) { std::printf("--trace: %s\n", why.c_str()); return 2; }
  }
  if (dirs.empty()) {
    dirs = {"tests/data/models/v4tiny_b", "tests/data/models/deepseek-v4-tiny-stories",
            "tests/data/models/stories260K/hf"};
    std::error_code ec;
    std::vector<std::string> extra;
    for (const auto& e : std::filesystem::directory_iterator("tests/data/v4-fixtures", ec))
      if (e.is_directory()) extra.push_back(e.path().string());
    std::sort(extra.begin(), extra.end());
    dirs.insert(dirs.end(), extra.begin(), extra.end());
  }
  std::unique_ptr<backend::Backend> be;
  if (device == "cpu" && threads > 0) {
    backend::CpuBackendOptions opt;
    opt.num_threads = threads;
    be = backend::make_cpu_backend(opt);
  } else {
    auto made = backend::make_backend(device, {.batch_invariant = batch_invariant,
                                               .fp8_activations = fp8_activations,
                                               .graphs = !eager});
    if (!made.ok()) { std::printf("%s\n", made.status().to_string().c_str()); return 2; }
    be = std::move(made).value();
  }
  const bool device_pick = !be->host_memory() && !host_argmax;
  if (be->supports_graphs()) std::printf("decode steps replay CUDA graphs (--enforce-eager: off)\n");
  std::printf(
      "backend %s%s, threads %s, prefill %d tokens, decode %d steps (best of %d), greedy pick on "
      "the %s%s\n",
      be->name(),
      batch_invariant   ? " (batch-invariant)"
      : fp8_activations ? " (fp8 activations)"
                        : "",
      threads ? std::to_string(threads).c_str() : "default", prefill, decode, reps,
      device_pick ? "device" : "host",
      device_pick && !no_feed ? ", steps fed from the picked ids on the device" : "");
  // host ms/step: the time per decode step spent inside Model::forward on the host (what is
  // enqueued, plus any wait inside it) — near ms/step means the host, not the device, sets the pace.
  std::printf("%-48s %6s %9s %14s %14s %12s %12s\n", "model", "batch", "load s", "prefill tok/s",
              "decode tok/s", "ms/step", "host ms/step");
  for (const std::string& dir : dirs) {
    auto t_load = std::chrono::steady_clock::now();
    auto m = model::load_model(dir, be.get());
    if (!m.ok()) {
      std::printf("%-48s load failed: %s\n", dir.c_str(), m.status().to_string().c_str());
      continue;
    }
    const double load_s = seconds_since(t_load);
    model::Model& mdl = **m;
    mdl.set_logits_on_device(device_pick);
    const int64_t V = mdl.info().vocab_size;
    const bool feed = device_pick && !no_feed && mdl.accepts_fed_tokens();
    // The picked ids of the newest step: on the device (what the next step is fed from) and on
    // their way to the host (the ticket fills tok).
    struct Picked {
      backend::Tensor ids;
      std::unique_ptr<backend::Backend::PendingDownload> ticket;
    };
    // Greedy ids of the last forward's logits [B, V] into tok (device: sample op + B-id download,
    // waited for at once, or — `later` — left to the ticket in `picked`).
    auto pick = [&](const backend::Tensor& logits, std::vector<int32_t>& tok, Picked& picked,
                    bool later) -> Status {
      const int64_t B = static_cast<int64_t>(tok.size());
      if (!device_pick) {
        for (int64_t b = 0; b < B; ++b) tok[b] = argmax(logits.data<float>() + b * V, V);
        return OkStatus();
      }
      std::vector<backend::SampleRowParams> rows(static_cast<size_t>(B));
      for (auto& r : rows) r.temperature = 0.0f;
      DI_ASSIGN_OR_RETURN(picked.ids, be->empty(DType::kI32, {B}));
      DI_RETURN_IF_ERROR(be->sample(logits, rows, picked.ids));
      backend::Tensor host = backend::Tensor::borrow(tok.data(), DType::kI32, {B});
      if (!later) return be->download(picked.ids, host);
      DI_ASSIGN_OR_RETURN(picked.ticket, be->download_async(picked.ids, host));
      return OkStatus();
    };
    // One decode step of the sequences in st: their tokens from tok, or fed from the previous
    // pick's ids on the device (then the host waits for those ids only after queueing this step,
    // as the engine does). host_s += the time inside Model::forward.
    std::vector<int32_t> spare;  // the fed mode's second id buffer (tok and spare alternate)
    bool tracing = false;        // decode_step notes "forward end" on the trace
    auto decode_step = [&](std::vector<std::unique_ptr<model::SequenceState>>& st,
                           std::vector<int32_t>& tok, Picked& picked, double& host_s) -> Status {
      const int B = static_cast<int>(tok.size());
      static const int32_t kPlaceholder = -1;
      std::vector<model::SequenceInput> step;
      for (int b = 0; b < B; ++b) {
        model::SequenceInput in{std::span<const int32_t>(feed ? &kPlaceholder : &tok[b], 1),
                                st[b].get(), false};
        if (feed) {
          in.fed_ids = &picked.ids;
          in.fed_row = b;
        }
        step.push_back(in);
      }
      const auto th = std::chrono::steady_clock::now();
      DI_ASSIGN_OR_RETURN(backend::Tensor logits, mdl.forward(step));
      host_s += seconds_since(th);
      if (tracing) trace->note("forward end");
      if (!feed) return pick(logits, tok, picked, false);
      Picked next;
      spare.resize(tok.size());
      DI_RETURN_IF_ERROR(pick(logits, spare, next, true));
      if (picked.ticket) DI_RETURN_IF_ERROR(picked.ticket->wait());  // the previous step's ids
      picked = std::move(next);
      std::swap(tok, spare);  // tok is where the new ticket lands
      return OkStatus();
    };
    // The traced window's tables (as `steps` steps) on stdout; with --trace-csv also every record
    // in PREFIX<suffix>.csv.
    auto print_trace = [&](const std::string& suffix, int steps) {
      std::FILE* csv = nullptr;
      if (!trace_csv.empty()) {
        const std::string path = trace_csv + suffix + ".csv";
        csv = std::fopen(path.c_str(), "w");
        if (csv == nullptr) std::printf("--trace-csv: cannot write %s\n", path.c_str());
        else std::fprintf(csv, "kind,name,start_us,end_us,graph_node\n");
      }
      trace->print(stdout, steps, 40, csv);
      if (csv != nullptr) std::fclose(csv);
      std::fflush(stdout);
    };
    auto drain = [&](Picked& picked) -> Status {
      if (!picked.ticket) return OkStatus();
      Status st = picked.ticket->wait();
      picked.ticket.reset();
      return st;
    };
    for (int B : batches) {
      std::vector<std::vector<int32_t>> ids(B, std::vector<int32_t>(prefill));
      uint32_t x = 12345;
      for (auto& seq : ids)
        for (auto& t : seq) t = static_cast<int32_t>((x = x * 1664525u + 1013904223u) >> 8) % V;
      double best_prefill = 1e30, best_decode = 1e30, host_decode = 0;
      // Fresh sequence states for the B prompts and the prefill inputs over them.
      auto fresh = [&](std::vector<std::unique_ptr<model::SequenceState>>& st,
                       std::vector<model::SequenceInput>& in) {
        for (int b = 0; b < B; ++b) {
          st.push_back(mdl.new_sequence_state());
          in.push_back({std::span<const int32_t>(ids[b]), st.back().get(), false});
        }
      };
      for (int rep = 0; rep < reps; ++rep) {
        std::vector<std::unique_ptr<model::SequenceState>> st;
        std::vector<model::SequenceInput> in;
        fresh(st, in);
        auto t0 = std::chrono::steady_clock::now();
        auto l = mdl.forward(in);
        if (!l.ok()) { std::printf("forward failed: %s\n", l.status().to_string().c_str()); return 1; }
        std::vector<int32_t> tok(B);
        Picked picked;
        if (Status s = pick(*l, tok, picked, false); !s.ok()) {
          std::printf("pick failed: %s\n", s.to_string().c_str());
          return 1;
        }
        best_prefill = std::min(best_prefill, seconds_since(t0));  // the pick waits for the device
        t0 = std::chrono::steady_clock::now();
        double host = 0;
        for (int i = 0; i < decode; ++i) {
          if (Status s = decode_step(st, tok, picked, host); !s.ok()) {
            std::printf("decode failed: %s\n", s.to_string().c_str());
            return 1;
          }
        }
        if (Status s = drain(picked); !s.ok()) {
          std::printf("pick failed: %s\n", s.to_string().c_str());
          return 1;
        }
        const double took = seconds_since(t0);
        if (took < best_decode) best_decode = took, host_decode = host;
      }
      std::printf("%-48s %6d %9.1f %14.1f %14.1f %12.2f %12.2f\n", dir.c_str(), B, load_s,
                  double(B) * prefill / best_prefill, double(B) * decode / best_decode,
                  1e3 * best_decode / std::max(decode, 1), 1e3 * host_decode / std::max(decode, 1));
      std::fflush(stdout);
      if (trace) {  // [the traced prefill]; a fresh prefill, 4 untraced steps, the traced window
        std::string why;
        if (trace_prefill) {  // one more prefill of fresh states, the whole forward in the window
          std::vector<std::unique_ptr<model::SequenceState>> pst;
          std::vector<model::SequenceInput> pin;
          fresh(pst, pin);
          if (!trace->begin(why) || !trace->mark(why)) {
            std::printf("--trace-prefill: %s\n", why.c_str());
            return 1;
          }
          const auto tp = std::chrono::steady_clock::now();
          trace->note("forward begin");
          auto pl = mdl.forward(pin);
          if (!pl.ok()) {
            std::printf("forward failed: %s\n", pl.status().to_string().c_str());
            return 1;
          }
          std::vector<int32_t> ptok(B);
          Picked pp;
          if (Status s = pick(*pl, ptok, pp, false); !s.ok()) {
            std::printf("pick failed: %s\n", s.to_string().c_str());
            return 1;
          }
          const double took = seconds_since(tp);
          if (!trace->end(why)) { std::printf("--trace-prefill: %s\n", why.c_str()); return 1; }
          std::printf("trace of %s, batch %d: prefill of %d tokens, %.3f ms under CUPTI\n",
                      dir.c_str(), B, B * prefill, 1e3 * took);
          print_trace("_prefill_b" + std::to_string(B), 1);
          if (trace_steps == 0) continue;
        }
        std::vector<std::unique_ptr<model::SequenceState>> st;
        std::vector<model::SequenceInput> in;
        fresh(st, in);
        std::vector<int32_t> tok(B);
        auto l = mdl.forward(in);
        if (!l.ok()) { std::printf("forward failed: %s\n", l.status().to_string().c_str()); return 1; }
        Picked picked;
        if (Status s = pick(*l, tok, picked, false); !s.ok()) {
          std::printf("pick failed: %s\n", s.to_string().c_str());
          return 1;
        }
        std::chrono::steady_clock::time_point t0;
        for (int i = 0; i < 4 + trace_steps; ++i) {
          if (i == 3 && !trace->begin(why)) { std::printf("--trace: %s\n", why.c_str()); return 1; }
          if (i == 4) {
            if (!trace->mark(why)) { std::printf("--trace: %s\n", why.c_str()); return 1; }
            t0 = std::chrono::steady_clock::now();
          }
          trace->note("forward begin");
          tracing = true;
          double unused = 0;
          if (Status s = decode_step(st, tok, picked, unused); !s.ok()) {
            std::printf("decode failed: %s\n", s.to_string().c_str());
            return 1;
          }
          trace->note("pick end");
        }
        tracing = false;
        if (Status s = drain(picked); !s.ok()) {
          std::printf("pick failed: %s\n", s.to_string().c_str());
          return 1;
        }
        const double took = seconds_since(t0);
        if (!trace->end(why)) { std::printf("--trace: %s\n", why.c_str()); return 1; }
        std::printf("trace of %s, batch %d: %.3f ms/step under CUPTI (steps after a %d-token prompt)\n",
                    dir.c_str(), B, 1e3 * took / trace_steps, prefill);
        print_trace("_b" + std::to_string(B), trace_steps);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
