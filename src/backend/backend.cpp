// Host-memory defaults of the Backend memory interface (the CPU backend uses them as they are).
#include "backend/backend.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

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

Weight Weight::row_slice(int64_t begin, int64_t end) const {
  Weight r = *this;
  r.w = w.rows(begin, end);
  if (scale.defined()) {
    DI_CHECK(begin % block_rows == 0 && (end % block_rows == 0 || end == rows()))
        << "row_slice(" << begin << ", " << end << ") across scale blocks of " << block_rows;
    r.scale = scale.rows(begin / block_rows, (end + block_rows - 1) / block_rows);
  }
  return r;
}

Status Backend::linear(const Tensor& x, const Weight& w, Tensor& out, int64_t groups) {
  if (w.w.dtype() == DType::kF32 && !w.scale.defined()) return matmul(x, w.w, out, groups);
  return Unimplemented(std::string("linear: backend ") + name() + " has no kernel for " +
                       w.w.describe() + " weights (dequantize them at load)");
}

Status Backend::linear_multi(const Tensor& x, std::span<const Weight* const> ws,
                             std::span<Tensor* const> outs) {
  if (ws.size() != outs.size())
    return InvalidArgument("linear_multi: " + std::to_string(ws.size()) + " weights but " +
                           std::to_string(outs.size()) + " outputs");
  for (size_t i = 0; i < ws.size(); ++i) {
    if (ws[i] == nullptr || outs[i] == nullptr)
      return InvalidArgument("linear_multi: weight or output " + std::to_string(i) + " is null");
    DI_RETURN_IF_ERROR(linear(x, *ws[i], *outs[i]));
  }
  return OkStatus();
}

Status Backend::moe_experts_set(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                const ExpertSet& experts, float swiglu_limit, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("moe_experts_set", "out", out, DType::kF32, 2));
  DI_ASSIGN_OR_RETURN(Tensor zeroed, alloc(DType::kF32, {out.dim(0), out.dim(1)}));
  DI_RETURN_IF_ERROR(moe_experts(x, ids, weights, experts, swiglu_limit, zeroed));
  return copy(zeroed, out);
}

Status Backend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                            const ExpertSet& experts, float swiglu_limit, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("moe_experts", "x", x, DType::kF32, 2));
  const int64_t S = x.dim(0), H = x.dim(1), E = experts.num_experts();
  DI_RETURN_IF_ERROR(check_rank("moe_experts", "ids", ids, DType::kI32, 2));
  const int64_t k = ids.dim(1);
  DI_RETURN_IF_ERROR(check_tensor("moe_experts", "ids", ids, DType::kI32, {S, k}));
  DI_RETURN_IF_ERROR(check_tensor("moe_experts", "weights", weights, DType::kF32, {S, k}));
  DI_RETURN_IF_ERROR(check_tensor("moe_experts", "out", out, DType::kF32, {S, H}));
  if (E == 0 || static_cast<int64_t>(experts.down.size()) != E)
    return InvalidArgument("moe_experts: expert set has no or mismatched weights");
  if (S == 0) return OkStatus();
  const int64_t I2 = experts.gate_up[0].rows();
  // Routing on the host: slots (s, j) grouped by expert.
  Tensor ids_h = Tensor::empty(DType::kI32, {S, k}), w_h = Tensor::empty(DType::kF32, {S, k});
  DI_RETURN_IF_ERROR(download(ids, ids_h));
  DI_RETURN_IF_ERROR(download(weights, w_h));
  std::vector<std::vector<int32_t>> tokens(E), slots(E);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids_h.data<int32_t>()[s * k + j];
      if (e < 0 || e >= E)
        return OutOfRange("moe_experts: expert id " + std::to_string(e) + " outside [0, " +
                          std::to_string(E) + ")");
      tokens[e].push_back(static_cast<int32_t>(s));
      slots[e].push_back(static_cast<int32_t>(s * k + j));
    }
  // Each expert's outputs land in their slot rows; then out[s] += Σ_j w[s,j]·slot[s·k+j] in j order.
  DI_ASSIGN_OR_RETURN(Tensor slot_out, alloc(DType::kF32, {S * k, H}));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = static_cast<int64_t>(tokens[e].size());
    if (n == 0) continue;
    Tensor tok_h = Tensor::borrow(tokens[e].data(), DType::kI32, {n});
    Tensor slot_h = Tensor::borrow(slots[e].data(), DType::kI32, {n});
    DI_ASSIGN_OR_RETURN(Tensor tok, alloc(DType::kI32, {n}));
    DI_ASSIGN_OR_RETURN(Tensor slot, alloc(DType::kI32, {n}));
    DI_RETURN_IF_ERROR(upload(tok_h, tok));
    DI_RETURN_IF_ERROR(upload(slot_h, slot));
    DI_ASSIGN_OR_RETURN(Tensor xs, alloc(DType::kF32, {n, H}));
    DI_RETURN_IF_ERROR(gather_rows(x, tok, xs));
    DI_ASSIGN_OR_RETURN(Tensor gu, alloc(DType::kF32, {n, I2}));
    DI_RETURN_IF_ERROR(linear(xs, experts.gate_up[e], gu));
    DI_ASSIGN_OR_RETURN(Tensor act, alloc(DType::kF32, {n, I2 / 2}));
    DI_RETURN_IF_ERROR(swiglu(gu, swiglu_limit, act));
    DI_ASSIGN_OR_RETURN(Tensor y, alloc(DType::kF32, {n, H}));
    DI_RETURN_IF_ERROR(linear(act, experts.down[e], y));
    DI_RETURN_IF_ERROR(scatter_add_rows(y, slot, nullptr, slot_out));  // onto zeros: a copy
  }
  return combine_slots(slot_out, weights, k, out);
}

