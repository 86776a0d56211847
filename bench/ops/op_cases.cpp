#include "op_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "backend/cuda/attention_fd.h"
#include "backend/cuda/kernels.h"
#include "device_fill.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Shape;
using backend::Tensor;

constexpr double kF = 4.0;  // bytes per fp32 / int32 element

std::string sh(const Shape& s) { return backend::shape_str(s); }

// One op family: allocates its tensors, measures its ops, frees on return.
struct Family {
  BenchContext& ctx;
  const ModelDims& m;
  const Phase& p;
  const std::string& only;
  bool wanted(const std::string& op) const { return only.empty() || op.find(only) != std::string::npos; }
  void measure(const std::string& op, const std::string& shape, double bytes, double flops,
               const std::function<Status()>& fn) {
    if (wanted(op)) ctx.measure(p.name, op, shape, bytes, flops, fn);
  }
};

// ---- linear layers (backend matmul: fp32 weights, cuBLAS SGEMM) --------------------------------
Status linear_layers(Family& f) {
  const ModelDims& m = f.m;
  const int64_t M = f.p.tokens;
  struct Lin { const char* name; int64_t N, K, groups; bool decode_only; };
  const int64_t hcw = (2 + m.hc) * m.hc;
  const Lin lins[] = {
      {"attn.wq_a", m.q_lora, m.hidden, 1, false},
      {"attn.wq_b", m.heads * m.head_dim, m.q_lora, 1, false},
      {"attn.wkv", m.head_dim, m.hidden, 1, false},
      {"attn.wo_a (grouped)", m.o_lora, m.heads * m.head_dim / m.o_groups, m.o_groups, false},
      {"attn.wo_b", m.hidden, m.o_groups * m.o_lora, 1, false},
      {"compressor.wkv (CSA)", 2 * m.head_dim, m.hidden, 1, false},
      {"indexer.wq_b", m.index_heads * m.index_dim, m.q_lora, 1, false},
      {"indexer.weights_proj", m.index_heads, m.hidden, 1, false},
      {"hc_attn_fn", hcw, m.hc * m.hidden, 1, false},
      {"ffn.gate", m.experts, m.hidden, 1, false},
      {"shared_experts.w1+w3", 2 * m.expert_inter, m.hidden, 1, false},
      {"shared_experts.w2", m.hidden, m.expert_inter, 1, false},
      {"head", m.vocab, m.hidden, 1, true},
  };
  for (const Lin& l : lins) {
    const std::string op = std::string("matmul ") + l.name;
    if (!f.wanted(op) || (l.decode_only && !f.p.decode)) continue;
    DI_ASSIGN_OR_RETURN(Tensor x, f.ctx.randn({M, l.groups * l.K}));
    DI_ASSIGN_OR_RETURN(Tensor w, f.ctx.randn({l.groups * l.N, l.K}, 0.02f));
    DI_ASSIGN_OR_RETURN(Tensor out, f.ctx.zeros(DType::kF32, {M, l.groups * l.N}));
    const double G = double(l.groups);
    f.measure(op, cat("x", sh(x.shape()), " w", sh(w.shape())),
              kF * (M * G * l.K + G * l.N * l.K + M * G * l.N), 2.0 * M * G * l.N * l.K,
              [&] { return f.ctx.backend().matmul(x, w, out, l.groups); });
  }
  return OkStatus();
}

// ---- routed experts: per active expert w1+w3 GEMM, swiglu, w2 GEMM (the backend's MoE path) ----
Status routed_experts(Family& f) {
  const std::string op = "moe experts (w1+w3, swiglu, w2)";
  if (!f.wanted(op)) return OkStatus();
  const ModelDims& m = f.m;
  const int64_t assignments = f.p.tokens * m.top_k;
  const int64_t E = std::min(m.experts, assignments);
  const int64_t rows = (assignments + E - 1) / E;
  const int64_t H = m.hidden, I = m.expert_inter;
  std::vector<Tensor> w13(E), w2(E);
  for (int64_t e = 0; e < E; ++e) {
    DI_ASSIGN_OR_RETURN(w13[e], f.ctx.randn({2 * I, H}, 0.02f));
    DI_ASSIGN_OR_RETURN(w2[e], f.ctx.randn({H, I}, 0.02f));
  }
  DI_ASSIGN_OR_RETURN(Tensor x, f.ctx.randn({E, rows, H}));
  DI_ASSIGN_OR_RETURN(Tensor gu, f.ctx.zeros(DType::kF32, {E, rows, 2 * I}));
  DI_ASSIGN_OR_RETURN(Tensor act, f.ctx.zeros(DType::kF32, {E, rows, I}));
  DI_ASSIGN_OR_RETURN(Tensor y, f.ctx.zeros(DType::kF32, {E, rows, H}));
  auto xs = x.view({E * rows, H}), gus = gu.view({E * rows, 2 * I}), acts = act.view({E * rows, I}),
       ys = y.view({E * rows, H});
  const double weights = kF * E * (2.0 * I * H + double(H) * I);
  const double acts_bytes = kF * E * rows * (H + 2.0 * 2 * I + 2.0 * I + H);
  f.measure(op, std::to_string(E) + " experts x " + std::to_string(rows) + " rows, w13 [" +
                    std::to_string(2 * I) + ", " + std::to_string(H) + "], w2 [" + std::to_string(H) +
                    ", " + std::to_string(I) + "]",
            weights + acts_bytes, 2.0 * E * rows * (2.0 * I * H + double(H) * I), [&]() -> Status {
              for (int64_t e = 0; e < E; ++e) {
                Tensor xe = xs.rows(e * rows, (e + 1) * rows), ge = gus.rows(e * rows, (e + 1) * rows),
                       ae = acts.rows(e * rows, (e + 1) * rows), ye = ys.rows(e * rows, (e + 1) * rows);
                DI_RETURN_IF_ERROR(f.ctx.backend().matmul(xe, w13[e], ge, 1));
                DI_RETURN_IF_ERROR(f.ctx.backend().swiglu(ge, 10.f, ae));
                DI_RETURN_IF_ERROR(f.ctx.backend().matmul(ae, w2[e], ye, 1));
              }
              return OkStatus();
            });
  return OkStatus();
}

