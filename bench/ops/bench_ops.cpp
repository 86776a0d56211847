// bench_ops: every CUDA backend op at DeepSeek-V4-Flash shapes (decode B sequences, prefill S tokens),
// timed with cudaEvents (warm-up, L2 flushed before each call, median of N), reported as µs and
// achieved GB/s or TFLOP/s against ceilings measured in the same run: device-to-device copy
// bandwidth and cuBLAS bf16 GEMM (8192³) throughput (STYLE.md 10, issue 7).
//
//   bench_ops                                   # decode B = 1, 16, 128; prefill S = 4096
//   bench_ops --decode 1,64 --prefill 1024 --csv ops.csv --only matmul
//
// "bytes" is what an op must move at least (each input and output element once, each KV row once);
// "flops" counts multiply-adds as 2. The table's % columns are achieved / ceiling.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/runtime.h"
#include "bench_context.h"
#include "ceilings.h"
#include "fp8_cases.h"
#include "experts_mma_cases.h"
#include "gemv_cases.h"
#include "skinny_cases.h"
#include "moe_cases.h"
#include "op_cases.h"
#include "prefill_cases.h"
#include "tc_cases.h"

namespace deepinfer::bench_ops {
namespace {

std::vector<int64_t> parse_list(const std::string& s, const char* flag) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      const long long x = std::stoll(item);
      if (x <= 0) throw std::invalid_argument("not positive");
      v.push_back(x);
    } catch (const std::exception&) {
      std::fprintf(stderr, "bench_ops: %s: '%s' is not a positive integer\n", flag, item.c_str());
      std::exit(2);
    }
  }
  return v;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