Status Backend::combine_slots(const Tensor& slot_out, const Tensor& weights, int64_t k,
                              Tensor& out) {
  const int64_t S = out.dim(0);
  std::vector<int32_t> owner(S * k);
  for (int64_t i = 0; i < S * k; ++i) owner[i] = static_cast<int32_t>(i / k);
  DI_ASSIGN_OR_RETURN(Tensor owner_t, alloc(DType::kI32, {S * k}));
  DI_RETURN_IF_ERROR(upload(Tensor::borrow(owner.data(), DType::kI32, {S * k}), owner_t));
  Tensor w = weights.view({S * k});
  return scatter_add_rows(slot_out, owner_t, &w, out);  // rows in order: j ascending per s
}

Status Backend::hc_pre(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
                       const HcParams& params, float norm_eps, Tensor* post, Tensor* comb,
                       Tensor& collapsed) {
  // The composition the model ran before hc_pre existed (hyper_connection.cpp), op for op.
  DI_RETURN_IF_ERROR(check_rank("hc_pre", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), hc = x.dim(1), H = x.dim(2);
  if (hc != params.hc)
    return InvalidArgument("hc_pre: x " + x.describe() + " has " + std::to_string(hc) +
                           " streams, params.hc is " + std::to_string(params.hc));
  DI_RETURN_IF_ERROR(check_rank("hc_pre", "fn", fn, DType::kF32, 2));
  DI_ASSIGN_OR_RETURN(Tensor normed, empty(DType::kF32, {S, hc * H}));  // rms(flatten(X))
  DI_RETURN_IF_ERROR(rms_norm(x.view({S, hc * H}), nullptr, norm_eps, normed));
  DI_ASSIGN_OR_RETURN(Tensor mix, empty(DType::kF32, {S, fn.dim(0)}));  // [S, (2+hc)·hc | hc]
  DI_RETURN_IF_ERROR(matmul(normed, fn, mix));
  DI_ASSIGN_OR_RETURN(Tensor pre, empty(DType::kF32, {S, hc}));
  DI_RETURN_IF_ERROR(hc_coeffs(mix, base, scale, params, pre, post, comb));
  return hc_collapse(x, pre, collapsed);
}

Status Backend::hc_expand_pre(const Tensor& x_prev, const Tensor& y, const Tensor& post_prev,
                              const Tensor& comb_prev, Tensor& x, const Tensor& fn,
                              const Tensor& base, const Tensor& scale, const HcParams& params,
                              float norm_eps, Tensor* post, Tensor* comb, Tensor& collapsed) {
  DI_RETURN_IF_ERROR(hc_expand(x_prev, y, post_prev, comb_prev, x));
  return hc_pre(x, fn, base, scale, params, norm_eps, post, comb, collapsed);
}

Status Backend::hc_pre_norm(const Tensor& x, const Tensor& fn, const Tensor& base,
                            const Tensor& scale, const HcParams& params, float norm_eps,
                            Tensor* post, Tensor* comb, Tensor& collapsed, const Tensor* weight,
                            float eps, Tensor& out) {
  DI_RETURN_IF_ERROR(hc_pre(x, fn, base, scale, params, norm_eps, post, comb, collapsed));
  return rms_norm(collapsed, weight, eps, out);
}

Status Backend::hc_expand_pre_norm(const Tensor& x_prev, const Tensor& y, const Tensor* y2,
                                   const Tensor& post_prev, const Tensor& comb_prev, Tensor& x,
                                   const Tensor& fn, const Tensor& base, const Tensor& scale,
                                   const HcParams& params, float norm_eps, Tensor* post,
                                   Tensor* comb, Tensor& collapsed, const Tensor* weight, float eps,
                                   Tensor& out) {
  Tensor sum;  // y + y2
  if (y2 != nullptr) {
    DI_ASSIGN_OR_RETURN(sum, empty(DType::kF32, y.shape()));
    DI_RETURN_IF_ERROR(add(y, *y2, sum));
  }
  DI_RETURN_IF_ERROR(hc_expand_pre(x_prev, y2 != nullptr ? sum : y, post_prev, comb_prev, x, fn,
                                   base, scale, params, norm_eps, post, comb, collapsed));
  return rms_norm(collapsed, weight, eps, out);
}

Status Backend::hc_expand_sum(const Tensor& x, const Tensor& y, const Tensor& y2,
                              const Tensor& post, const Tensor& comb, Tensor& out) {
  DI_ASSIGN_OR_RETURN(Tensor sum, empty(DType::kF32, y.shape()));
  DI_RETURN_IF_ERROR(add(y, y2, sum));
  return hc_expand(x, sum, post, comb, out);
}

Status Backend::rms_norm_rope(const Tensor& x, const Tensor* weight, float eps,
                              const Tensor& positions, const Tensor& inv_freq, RopeStyle style,
                              float mscale, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("rms_norm_rope", "x", x, DType::kF32, 3));
  DI_RETURN_IF_ERROR(
      check_tensor("rms_norm_rope", "out", out, DType::kF32, {x.dim(0), x.dim(1), x.dim(2)}));
  const int64_t rows = x.dim(0) * x.dim(1), D = x.dim(2);
  Tensor out_rows = out.view({rows, D});
  DI_RETURN_IF_ERROR(rms_norm(x.view({rows, D}), weight, eps, out_rows));
  return rope(out, positions, inv_freq, style, mscale, false);
}