// ---- norms, rope, elementwise, embedding ------------------------------------------------------
Status small_ops(Family& f) {
  const ModelDims& m = f.m;
  const int64_t M = f.p.tokens, H = m.hidden;
  auto& be = f.ctx.backend();
  for (int64_t N : {H, m.q_lora, m.head_dim}) {
    DI_ASSIGN_OR_RETURN(Tensor x, f.ctx.randn({M, N}));
    DI_ASSIGN_OR_RETURN(Tensor w, f.ctx.randn({N}));
    DI_ASSIGN_OR_RETURN(Tensor y, f.ctx.zeros(DType::kF32, {M, N}));
    f.measure("rms_norm", sh(x.shape()), kF * (2.0 * M * N + N), 0,
              [&] { return be.rms_norm(x, &w, 1e-6f, y); });
  }
  {
    DI_ASSIGN_OR_RETURN(Tensor q, f.ctx.randn({M, m.heads, m.head_dim}));
    DI_ASSIGN_OR_RETURN(Tensor pos, f.ctx.randint({M}, 0, 8192));
    DI_ASSIGN_OR_RETURN(Tensor inv, f.ctx.randn({m.rope_dim / 2}, 0.1f));
    // Only the rotated channels are read and written.
    f.measure("rope (q, 64 of 512 channels)", sh(q.shape()), kF * (2.0 * M * m.heads * m.rope_dim + M), 0,
              [&] { return be.rope(q, pos, inv, backend::RopeStyle::kInterleavedTrailing, 1.f, false); });
    // The q heads' unweighted norm + rope: one fused op against the two calls (in place, as the
    // model runs them; the values drift from call to call, the timing does not).
    const double nr_bytes = kF * (2.0 * M * m.heads * m.head_dim + M);
    f.measure("rms_norm_rope (q heads)", sh(q.shape()), nr_bytes, 0, [&] {
      return be.rms_norm_rope(q, nullptr, 1e-6f, pos, inv, backend::RopeStyle::kInterleavedTrailing,
                              1.f, q);
    });
    f.measure("rms_norm_rope (q heads, composed)", sh(q.shape()), nr_bytes, 0, [&] {
      return be.backend::Backend::rms_norm_rope(q, nullptr, 1e-6f, pos, inv,
                                                backend::RopeStyle::kInterleavedTrailing, 1.f, q);
    });
  }
  {
    DI_ASSIGN_OR_RETURN(Tensor a, f.ctx.randn({M, H}));
    DI_ASSIGN_OR_RETURN(Tensor b, f.ctx.randn({M, H}));
    DI_ASSIGN_OR_RETURN(Tensor c, f.ctx.zeros(DType::kF32, {M, H}));
    f.measure("add", sh(a.shape()), kF * 3.0 * M * H, 0, [&] { return be.add(a, b, c); });
    f.measure("copy", sh(a.shape()), kF * 2.0 * M * H, 0, [&] { return be.copy(a, c); });
  }
  {
    const int64_t I = m.expert_inter;
    DI_ASSIGN_OR_RETURN(Tensor gu, f.ctx.randn({M, 2 * I}));
    DI_ASSIGN_OR_RETURN(Tensor out, f.ctx.zeros(DType::kF32, {M, I}));
    f.measure("swiglu (shared expert)", sh(gu.shape()), kF * 3.0 * M * I, 0,
              [&] { return be.swiglu(gu, 10.f, out); });
  }
  if (f.wanted("embedding")) {
    DI_ASSIGN_OR_RETURN(Tensor table, f.ctx.randn({m.vocab, H}, 0.02f));
    DI_ASSIGN_OR_RETURN(Tensor ids, f.ctx.randint({M}, 0, static_cast<int32_t>(m.vocab)));
    DI_ASSIGN_OR_RETURN(Tensor out, f.ctx.zeros(DType::kF32, {M, H}));
    f.measure("embedding", cat("table", sh(table.shape()), " ids[", std::to_string(M), "]"),
              kF * (2.0 * M * H + M), 0, [&] { return be.embedding(table, ids, out); });
  }
  return OkStatus();
}

// ---- attention over the window + selected compressed entries (CSA) or all of them (HCA) --------
// Builds CSR key lists like the model: decode = B sequences with their own KV rows; prefill = one
// sequence of S tokens (window rows of earlier tokens, compressed entries visible so far).
struct KeyLists {
  std::vector<int32_t> offsets, ids;
  int64_t T = 0;  // KV rows
};

KeyLists decode_keys(int64_t B, int64_t window, int64_t compressed, int64_t picks, std::mt19937& rng) {
  KeyLists k;
  const int64_t per_seq = window + compressed;
  k.T = B * per_seq;
  k.offsets.push_back(0);
  std::vector<int32_t> pool(compressed);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t base = static_cast<int32_t>(b * per_seq);
    for (int64_t j = 0; j < window; ++j) k.ids.push_back(base + static_cast<int32_t>(j));
    std::iota(pool.begin(), pool.end(), 0);
    const int64_t n = std::min(picks, compressed);
    for (int64_t j = 0; j < n; ++j) {
      std::swap(pool[j], pool[j + rng() % (compressed - j)]);
      k.ids.push_back(base + static_cast<int32_t>(window + pool[j]));
    }
    k.offsets.push_back(static_cast<int32_t>(k.ids.size()));
  }
  return k;
}