int run(int argc, char** argv) {
  CLI::App app{"Per-op CUDA backend benchmark at DeepSeek-V4-Flash shapes, against measured ceilings."};
  std::string decode = "1,16,128", prefill = "4096", csv, only;
  int device = 0;
  int64_t context = 8192;
  TimingOptions t;
  bool no_flush = false, skip_ceilings = false;
  app.add_option("--decode", decode, "decode batch sizes B (comma-separated; empty = none)");
  app.add_option("--prefill", prefill, "prefill lengths S (comma-separated; empty = none)");
  app.add_option("--context", context, "decode: tokens already in each sequence (attention/indexer keys)");
  app.add_option("--device", device, "CUDA device index");
  app.add_option("--warmup", t.warmup, "untimed calls before timing")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", t.iters, "timed calls (median reported)")->check(CLI::PositiveNumber);
  app.add_flag("--no-flush", no_flush, "do not flush L2 before each timed call");
  app.add_flag("--skip-ceilings", skip_ceilings, "skip the copy / GEMM ceilings (ratios are then blank)");
  app.add_option("--only", only, "run only ops whose name contains this");
  app.add_option("--csv", csv, "also write the rows to this CSV file");
  std::string fp8_m = "16,128,1024,4096,8192";
  app.add_option("--fp8-m", fp8_m, "FP8 block-scaled GEMM token counts M (comma-separated; empty = none)");
  std::string tc_m = "1,4,8,16,32,64,256";
  app.add_option("--tc-m", tc_m, "tensor-core vs weight-only linear token counts M (comma-separated; empty = none)");
  std::string gemv_m = "1,2,4,8", gemv_b = "1,16";
  app.add_option("--gemv-m", gemv_m, "streaming GEMV token counts M (comma-separated; empty = none)");
  app.add_option("--gemv-batch", gemv_b, "streaming GEMV routed-expert decode batches (comma-separated; empty = none)");
  std::string mma_b = "1,16";
  app.add_option("--mma-batch", mma_b, "routed experts on tensor cores vs the GEMV v2, decode batches (comma-separated; empty = none)");
  std::string moe_t = "16,2048";
  app.add_option("--moe-t", moe_t, "routed-expert prefill tensor-core GEMM token counts T (top-6 of 256 FP4 experts; comma-separated; empty = none)");
  std::string prefill_gemm_m = "256,2048", prefill_gemm_t = "2048";
  app.add_option("--prefill-gemm-m", prefill_gemm_m, "prefill products on cuBLAS vs tensor-core linear, rows M (comma-separated; empty = none)");
  app.add_option("--prefill-gemm-t", prefill_gemm_t, "prefill products on cuBLAS vs moe_tc routed experts, tokens T (comma-separated; empty = none)");
  std::string skinny_m = "1,2,8,16";
  app.add_option("--skinny-m", skinny_m, "skinny_mma (small-M dense tensor-core product) vs the backend's linear, token counts M <= 16 (comma-separated; empty = none)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  t.flush_l2 = !no_flush;

  auto info = cuda::query_device(device);
  if (!info.ok()) {
    std::fprintf(stderr, "bench_ops: %s\n", info.status().to_string().c_str());
    return 1;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f GiB free), theoretical HBM %.0f GB/s; "
              "driver %d, runtime %d\n", device, info->name.c_str(), info->sm_major, info->sm_minor,
              info->num_sms, info->total_bytes / 1073741824.0, info->free_bytes / 1073741824.0,
              info->peak_bandwidth_gbs, driver, runtime);
  std::printf("timing: %d warm-up + %d timed calls, median; L2 flush %s\n", t.warmup, t.iters,
              t.flush_l2 ? "on" : "off");

  auto ctx_or = BenchContext::create(device, t);
  if (!ctx_or.ok()) {
    std::fprintf(stderr, "bench_ops: %s\n", ctx_or.status().to_string().c_str());
    return 1;
  }
  BenchContext& ctx = **ctx_or;
  Ceilings ceil;
  if (!skip_ceilings) {
    auto c = measure_ceilings(ctx);
    if (!c.ok()) {
      std::fprintf(stderr, "bench_ops: ceilings: %s\n", c.status().to_string().c_str());
      return 1;
    }
    ceil = *c;
    std::printf("ceilings: D2D copy %.0f GB/s (%.0f%% of theoretical); cuBLAS bf16 GEMM %.0f TFLOP/s; "
                "cuBLAS fp32 SGEMM %.1f TFLOP/s\n", ceil.copy_gbs,
                100.0 * ceil.copy_gbs / info->peak_bandwidth_gbs, ceil.bf16_tflops, ceil.f32_tflops);
    std::printf("ceilings: cuBLASLt dense FP8 e4m3 GEMM %.0f TFLOP/s\n", ceil.fp8_tflops);
  }

  const ModelDims m;
  run_weight_ops(ctx, m, only);
  for (int64_t b : parse_list(decode, "--decode")) {
    run_phase(ctx, m, Phase{"decode B=" + std::to_string(b), true, b, context}, only);
  }
  for (int64_t s : parse_list(prefill, "--prefill")) {
    run_phase(ctx, m, Phase{"prefill S=" + std::to_string(s), false, s, 0}, only);
  }
  run_fp8_cases(ctx, m, parse_list(fp8_m, "--fp8-m"), only);
  run_tc_cases(ctx, m, parse_list(tc_m, "--tc-m"), only);
  run_gemv_cases(ctx, m, parse_list(gemv_m, "--gemv-m"), parse_list(gemv_b, "--gemv-batch"), only);
  run_moe_cases(ctx, m, parse_list(moe_t, "--moe-t"), only);
  run_experts_mma_cases(ctx, m, parse_list(mma_b, "--mma-batch"), only);
  run_skinny_cases(ctx, m, parse_list(skinny_m, "--skinny-m"), only);
  run_prefill_cases(ctx, m, parse_list(prefill_gemm_m, "--prefill-gemm-m"),
                    parse_list(prefill_gemm_t, "--prefill-gemm-t"), only);

  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    if (!out) {
      std::fprintf(stderr, "bench_ops: cannot write --csv '%s'\n", csv.c_str());
      return 2;
    }
    out << "phase,op,shape,us_median,us_min,us_max,bytes,flops,gbs,pct_copy,tflops,pct_bf16_peak,error\n";
  }
  std::printf("\n%-16s %-42s %-52s %10s %9s %7s %9s %7s\n", "phase", "op", "shape", "us", "GB/s", "%copy",
              "TFLOP/s", "%bf16");
  std::string last_phase;
  int errors = 0;
  for (const Result& r : ctx.results()) {
    const double s = r.us_median * 1e-6;
    const double gbs = s > 0 ? r.bytes / s / 1e9 : 0, tf = s > 0 ? r.flops / s / 1e12 : 0;
    const double pc = ceil.copy_gbs > 0 ? 100.0 * gbs / ceil.copy_gbs : 0;
    const double pf = ceil.bf16_tflops > 0 ? 100.0 * tf / ceil.bf16_tflops : 0;
    if (r.phase != last_phase) std::printf("\n"), last_phase = r.phase;
    if (!r.error.empty()) {
      ++errors;
      std::printf("%-16s %-42s ERROR %s\n", r.phase.c_str(), r.op.c_str(), r.error.c_str());
    } else {
      std::printf("%-16s %-42s %-52s %10.1f %9.1f %6.1f%% %9.2f %6.1f%%\n", r.phase.c_str(), r.op.c_str(),
                  r.shape.c_str(), r.us_median, gbs, pc, tf, r.flops > 0 ? pf : 0.0);
    }
    if (out) {
      out << csv_escape(r.phase) << ',' << csv_escape(r.op) << ',' << csv_escape(r.shape) << ','
          << r.us_median << ',' << r.us_min << ',' << r.us_max << ',' << r.bytes << ',' << r.flops << ','
          << gbs << ',' << pc << ',' << tf << ',' << (r.flops > 0 ? pf : 0.0) << ','
          << csv_escape(r.error) << '\n';
    }
  }
  print_fp8_summary(ctx.results(), ceil.fp8_tflops);
  if (errors) std::printf("\n%d op(s) failed (see ERROR rows)\n", errors);
  return errors ? 1 : 0;
}

}  // namespace
}  // namespace deepinfer::bench_ops

int main(int argc, char** argv) { return deepinfer::bench_ops::run(argc, argv); }