Status Backend::rms_norm_and_rope(const Tensor& a, const Tensor* weight_a, Tensor& out_a,
                                  const Tensor& b, const Tensor* weight_b, float eps,
                                  const Tensor& positions, const Tensor& inv_freq, RopeStyle style,
                                  float mscale, Tensor& out_b) {
  DI_RETURN_IF_ERROR(rms_norm(a, weight_a, eps, out_a));
  return rms_norm_rope(b, weight_b, eps, positions, inv_freq, style, mscale, out_b);
}

Status Backend::place_ids(const Tensor& src, const Tensor& layout, Tensor& dst) {
  if (!host_memory()) return Unimplemented(std::string("place_ids on ") + name());
  if (src.dtype() != DType::kI32 || src.rank() != 2 || layout.dtype() != DType::kI32 ||
      layout.rank() != 2 || layout.dim(0) != src.dim(0) || layout.dim(1) != 3 ||
      dst.dtype() != DType::kI32 || dst.rank() != 1)
    return InvalidArgument("place_ids: want src [S, k] I32, layout [S, 3] I32, dst [n] I32; got " +
                           src.describe() + ", " + layout.describe() + ", " + dst.describe());
  const int64_t S = src.dim(0), k = src.dim(1), n = dst.dim(0);
  const int32_t* sp = src.data<int32_t>();
  const int32_t* lp = layout.data<int32_t>();
  int32_t* dp = dst.data<int32_t>();
  for (int64_t s = 0; s < S; ++s) {
    const int64_t start = lp[3 * s], count = lp[3 * s + 1], add = lp[3 * s + 2];
    if (count < 0 || count > k || start < 0 || start + count > n)
      return OutOfRange("place_ids: row " + std::to_string(s) + " places " +
                        std::to_string(count) + " of " + std::to_string(k) + " picks at " +
                        std::to_string(start) + " in a list of " + std::to_string(n));
    for (int64_t j = 0; j < count; ++j) {
      if (sp[s * k + j] < 0)
        return OutOfRange("place_ids: row " + std::to_string(s) + " pick " + std::to_string(j) +
                          " is -1 within its count " + std::to_string(count));
      dp[start + j] = static_cast<int32_t>(sp[s * k + j] + add);
    }
  }
  return OkStatus();
}