KeyLists prefill_keys(int64_t S, int64_t window, int64_t ratio, int64_t picks, std::mt19937& rng) {
  KeyLists k;
  const int64_t C = S / ratio;
  k.T = S + C;  // rows 0..S-1: window KV of each token; S..S+C-1: compressed entries
  k.offsets.push_back(0);
  std::vector<int32_t> pool;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t j = std::max<int64_t>(0, s - window + 1); j <= s; ++j) k.ids.push_back(static_cast<int32_t>(j));
    const int64_t visible = (s + 1) / ratio;
    pool.resize(visible);
    std::iota(pool.begin(), pool.end(), 0);
    const int64_t n = std::min(picks, visible);
    for (int64_t j = 0; j < n; ++j) {
      std::swap(pool[j], pool[j + rng() % (visible - j)]);
      k.ids.push_back(static_cast<int32_t>(S + pool[j]));
    }
    k.offsets.push_back(static_cast<int32_t>(k.ids.size()));
  }
  return k;
}

Status attention(Family& f) {
  const ModelDims& m = f.m;
  std::mt19937 rng(12345);
  struct Kind { const char* name; int64_t ratio, picks; };
  const Kind kinds[] = {{"attention CSA (window + top-512)", m.csa_ratio, m.index_topk},
                        {"attention HCA (window + all compressed)", m.hca_ratio, int64_t{1} << 40}};
  for (const Kind& kd : kinds) {
    if (!f.wanted(kd.name)) continue;
    const int64_t S = f.p.tokens;
    KeyLists keys = f.p.decode ? decode_keys(S, m.window, f.p.context / kd.ratio, kd.picks, rng)
                               : prefill_keys(S, m.window, kd.ratio, kd.picks, rng);
    const int64_t nnz = static_cast<int64_t>(keys.ids.size());
    DI_ASSIGN_OR_RETURN(Tensor q, f.ctx.randn({S, m.heads, m.head_dim}));
    DI_ASSIGN_OR_RETURN(Tensor kv, f.ctx.randn({keys.T, 1, m.head_dim}));
    DI_ASSIGN_OR_RETURN(Tensor sinks, f.ctx.randn({m.heads}, 0.1f));
    DI_ASSIGN_OR_RETURN(Tensor off, f.ctx.upload_i32({S + 1}, keys.offsets));
    DI_ASSIGN_OR_RETURN(Tensor ids, f.ctx.upload_i32({nnz}, keys.ids));
    DI_ASSIGN_OR_RETURN(Tensor out, f.ctx.zeros(DType::kF32, {S, m.heads, m.head_dim}));
    // Each KV row is read once (shared by all 64 heads of a query, and in prefill by the queries).
    const int64_t kv_rows = f.p.decode ? nnz : keys.T;
    const double bytes = kF * (2.0 * S * m.heads * m.head_dim + double(kv_rows) * m.head_dim + nnz + S + 1);
    const double flops = 2.0 * nnz * m.heads * (2.0 * m.head_dim);
    const float scale = 1.f / std::sqrt(float(m.head_dim));
    int64_t longest = 0;  // the model passes its longest list (sizes the split)
    for (int64_t s = 0; s < S; ++s) longest = std::max<int64_t>(longest, keys.offsets[s + 1] - keys.offsets[s]);
    f.measure(kd.name, cat("q", sh(q.shape()), " kv", sh(kv.shape()), " nnz ", std::to_string(nnz)), bytes,
              flops, [&] { return f.ctx.backend().attention(q, kv, kv, off, ids, &sinks, scale, out, longest); });
    // Each kernel forced (simt: attention.cu, fd: the split-key kernel attention_fd.cu, x1 / x2:
    // its session-11 head-split blocks (x1: fd's cut, x2: its own; the heads per block in the
    // shape column), x3 / x4: its session-10 wgmma variants in attention_x4.cu — a producer
    // warpgroup; x4: its loads staged by cp.async — all with the default plan),
    // GB/s counting only the KV rows the lists read (nnz rows of 512 fp32: the attention kernel's
    // own roofline; the % column is of the copy ceiling measured in the same run). The shape
    // column of the split-key rows names the plan.
    const double kv_bytes = kF * double(nnz) * m.head_dim;
    namespace ck = cuda::kernels;
    int dev = 0, sms = 0;  // the plan the backend makes (its SM count is this device's)
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
    struct Forced { int kernel, variant; const char* suffix; };
    const Forced forced[] = {{ck::kAttentionSimt, -1, " KV bytes [simt]"},
                             {ck::kAttentionFd, 0, " KV bytes [fd]"},
                             {ck::kAttentionFd, 1, " KV bytes [x1]"},
                             {ck::kAttentionFd, 2, " KV bytes [x2]"},
                             {ck::kAttentionFd, 3, " KV bytes [x3]"},
                             {ck::kAttentionFd, 4, " KV bytes [x4]"},
                             // session 13: attention_x5.cu, one launch (clusters merge the units)
                             {ck::kAttentionFd, 5, " KV bytes [x5]"},
                             {ck::kAttentionFd, 6, " KV bytes [x6]"},
                             {ck::kAttentionFd, 7, " KV bytes [x7]"},
                             {ck::kAttentionFd, 8, " KV bytes [x8]"}};
    for (const auto& [kernel, variant, suffix] : forced) {
      const std::string op = std::string(kd.name) + suffix;
      if (!f.wanted(op)) continue;
      std::string shape = cat("q", sh(q.shape()), " nnz ", std::to_string(nnz));
      if (kernel == ck::kAttentionFd) {
        ck::set_attention_fd_variant_override(variant);
        const ck::AttentionFdPlan plan =
            ck::attention_fd_plan(S, m.heads, longest, sms, /*batch_invariant=*/false);
        shape += cat(" units ", std::to_string(plan.grid_units), " x ",
                     std::to_string(plan.chunks_per_unit * 16), " keys, ",
                     std::to_string(plan.heads_per_block), " heads");
      }
      ck::set_attention_kernel_override(kernel);
      f.measure(op, shape, kv_bytes, flops,
                [&] { return f.ctx.backend().attention(q, kv, kv, off, ids, &sinks, scale, out, longest); });
      ck::set_attention_kernel_override(-1);
      ck::set_attention_fd_variant_override(-1);
    }
    // Session 13: x5 with other unit counts ("[x5 units N]": Umax forced to N; "cluster": one
    // unit per token launched as a cluster of 1, to see what the cluster launch costs), decode
    // batch <= 16; at batch <= 2 one traced call of x5 / x6 prints the phases of its CTAs
    // (attention_x5_trace: µs from the CTA's entry, median / max over the CTAs).
    if (f.p.decode && S <= 16) {
      struct U5 {
        int units;
        bool cluster;
      };
      for (const U5 u5 :
           {U5{1, false}, U5{1, true}, U5{2, false}, U5{4, false}, U5{8, false}, U5{16, false}}) {
        const std::string op = std::string(kd.name) + " KV bytes [x5 units " +
                               std::to_string(u5.units) + (u5.cluster ? " cluster]" : "]");
        if (!f.wanted(op)) continue;
        ck::set_attention_fd_variant_override(5);
        ck::set_attention_x5_units_override(u5.units);
        ck::set_attention_x5_force_cluster(u5.cluster);
        const ck::AttentionFdPlan plan =
            ck::attention_fd_plan(S, m.heads, longest, sms, /*batch_invariant=*/false);
        const std::string shape = cat("q", sh(q.shape()), " nnz ", std::to_string(nnz), " units ",
                                      std::to_string(plan.grid_units), ", ",
                                      std::to_string(plan.heads_per_block), " heads");
        ck::set_attention_kernel_override(ck::kAttentionFd);
        f.measure(op, shape, kv_bytes, flops, [&] {
          return f.ctx.backend().attention(q, kv, kv, off, ids, &sinks, scale, out, longest);
        });
        ck::set_attention_kernel_override(-1);
        ck::set_attention_fd_variant_override(-1);
        ck::set_attention_x5_units_override(0);
        ck::set_attention_x5_force_cluster(false);
      }
      for (int v : {5, 6}) {
        const std::string op =
            std::string(kd.name) + " KV bytes [x" + std::to_string(v) + " trace]";
        if (S > 2 || !f.wanted(op)) continue;
        ck::set_attention_fd_variant_override(v);
        const ck::AttentionFdPlan plan =
            ck::attention_fd_plan(S, m.heads, longest, sms, /*batch_invariant=*/false);
        for (const bool flush : {true, false}) {  // L2 flushed before each call / warm
          ck::set_attention_fd_variant_override(v);
          ck::set_attention_kernel_override(ck::kAttentionFd);
          ck::attention_x5_trace(true);  // the last call's stamps remain
          auto times = f.ctx.time_raw(
              [&] {
                return f.ctx.backend().attention(q, kv, kv, off, ids, &sinks, scale, out, longest);
              },
              flush);
          ck::attention_x5_trace(false);
          ck::set_attention_kernel_override(-1);
          ck::set_attention_fd_variant_override(-1);
          std::vector<unsigned long long> tr;
          const int slots = ck::attention_x5_trace_read(tr);
          int khz = 0;
          if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess || khz <= 0)
            khz = 1980000;
          const int64_t ctas =
              std::min<int64_t>(256, S * (m.heads / plan.heads_per_block) * plan.grid_units);
          double med = 0;
          if (times.ok() && !times->empty()) {
            std::vector<float> t = *times;
            std::sort(t.begin(), t.end());
            med = t[t.size() / 2];
          }
          std::printf("%s%s: %s, units %d, %d heads, %lld CTAs traced, call median %.2f us%s\n",
                      op.c_str(), flush ? " (L2 flushed)" : " (warm)", f.p.name.c_str(),
                      plan.grid_units, plan.heads_per_block, static_cast<long long>(ctas), med,
                      times.ok() ? "" : (" " + times.status().to_string()).c_str());
          if (slots == 0 || !times.ok()) continue;
          const char* names[] = {"",
                                 "",
                                 "pdl wait",
                                 "cut known",
                                 "chunk issued",
                                 "Q split",
                                 "chunk landed",
                                 "barrier B",
                                 "chunks done",
                                 "state written",
                                 "cluster sync 1",
                                 "merge done",
                                 "exit"};
          for (int i = 2; i <= 12; ++i) {
            std::vector<double> d;
            for (int64_t c = 0; c < ctas; ++c)
              if (tr[c * slots + i] != 0)
                d.push_back(1e3 * double(tr[c * slots + i] - tr[c * slots + 1]) / khz);
            if (d.empty()) continue;
            std::sort(d.begin(), d.end());
            std::printf("  %-15s median %7.2f us  max %7.2f us  (%zu CTAs)\n", names[i],
                        d[d.size() / 2], d.back(), d.size());
          }
          unsigned long long g0 = ~0ull, g0max = 0, g1 = 0, g1min = ~0ull;
          for (int64_t c = 0; c < ctas; ++c) {
            if (tr[c * slots] == 0 || tr[c * slots + 13] == 0) continue;
            g0 = std::min(g0, tr[c * slots]);
            g0max = std::max(g0max, tr[c * slots]);
            g1 = std::max(g1, tr[c * slots + 13]);
            g1min = std::min(g1min, tr[c * slots + 13]);
          }
          if (g1 > 0)
            std::printf(
                "  globaltimer: entries spread %.2f us, first exit %.2f us, last exit %.2f us "
                "after the first entry\n",
                1e-3 * double(g0max - g0), 1e-3 * double(g1min - g0), 1e-3 * double(g1 - g0));
        }
      }
    }
    // Session 8: other cuts of the default plan (decode, batch <= 16), to calibrate the plan's
    // makespan model: "[fd cut N]" / "[x4 cut N]" = N chunks (16 keys) per unit; session 11:
    // "[x1 hH cut N]" = x1 with H heads per block (any batch: the head-split model's constants).
    struct Cut { int variant, heads; };
    const bool all_cuts = f.p.decode && S <= 16;
    for (const Cut vc : {Cut{0, 64}, Cut{4, 64}, Cut{1, 32}, Cut{1, 16}}) {
      if (!f.p.decode || (vc.variant != 1 && !all_cuts)) continue;
      for (int cut : {1, 2, 3, 5, 8, 10, 20, 40}) {
        const std::string op = std::string(kd.name) + " KV bytes [" +
                               (vc.variant == 0 ? std::string("fd")
                                : vc.variant == 4 ? std::string("x4")
                                                  : "x1 h" + std::to_string(vc.heads)) +
                               " cut " + std::to_string(cut) + "]";
        if (!f.wanted(op)) continue;
        ck::set_attention_fd_chunks_per_unit_override(cut);
        ck::set_attention_fd_variant_override(vc.variant);
        ck::set_attention_fd_heads_override(vc.variant == 1 ? vc.heads : 0);
        const ck::AttentionFdPlan plan =
            ck::attention_fd_plan(S, m.heads, longest, sms, /*batch_invariant=*/false);
        const std::string shape = cat("q", sh(q.shape()), " nnz ", std::to_string(nnz), " units ",
                                      std::to_string(plan.grid_units), " x ",
                                      std::to_string(plan.chunks_per_unit * 16), " keys, ",
                                      std::to_string(plan.heads_per_block), " heads");
        ck::set_attention_kernel_override(ck::kAttentionFd);
        f.measure(op, shape, kv_bytes, flops,
                  [&] { return f.ctx.backend().attention(q, kv, kv, off, ids, &sinks, scale, out, longest); });
        ck::set_attention_kernel_override(-1);
        ck::set_attention_fd_chunks_per_unit_override(0);
        ck::set_attention_fd_variant_override(-1);
        ck::set_attention_fd_heads_override(0);
      }
    }
  }
  return OkStatus();
}

// ---- Lightning indexer: scores over compressed keys, then top-512 -----------------------------
Status indexer(Family& f) {
  const ModelDims& m = f.m;
  auto& be = f.ctx.backend();
  const int64_t nI = m.index_heads, cI = m.index_dim;
  // decode: one call for all sequences, each row reading its own keys (key_start), as the model
  // does; prefill: one call for the sequence.
  const int64_t S = f.p.tokens, seqs = f.p.decode ? f.p.tokens : 1;
  const int64_t T = f.p.decode ? f.p.context / m.csa_ratio : f.p.tokens / m.csa_ratio;
  std::vector<int32_t> visible(S), start(S);
  for (int64_t s = 0; s < S; ++s) {
    visible[s] = static_cast<int32_t>(f.p.decode ? T : (s + 1) / m.csa_ratio);
    start[s] = static_cast<int32_t>(f.p.decode ? s * T : 0);
  }
  DI_ASSIGN_OR_RETURN(Tensor q, f.ctx.randn({S, nI, cI}));
  DI_ASSIGN_OR_RETURN(Tensor w, f.ctx.randn({S, nI}));
  DI_ASSIGN_OR_RETURN(Tensor keys, f.ctx.randn({seqs * T, cI}));
  DI_ASSIGN_OR_RETURN(Tensor vis, f.ctx.upload_i32({S}, visible));
  DI_ASSIGN_OR_RETURN(Tensor kst, f.ctx.upload_i32({S}, start));
  DI_ASSIGN_OR_RETURN(Tensor out, f.ctx.zeros(DType::kF32, {S, T}));
  const std::string shape = "q" + sh({S, nI, cI}) + " keys" + sh({seqs * T, cI});
  f.measure("indexer_scores", shape,
            kF * (S * nI * cI + S * nI + double(seqs * T) * cI + 2 * S + double(S) * T),
            2.0 * S * nI * T * cI, [&]() -> Status {
              return be.indexer_scores(q, w, keys, vis, 1.f / std::sqrt(float(nI)),
                                       1.f / std::sqrt(float(cI)), out, &kst);
            });
  // top-k is row-independent: one call over all rows (decode: one row per sequence).
  const int64_t rows = S;
  DI_ASSIGN_OR_RETURN(Tensor scores, f.ctx.randn({rows, T}));
  DI_ASSIGN_OR_RETURN(Tensor ids, f.ctx.zeros(DType::kI32, {rows, m.index_topk}));
  f.measure("topk (k=512)", sh(scores.shape()), kF * (double(rows) * T + double(rows) * m.index_topk), 0,
            [&] { return be.topk(scores, m.index_topk, ids); });
  return OkStatus();
}