StatusOr<Tensor> Backend::alloc(DType dtype, Shape shape) {
  for (int64_t d : shape)
    if (d < 0) return InvalidArgument("alloc: negative dimension in " + shape_str(shape));
  return Tensor::empty(dtype, std::move(shape));
}

Status Backend::copy_many(std::span<const Tensor> srcs, std::span<Tensor> dsts) {
  if (srcs.size() != dsts.size())
    return InvalidArgument("copy_many: " + std::to_string(srcs.size()) + " sources for " +
                           std::to_string(dsts.size()) + " destinations");
  for (size_t i = 0; i < srcs.size(); ++i) DI_RETURN_IF_ERROR(copy(srcs[i], dsts[i]));
  return OkStatus();
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

namespace {

// A download that already happened (the base download_async): wait() reports its status.
class DoneDownload final : public Backend::PendingDownload {
 public:
  explicit DoneDownload(Status st) : st_(std::move(st)) {}
  Status wait() override { return st_; }

 private:
  Status st_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend::PendingDownload>> Backend::download_async(const Tensor& src,
                                                                            Tensor& host) {
  if (src.nbytes() > kMaxAsyncDownloadBytes)
    return InvalidArgument("download_async: " + src.describe() + " is over " +
                           std::to_string(kMaxAsyncDownloadBytes) + " bytes");
  DI_RETURN_IF_ERROR(check_transfer("download_async", src, host));
  return std::unique_ptr<PendingDownload>(new DoneDownload(download(src, host)));
}

Status Backend::scatter_ids(const Tensor& src, const Tensor& map, Tensor& dst) {
  if (!host_memory()) return Unimplemented(std::string("scatter_ids on ") + name());
  if (src.dtype() != DType::kI32 || src.rank() != 1 || map.dtype() != DType::kI32 ||
      map.rank() != 2 || map.dim(1) != 2 || dst.dtype() != DType::kI32 || dst.rank() != 1)
    return InvalidArgument("scatter_ids: want src [m] I32, map [n, 2] I32, dst [d] I32; got " +
                           src.describe() + ", " + map.describe() + ", " + dst.describe());
  const int32_t* mp = map.data<int32_t>();
  for (int64_t i = 0; i < map.dim(0); ++i) {
    const int64_t from = mp[2 * i], to = mp[2 * i + 1];
    if (from < 0 || from >= src.dim(0) || to < 0 || to >= dst.dim(0))
      return OutOfRange("scatter_ids: pair " + std::to_string(i) + " (" + std::to_string(from) +
                        " -> " + std::to_string(to) + ") is outside src [" +
                        std::to_string(src.dim(0)) + "] or dst [" + std::to_string(dst.dim(0)) +
                        "]");
    dst.data<int32_t>()[to] = src.data<int32_t>()[from];
  }
  return OkStatus();
}

Status Backend::gather_ids(const Tensor& table, const Tensor& ids, Tensor& out) {
  if (!host_memory()) return Unimplemented(std::string("gather_ids on ") + name());
  if (table.dtype() != DType::kI32 || table.rank() != 2 || ids.dtype() != DType::kI32 ||
      ids.rank() != 1 || out.dtype() != DType::kI32 || out.rank() != 2 ||
      out.dim(0) != ids.dim(0) || out.dim(1) != table.dim(1))
    return InvalidArgument("gather_ids: want table [V, C] I32, ids [S] I32, out [S, C] I32; got " +
                           table.describe() + ", " + ids.describe() + ", " + out.describe());
  const int64_t V = table.dim(0), C = table.dim(1);
  for (int64_t s = 0; s < ids.dim(0); ++s) {
    const int64_t id = ids.data<int32_t>()[s];
    if (id < 0 || id >= V)
      return OutOfRange("gather_ids: id " + std::to_string(id) + " at " + std::to_string(s) +
                        " is outside the table's " + std::to_string(V) + " rows");
    std::copy_n(table.data<int32_t>() + id * C, C, out.data<int32_t>() + s * C);
  }
  return OkStatus();
}

}  // namespace deepinfer::backend