// ---- compressor pooling (softmax over each window's slots) --------------------------------------
Status compressor(Family& f) {
  const ModelDims& m = f.m;
  struct Pool { const char* name; int64_t ratio, L, d; };
  const Pool pools[] = {{"softmax_pool CSA", m.csa_ratio, 2 * m.csa_ratio, m.head_dim},
                        {"softmax_pool CSA indexer", m.csa_ratio, 2 * m.csa_ratio, m.index_dim},
                        {"softmax_pool HCA", m.hca_ratio, m.hca_ratio, m.head_dim}};
  for (const Pool& pl : pools) {
    // Entries closing in this step: decode ~ B / ratio (at least one), prefill S / ratio.
    const int64_t n = std::max<int64_t>(1, f.p.tokens / pl.ratio);
    DI_ASSIGN_OR_RETURN(Tensor v, f.ctx.randn({n, pl.L, pl.d}));
    DI_ASSIGN_OR_RETURN(Tensor s, f.ctx.randn({n, pl.L, pl.d}));
    DI_ASSIGN_OR_RETURN(Tensor out, f.ctx.zeros(DType::kF32, {n, pl.d}));
    f.measure(pl.name, sh(v.shape()), kF * (2.0 * n * pl.L * pl.d + double(n) * pl.d), 0,
              [&] { return f.ctx.backend().softmax_pool(v, s, out); });
  }
  return OkStatus();
}

// ---- MoE routing and token dispatch -------------------------------------------------------------
Status moe_dispatch(Family& f) {
  const ModelDims& m = f.m;
  auto& be = f.ctx.backend();
  const int64_t M = f.p.tokens, k = m.top_k, H = m.hidden;
  {
    DI_ASSIGN_OR_RETURN(Tensor logits, f.ctx.randn({M, m.experts}));
    DI_ASSIGN_OR_RETURN(Tensor bias, f.ctx.randn({m.experts}, 0.01f));
    DI_ASSIGN_OR_RETURN(Tensor hash, f.ctx.randint({M, k}, 0, static_cast<int32_t>(m.experts)));
    DI_ASSIGN_OR_RETURN(Tensor ids, f.ctx.zeros(DType::kI32, {M, k}));
    DI_ASSIGN_OR_RETURN(Tensor w, f.ctx.zeros(DType::kF32, {M, k}));
    backend::RouterParams rp;
    rp.scoring = backend::RouterScoring::kSqrtSoftplus;
    rp.top_k = k;
    rp.routed_scaling_factor = 1.5f;
    const double bytes = kF * (double(M) * m.experts + m.experts + 2.0 * M * k);
    f.measure("moe_route (top-6 of 256)", sh(logits.shape()), bytes, 0,
              [&] { return be.moe_route(logits, &bias, nullptr, rp, ids, w); });
    f.measure("moe_route (hash)", sh(logits.shape()), bytes + kF * M * k, 0,
              [&] { return be.moe_route(logits, nullptr, &hash, rp, ids, w); });
  }
  {
    DI_ASSIGN_OR_RETURN(Tensor x, f.ctx.randn({M, H}));
    DI_ASSIGN_OR_RETURN(Tensor src_ids, f.ctx.randint({M * k}, 0, static_cast<int32_t>(M)));
    DI_ASSIGN_OR_RETURN(Tensor gathered, f.ctx.zeros(DType::kF32, {M * k, H}));
    DI_ASSIGN_OR_RETURN(Tensor w, f.ctx.randn({M * k}));
    DI_ASSIGN_OR_RETURN(Tensor y, f.ctx.zeros(DType::kF32, {M, H}));
    f.measure("gather_rows (dispatch)", sh(gathered.shape()), kF * (2.0 * M * k * H + M * k), 0,
              [&] { return be.gather_rows(x, src_ids, gathered); });
    f.measure("scatter_add_rows (combine)", cat(sh(gathered.shape()), " -> ", sh(y.shape())),
              kF * (double(M) * k * H + 2.0 * M * H + 2.0 * M * k), 0,
              [&] { return be.scatter_add_rows(gathered, src_ids, &w, y); });
  }
  return OkStatus();
}

// ---- manifold-constrained hyper-connections -----------------------------------------------------
// The fused site's kernels called directly (same outputs as Backend::hc_pre): session 7's
// hc_site in each mode (rows / tile1 / tile4: which partial-product kernel; the backend picks by
// S) and auto without PDL, and session 6's kernels (S <= 64) — to compare, and to tune the mode
// thresholds (hc_site.cu kRowsMaxS, kTile1MaxS). `what`: "hc_pre site", "hc_pre head" or
// "hc_expand_pre" (with ex).
Status hc_site_variants(Family& f, const std::string& what, const Tensor& x, const Tensor& fn,
                        const Tensor& base, const Tensor& scale, const backend::HcParams& hp,
                        bool head, Tensor* post, Tensor* comb, Tensor& collapsed,
                        const cuda::kernels::HcExpandIn* ex, double bytes, double flops) {
  namespace k = cuda::kernels;
  const int64_t S = x.dim(0), hc = x.dim(1), H = x.dim(2);
  const std::string shape = cat(sh(x.shape()), " fn", sh(fn.shape()));
  float* pp = post ? post->data<float>() : nullptr;
  float* pc = comb ? comb->data<float>() : nullptr;
  auto ok = [] { return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("hc launch failed"); };
  int64_t most = k::hc_pre_s6_chunks(hc * H) * S * ((head ? hc : (2 + hc) * hc) + 1);
  for (k::HcSiteMode m : {k::HcSiteMode::kRows, k::HcSiteMode::kTile1, k::HcSiteMode::kTile4})
    most = std::max(most, k::hc_site_scratch_floats(S, hc, H, head, m));
  DI_ASSIGN_OR_RETURN(Tensor part, f.ctx.zeros(DType::kF32, {most}));
  struct Mode { const char* name; k::HcSiteMode mode; bool pdl; };
  const Mode modes[] = {{"rows", k::HcSiteMode::kRows, true},
                        {"tile1", k::HcSiteMode::kTile1, true},
                        {"tile4", k::HcSiteMode::kTile4, true},
                        {"auto, no PDL", k::HcSiteMode::kAuto, false}};
  for (const Mode& m : modes) {
    f.measure(what + " (hc_site " + m.name + ")", shape, bytes, flops, [&] {
      k::hc_site(x.data<float>(), fn.data<float>(), base.data<float>(), scale.data<float>(), S, hc,
                 H, hp.sinkhorn_iters, hp.hc_eps, 1e-6f, head, part.data<float>(), pp, pc,
                 collapsed.data<float>(), f.ctx.stream(), ex, m.pdl, m.mode);
      return ok();
    });
  }
  if (S <= 64 && k::hc_pre_s6_supported(hc, head)) {
    f.measure(what + " (session-6 kernels)", shape, bytes, flops, [&] {
      k::hc_pre_s6(x.data<float>(), fn.data<float>(), base.data<float>(), scale.data<float>(), S,
                   hc, H, hp.sinkhorn_iters, hp.hc_eps, 1e-6f, head, part.data<float>(), pp, pc,
                   collapsed.data<float>(), f.ctx.stream(), ex);
      return ok();
    });
  }
  return OkStatus();
}

Status hyper_connections(Family& f) {
  const ModelDims& m = f.m;
  auto& be = f.ctx.backend();
  const int64_t S = f.p.tokens, hc = m.hc, H = m.hidden;
  const int64_t width = (2 + hc) * hc;
  DI_ASSIGN_OR_RETURN(Tensor mix, f.ctx.randn({S, width}));
  DI_ASSIGN_OR_RETURN(Tensor base, f.ctx.randn({width}, 0.1f));
  DI_ASSIGN_OR_RETURN(Tensor scale, f.ctx.randn({3}, 0.1f));
  DI_ASSIGN_OR_RETURN(Tensor pre, f.ctx.zeros(DType::kF32, {S, hc}));
  DI_ASSIGN_OR_RETURN(Tensor post, f.ctx.zeros(DType::kF32, {S, hc}));
  DI_ASSIGN_OR_RETURN(Tensor comb, f.ctx.zeros(DType::kF32, {S, hc, hc}));
  backend::HcParams hp;
  hp.hc = hc;
  hp.sinkhorn_iters = m.sinkhorn_iters;
  f.measure("hc_coeffs (Sinkhorn 20)", sh(mix.shape()), kF * S * (width + 2.0 * hc + hc * hc), 0,
            [&] { return be.hc_coeffs(mix, base, scale, hp, pre, &post, &comb); });
  DI_ASSIGN_OR_RETURN(Tensor x, f.ctx.randn({S, hc, H}));
  DI_ASSIGN_OR_RETURN(Tensor y, f.ctx.randn({S, H}));
  DI_ASSIGN_OR_RETURN(Tensor collapsed, f.ctx.zeros(DType::kF32, {S, H}));
  DI_ASSIGN_OR_RETURN(Tensor expanded, f.ctx.zeros(DType::kF32, {S, hc, H}));
  f.measure("hc_collapse", sh(x.shape()), kF * (double(S) * hc * H + double(S) * H + S * hc), 0,
            [&] { return be.hc_collapse(x, pre, collapsed); });
  f.measure("hc_expand", sh(x.shape()), kF * (2.0 * S * hc * H + double(S) * H + S * hc * (1.0 + hc)), 0,
            [&] { return be.hc_expand(x, y, post, comb, expanded); });
  // A whole site (rms_norm → mix product → Sinkhorn → collapse) through Backend::hc_pre: on the
  // CUDA backend session 7's fused kernels (hc_site.cu, every S), against the composed launches
  // (the base implementation, called non-virtually). Bytes: X, fn, the outputs.
  for (const bool head : {false, true}) {
    const int64_t N = head ? hc : width;
    DI_ASSIGN_OR_RETURN(Tensor fn, f.ctx.randn({N, hc * H}, 0.01f));
    DI_ASSIGN_OR_RETURN(Tensor sbase, f.ctx.randn({N}, 0.1f));
    DI_ASSIGN_OR_RETURN(Tensor sscale, f.ctx.randn({head ? 1 : 3}, 0.1f));
    Tensor* pp = head ? nullptr : &post;
    Tensor* pc = head ? nullptr : &comb;
    const double bytes = kF * (double(S) * hc * H + double(N) * hc * H + double(S) * H +
                               (head ? 0.0 : S * hc * (1.0 + hc)));
    const double flops = 2.0 * S * N * hc * H;
    const std::string what = head ? "hc_pre head" : "hc_pre site";
    f.measure(what + " (hc_pre)", cat(sh(x.shape()), " fn", sh(fn.shape())), bytes, flops,
              [&] { return be.hc_pre(x, fn, sbase, sscale, hp, 1e-6f, pp, pc, collapsed); });
    f.measure(what + " (composed)", cat(sh(x.shape()), " fn", sh(fn.shape())), bytes, flops, [&] {
      return be.backend::Backend::hc_pre(x, fn, sbase, sscale, hp, 1e-6f, pp, pc, collapsed);
    });
    DI_RETURN_IF_ERROR(hc_site_variants(f, what, x, fn, sbase, sscale, hp, head, pp, pc,
                                        collapsed, nullptr, bytes, flops));
    if (head) continue;
    // The previous site's expand + this site (hc_expand_pre) against the two calls (hc_expand,
    // then the composed site): all the mHC launches between two sublayers.
    const double ebytes = bytes + kF * (2.0 * S * hc * H + double(S) * H + S * hc * (1.0 + hc));
    DI_ASSIGN_OR_RETURN(Tensor post_prev, f.ctx.randn({S, hc}, 0.5f));
    DI_ASSIGN_OR_RETURN(Tensor comb_prev, f.ctx.randn({S, hc, hc}, 0.3f));
    f.measure("hc_expand_pre (fused)", cat(sh(x.shape()), " fn", sh(fn.shape())), ebytes, flops,
              [&] {
                return be.hc_expand_pre(x, y, post_prev, comb_prev, expanded, fn, sbase, sscale, hp,
                                        1e-6f, pp, pc, collapsed);
              });
    f.measure("hc_expand_pre (composed)", cat(sh(x.shape()), " fn", sh(fn.shape())), ebytes,
              flops, [&]() -> Status {
                DI_RETURN_IF_ERROR(be.hc_expand(x, y, post_prev, comb_prev, expanded));
                return be.backend::Backend::hc_pre(expanded, fn, sbase, sscale, hp, 1e-6f, pp, pc,
                                                   collapsed);
              });
    const cuda::kernels::HcExpandIn ex{x.data<float>(), y.data<float>(), post_prev.data<float>(),
                                       comb_prev.data<float>(), expanded.data<float>()};
    DI_RETURN_IF_ERROR(hc_site_variants(f, "hc_expand_pre", x, fn, sbase, sscale, hp, head, pp,
                                        pc, collapsed, &ex, ebytes, flops));
  }
  return OkStatus();
}

}  // namespace

void report_setup(BenchContext& ctx, const Phase& p, const char* name, const Status& st) {
  // Session 12: the first device fault is named by the family it happened in (every later call of
  // the process fails with it).
  static bool fault_reported = false;
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess && !fault_reported) {
    fault_reported = true;
    std::fprintf(stderr, "[bench_ops] CUDA fault first seen after %s / %s: %s\n", p.name.c_str(),
                 name, cudaGetErrorString(e));
  }
  if (st.ok()) return;
  Result r;
  r.phase = p.name;
  r.op = name;
  r.error = "setup failed: " + st.to_string();
  std::fprintf(stderr, "[bench_ops] %s %s: %s\n", p.name.c_str(), name, r.error.c_str());
  ctx.results().push_back(std::move(r));
  (void)ctx.backend().synchronize();
}

void run_phase(BenchContext& ctx, const ModelDims& m, const Phase& p, const std::string& only) {
  Family f{ctx, m, p, only};
  run_stored_format_phase(ctx, m, p, only);
  report_setup(ctx, p, "linear layers", linear_layers(f));
  report_setup(ctx, p, "routed experts", routed_experts(f));
  report_setup(ctx, p, "attention", attention(f));
  report_setup(ctx, p, "indexer", indexer(f));
  report_setup(ctx, p, "compressor", compressor(f));
  report_setup(ctx, p, "moe dispatch", moe_dispatch(f));
  report_setup(ctx, p, "hyper-connections", hyper_connections(f));
  report_setup(ctx, p, "small ops", small_ops(f));
}

void run_weight_ops(BenchContext& ctx, const ModelDims& m, const std::string& only) {
  const Phase p{"weights (load)", false, 0, 0};
  Family f{ctx, m, p, only};
  auto fp8 = [&]() -> Status {  // FP8 E4M3 attn.wq_b with 128x128 UE8M0 block scales
    const int64_t N = m.heads * m.head_dim, K = m.q_lora;
    DI_ASSIGN_OR_RETURN(Tensor w, ctx.zeros(DType::kF8E4M3, {N, K}));
    DI_ASSIGN_OR_RETURN(Tensor s, ctx.zeros(DType::kF8E8M0, {(N + 127) / 128, (K + 127) / 128}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {N, K}));
    fill_fp8_codes(w.data<uint8_t>(), w.numel(), ctx.next_seed(), ctx.stream());
    fill_ue8m0(s.data<uint8_t>(), s.numel(), ctx.next_seed(), 118, 127, ctx.stream());
    f.measure("dequantize fp8 (attn.wq_b)", cat("w", sh(w.shape()), " scale", sh(s.shape())),
              double(N) * K + double(s.numel()) + kF * N * K, 0,
              [&] { return ctx.backend().dequantize(w, &s, 128, 128, out); });
    return OkStatus();
  };
  auto fp4 = [&]() -> Status {  // FP4 E2M1 routed expert w1+w3 (packed) with 1x32 UE8M0 scales
    const int64_t N = 2 * m.expert_inter, K = m.hidden;
    DI_ASSIGN_OR_RETURN(Tensor w, ctx.zeros(DType::kI8, {N, K / 2}));
    DI_ASSIGN_OR_RETURN(Tensor s, ctx.zeros(DType::kF8E8M0, {N, K / 32}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {N, K}));
    fill_fp4_codes(w.data<uint8_t>(), w.numel(), ctx.next_seed(), ctx.stream());
    fill_ue8m0(s.data<uint8_t>(), s.numel(), ctx.next_seed(), 118, 127, ctx.stream());
    f.measure("dequantize fp4 (expert w1+w3)", cat("w", sh(w.shape()), " scale", sh(s.shape())),
              double(N) * K / 2 + double(s.numel()) + kF * N * K, 0,
              [&] { return ctx.backend().dequantize(w, &s, 1, 32, out); });
    return OkStatus();
  };
  report_setup(ctx, p, "dequantize fp8", fp8());
  report_setup(ctx, p, "dequantize fp4", fp4());
}

}  // namespace deepinfer::bench_ops
