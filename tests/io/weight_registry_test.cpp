// Weight registry: the committed checkpoints load with every tensor accounted for; the HF stacked
// spelling serves the same bytes as the upstream per-expert spelling; missing/unexpected tensors,
// wrong shapes/dtypes and quantised weights with bad scales give one clear error.
#include "io/weight_registry.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "io/config.h"
#include "io/safetensors.h"

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("di_registry_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

ModelConfig load_config(const std::string& dir) {
  auto c = load_model_config(dir);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

std::unique_ptr<Checkpoint> open_ckpt(const std::string& path) {
  auto c = Checkpoint::open(path);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

// Every checkpoint tensor is the source of at least one entry or listed in skipped().
void expect_all_accounted(const Checkpoint& ckpt, const WeightRegistry& reg) {
  std::set<std::string> used(reg.skipped().begin(), reg.skipped().end());
  for (const auto& [name, e] : reg.entries()) {
    used.insert(e.weight.source.substr(0, e.weight.source.find('[')));
    if (e.scale) used.insert(e.scale->source);
  }
  for (const TensorInfo* t : ckpt.tensors()) EXPECT_TRUE(used.count(t->name)) << t->name;
}

std::vector<TensorToWrite> copy_tensors(const Checkpoint& ckpt) {
  std::vector<TensorToWrite> out;
  for (const TensorInfo* t : ckpt.tensors()) {
    out.push_back({t->name, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)});
  }
  return out;
}

StatusOr<std::unique_ptr<WeightRegistry>> build_from(const std::vector<TensorToWrite>& tensors,
                                                     const ModelConfig& cfg, const TempDir& dir,
                                                     std::unique_ptr<Checkpoint>* keep) {
  const std::string path = dir.file("model.safetensors");
  Status s = write_safetensors(path, tensors);
  EXPECT_TRUE(s.ok()) << s.to_string();
  *keep = open_ckpt(path);
  return WeightRegistry::build(**keep, cfg);
}

void expect_error(const StatusOr<std::unique_ptr<WeightRegistry>>& r,
                  std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << *parts.begin() << "'";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message: " << r.status().message() << "\nmissing: " << p;
  }
}

TEST(WeightRegistryTest, V4TinyB) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  auto reg = WeightRegistry::build(*ckpt, cfg);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ((*reg)->entries().size(), 210u);  // one entry per tensor, nothing stacked or scaled
  EXPECT_TRUE((*reg)->skipped().empty());
  expect_all_accounted(*ckpt, **reg);
  const WeightEntry* kv_norm = (*reg)->find("layers.0.attn.kv_norm");
  ASSERT_NE(kv_norm, nullptr);
  EXPECT_EQ(kv_norm->weight.source, "model.layers.0.attn.norm.weight");  // the §8.3 quirk
  EXPECT_EQ(kv_norm->weight.shape, std::vector<int64_t>{64});
  auto w1 = (*reg)->get(expert_weight(3, 7, "w1"));
  ASSERT_TRUE(w1.ok());
  EXPECT_EQ((*w1)->weight.shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ((*w1)->weight.data, ckpt->find("model.layers.3.ffn.experts.7.w1.weight")->data);
  EXPECT_EQ((*reg)->find("head")->weight.source, "head.weight");
  EXPECT_EQ((*reg)->find("layers.0.ffn.tid2eid")->weight.dtype, DType::kI64);
  EXPECT_EQ((*reg)->find("layers.1.ffn.tid2eid"), nullptr);   // moe layer: bias, no tid2eid
  EXPECT_NE((*reg)->find("layers.1.ffn.gate_bias"), nullptr);
  EXPECT_NE((*reg)->find("layers.1.attn.indexer.wq_b"), nullptr);   // CSA
  EXPECT_EQ((*reg)->find("layers.2.attn.indexer.wq_b"), nullptr);   // HCA: no indexer
  EXPECT_EQ((*reg)->find("layers.2.attn.compressor.ape")->weight.shape,
            (std::vector<int64_t>{16, 64}));
  EXPECT_EQ((*reg)->find("layers.0.attn.compressor.wkv"), nullptr);  // sliding
  auto absent = (*reg)->get("layers.9.attn.wq_a");
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("layers.9.attn.wq_a"), std::string::npos);
}

TEST(WeightRegistryTest, TinyStoriesBf16) {
  const std::string dir = "tests/data/models/deepseek-v4-tiny-stories";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  auto reg = WeightRegistry::build(*ckpt, cfg);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ((*reg)->entries().size(), 314u);
  expect_all_accounted(*ckpt, **reg);
  EXPECT_EQ((*reg)->find("embed")->weight.dtype, DType::kBF16);
}

TEST(WeightRegistryTest, Stories260KLlamaTied) {
  const std::string dir = "tests/data/models/stories260K/hf";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  auto reg = WeightRegistry::build(*ckpt, cfg);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ((*reg)->entries().size(), 48u);  // 47 tensors + head tied to embed
  expect_all_accounted(*ckpt, **reg);
  const WeightEntry* head = (*reg)->find("head");
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(head->tied);
  EXPECT_EQ(head->weight.data, (*reg)->find("embed")->weight.data);
  EXPECT_EQ((*reg)->find("layers.4.attn.wk")->weight.shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ((*reg)->find("layers.4.ffn.w2")->weight.shape, (std::vector<int64_t>{64, 172}));
}

TEST(WeightRegistryTest, LlamaUntiedNeedsHead) {
  const std::string dir = "tests/data/models/stories260K/hf";
  ModelConfig cfg = load_config(dir);
  std::get<LlamaConfig>(cfg.arch).tie_word_embeddings = false;
  auto ckpt = open_ckpt(dir);
  expect_error(WeightRegistry::build(*ckpt, cfg), {"1 missing tensor", "head"});
}

// Renames an upstream/save_pretrained name (deepseek-v4.md §8.3) to HF's in-memory name (§8.1),
// written independently of the registry's tables. Expert tensors return "" (stacked separately).
std::string to_hf_name(std::string n) {
  if (n == "head.weight") return "lm_head.weight";
  const std::pair<std::string, std::string> rules[] = {
      {R"(\.attn_norm\.weight$)", ".input_layernorm.weight"},
      {R"(\.ffn_norm\.weight$)", ".post_attention_layernorm.weight"},
      {R"(\.hc_(attn|ffn)_(fn|base|scale)$)", ".$1_hc.$2"},
      {R"(\.attn\.indexer\.compressor\.)", ".self_attn.compressor.indexer.IC."},
      {R"(\.attn\.compressor\.)", ".self_attn.compressor.C."},
      {R"(\.(C|IC)\.wkv\.)", ".kv_proj."},
      {R"(\.(C|IC)\.wgate\.)", ".gate_proj."},
      {R"(\.(C|IC)\.norm\.)", ".kv_norm."},
      {R"(\.(C|IC)\.ape$)", ".position_bias"},
      {R"(\.attn\.indexer\.wq_b\.)", ".self_attn.compressor.indexer.q_b_proj."},
      {R"(\.attn\.indexer\.weights_proj\.)", ".self_attn.compressor.indexer.scorer.weights_proj."},
      {R"(\.attn\.wq_a\.)", ".self_attn.q_a_proj."},
      {R"(\.attn\.q_norm\.)", ".self_attn.q_a_norm."},
      {R"(\.attn\.wq_b\.)", ".self_attn.q_b_proj."},
      {R"(\.attn\.wkv\.)", ".self_attn.kv_proj."},
      {R"(\.attn\.norm\.)", ".self_attn.kv_norm."},
      {R"(\.attn\.wo_a\.)", ".self_attn.o_a_proj."},
      {R"(\.attn\.wo_b\.)", ".self_attn.o_b_proj."},
      {R"(\.attn\.attn_sink$)", ".self_attn.sinks"},
      {R"(\.ffn\.gate\.weight$)", ".mlp.gate.weight"},
      {R"(\.ffn\.gate\.bias$)", ".mlp.gate.e_score_correction_bias"},
      {R"(\.ffn\.gate\.tid2eid$)", ".mlp.gate.tid2eid"},
      {R"(\.ffn\.shared_experts\.w1\.)", ".mlp.shared_experts.gate_proj."},
      {R"(\.ffn\.shared_experts\.w3\.)", ".mlp.shared_experts.up_proj."},
      {R"(\.ffn\.shared_experts\.w2\.)", ".mlp.shared_experts.down_proj."},
  };
  if (std::regex_search(n, std::regex(R"(\.ffn\.experts\.)"))) return "";
  for (const auto& [from, to] : rules) n = std::regex_replace(n, std::regex(from), to);
  return n;
}

TEST(WeightRegistryTest, HfStackedSpellingServesTheSameViews) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  const DeepseekV4Config& c = cfg.deepseek_v4();
  auto ckpt = open_ckpt(dir);
  auto upstream = WeightRegistry::build(*ckpt, cfg);
  ASSERT_TRUE(upstream.ok()) << upstream.status().to_string();

  // Re-spell the fixture: HF names, experts stacked into gate_up_proj [E,2I,H] / down_proj [E,H,I].
  std::vector<TensorToWrite> hf;
  for (const TensorInfo* t : ckpt->tensors()) {
    std::string n = to_hf_name(t->name);
    if (n.empty()) continue;
    hf.push_back({n, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)});
  }
  const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size, H = c.hidden_size;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    TensorToWrite gate_up{"model.layers." + std::to_string(l) + ".mlp.experts.gate_up_proj",
                          DType::kF32, {E, 2 * I, H}, {}};
    TensorToWrite down{"model.layers." + std::to_string(l) + ".mlp.experts.down_proj",
                       DType::kF32, {E, H, I}, {}};
    for (int64_t e = 0; e < E; ++e) {
      for (const char* w : {"w1", "w3"}) {
        const TensorInfo* t = ckpt->find("model.layers." + std::to_string(l) + ".ffn.experts." +
                                         std::to_string(e) + "." + w + ".weight");
        gate_up.bytes.insert(gate_up.bytes.end(), t->data, t->data + t->nbytes);
      }
      const TensorInfo* t = ckpt->find("model.layers." + std::to_string(l) + ".ffn.experts." +
                                       std::to_string(e) + ".w2.weight");
      down.bytes.insert(down.bytes.end(), t->data, t->data + t->nbytes);
    }
    hf.push_back(std::move(gate_up));
    hf.push_back(std::move(down));
  }
  EXPECT_EQ(hf.size(), 210u - 4u * 8u * 3u + 8u);
  TempDir tmp;
  std::unique_ptr<Checkpoint> hf_ckpt;
  auto stacked = build_from(hf, cfg, tmp, &hf_ckpt);
  ASSERT_TRUE(stacked.ok()) << stacked.status().to_string();
  expect_all_accounted(*hf_ckpt, **stacked);
  ASSERT_EQ((*stacked)->entries().size(), (*upstream)->entries().size());
  for (const auto& [name, a] : (*upstream)->entries()) {
    const WeightEntry* b = (*stacked)->find(name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_EQ(a.weight.dtype, b->weight.dtype) << name;
    EXPECT_EQ(a.weight.shape, b->weight.shape) << name;
    ASSERT_EQ(a.weight.nbytes, b->weight.nbytes) << name;
    EXPECT_EQ(std::memcmp(a.weight.data, b->weight.data, a.weight.nbytes), 0) << name;
  }
  const WeightEntry* w3 = (*stacked)->find(expert_weight(2, 5, "w3"));
  EXPECT_EQ(w3->weight.source, "model.layers.2.mlp.experts.gate_up_proj[5, 64:128]");
}

TEST(WeightRegistryTest, MissingAndUnexpectedReportedTogether) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  std::vector<TensorToWrite> t = copy_tensors(*ckpt);
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](const TensorToWrite& x) {
                           return x.name == "model.layers.2.attn.wkv.weight" ||
                                  x.name == "model.layers.1.ffn.gate.bias";
                         }),
          t.end());
  t.push_back({"model.layers.0.attn.foo.weight", DType::kF32, {2}, std::vector<uint8_t>(8, 1)});
  // A compressor on a sliding layer maps to a canonical name the config does not expect.
  t.push_back({"model.layers.0.attn.compressor.ape", DType::kF32, {2}, std::vector<uint8_t>(8, 1)});
  TempDir tmp;
  std::unique_ptr<Checkpoint> keep;
  expect_error(build_from(t, cfg, tmp, &keep),
               {"2 missing tensors", "layers.1.ffn.gate_bias", "layers.2.attn.wkv",
                "2 unexpected tensors", "model.layers.0.attn.foo.weight",
                "model.layers.0.attn.compressor.ape (as layers.0.attn.compressor.ape)",
                "config (tests/data/models/v4tiny_b/config.json)"});
}

TEST(WeightRegistryTest, LongListsAreCapped) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  std::vector<TensorToWrite> t = copy_tensors(*ckpt);
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](const TensorToWrite& x) {
                           return x.name.find(".ffn.experts.") != std::string::npos;
                         }),
          t.end());
  TempDir tmp;
  std::unique_ptr<Checkpoint> keep;
  expect_error(build_from(t, cfg, tmp, &keep),
               {"96 missing tensors", "layers.0.ffn.experts.0.w1", "... and 46 more"});
}

TEST(WeightRegistryTest, DuplicateSpellings) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  std::vector<TensorToWrite> t = copy_tensors(*ckpt);
  const TensorInfo* n = ckpt->find("model.layers.0.attn.norm.weight");
  t.push_back({"layers.0.attn.kv_norm.weight", n->dtype, n->shape,
               std::vector<uint8_t>(n->data, n->data + n->nbytes)});
  TempDir tmp;
  std::unique_ptr<Checkpoint> keep;
  expect_error(build_from(t, cfg, tmp, &keep),
               {"1 duplicate", "layers.0.attn.kv_norm.weight", "model.layers.0.attn.norm.weight",
                "both provide layers.0.attn.kv_norm"});
}

TEST(WeightRegistryTest, WrongShapeAndDtype) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  std::vector<TensorToWrite> t = copy_tensors(*ckpt);
  for (TensorToWrite& x : t) {
    if (x.name == "model.layers.1.attn.wq_a.weight") {
      x.shape = {64, 127};
      x.bytes.resize(64 * 127 * 4);
    } else if (x.name == "model.layers.0.ffn.gate.tid2eid") {
      x.dtype = DType::kF64;  // same byte size as I64
    } else if (x.name == "model.norm.weight") {
      x.dtype = DType::kI32;
    }
  }
  TempDir tmp;
  std::unique_ptr<Checkpoint> keep;
  expect_error(build_from(t, cfg, tmp, &keep),
               {"3 tensors with the wrong shape or dtype",
                "model.layers.1.attn.wq_a.weight", "F32 [64, 127]: expected shape [64, 128]",
                "model.layers.0.ffn.gate.tid2eid", "F64 [320, 2]: expected dtype I64 or I32",
                "model.norm.weight", "I32 [128]: expected dtype F32, BF16 or F16"});
}

TEST(WeightRegistryTest, Tid2eidOutOfRange) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  std::vector<TensorToWrite> t = copy_tensors(*ckpt);
  for (TensorToWrite& x : t) {
    if (x.name != "model.layers.0.ffn.gate.tid2eid") continue;
    const int64_t bad = 8;  // E = 8
    std::memcpy(x.bytes.data() + 8 * (2 * 17 + 1), &bad, 8);
  }
  TempDir tmp;
  std::unique_ptr<Checkpoint> keep;
  expect_error(build_from(t, cfg, tmp, &keep),
               {"model.layers.0.ffn.gate.tid2eid", "value 8 at [17, 1]",
                "expected an expert id in [0, 8)"});
}

TEST(WeightRegistryTest, MtpTensorsAreKept) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  std::vector<TensorToWrite> t = copy_tensors(*ckpt);
  const int64_t H = 128;
  t.push_back({"mtp.0.e_proj.weight", DType::kF32, {H, H}, std::vector<uint8_t>(H * H * 4, 0x3c)});
  t.push_back({"mtp.0.attn.wq_a.weight", DType::kF32, {64, H}, std::vector<uint8_t>(64 * H * 4, 1)});
  t.push_back({"mtp.0.something_new", DType::kF32, {3}, std::vector<uint8_t>(12, 1)});
  TempDir tmp;
  std::unique_ptr<Checkpoint> keep;
  auto reg = build_from(t, cfg, tmp, &keep);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ((*reg)->find("mtp.0.e_proj")->weight.shape, (std::vector<int64_t>{H, H}));
  EXPECT_NE((*reg)->find(mtp_weight(0, "attn.wq_a")), nullptr);
  EXPECT_EQ((*reg)->skipped(), std::vector<std::string>{"mtp.0.something_new"});
  expect_all_accounted(*keep, **reg);
}

// FP8 block-scaled weights and FP4 packed experts (deepseek-v4.md §8.4), on random bytes.
TEST(WeightRegistryTest, QuantisedWeightsAndScales) {
  const std::string dir = "tests/data/models/v4tiny_b";
  ModelConfig cfg = load_config(dir);
  auto ckpt = open_ckpt(dir);
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto random_bytes = [&](size_t n) {
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng() & 0x7e);  // no e4m3 NaN codes
    return b;
  };
  std::vector<TensorToWrite> base = copy_tensors(*ckpt);
  std::vector<TensorToWrite> t;
  const int64_t I = 64, H = 128;
  for (const TensorToWrite& x : base) {
    if (x.name == "model.layers.1.attn.wq_b.weight") {  // [256, 64] -> FP8, scales [2, 1]
      t.push_back({x.name, DType::kF8E4M3, x.shape, random_bytes(256 * 64)});
      t.push_back({"model.layers.1.attn.wq_b.scale", DType::kF8E8M0, {2, 1}, {127, 128}});
    } else if (x.name == "model.layers.1.ffn.experts.3.w1.weight") {  // [64, 128] -> FP4
      t.push_back({x.name, DType::kI8, {I, H / 2}, random_bytes(I * H / 2)});
      t.push_back({"model.layers.1.ffn.experts.3.w1.scale", DType::kF8E8M0, {I, H / 32},
                   random_bytes(I * H / 32)});
    } else if (x.name == "model.layers.1.ffn.experts.3.w2.weight") {  // [128, 64] -> FP4 (HF name)
      t.push_back({x.name, DType::kU8, {H, I / 2}, random_bytes(H * I / 2)});
      t.push_back({"model.layers.1.ffn.experts.3.w2.weight_scale_inv", DType::kF32, {H, I / 32},
                   random_bytes(H * I / 32 * 4)});
    } else {
      t.push_back(x);
    }
  }
  {
    TempDir tmp;
    std::unique_ptr<Checkpoint> keep;
    auto reg = build_from(t, cfg, tmp, &keep);
    ASSERT_TRUE(reg.ok()) << reg.status().to_string();
    expect_all_accounted(*keep, **reg);
    const WeightEntry* q = (*reg)->find("layers.1.attn.wq_b");
    EXPECT_EQ(q->weight.dtype, DType::kF8E4M3);
    ASSERT_TRUE(q->scale.has_value());
    EXPECT_EQ(q->scale->shape, (std::vector<int64_t>{2, 1}));
    const WeightEntry* w1 = (*reg)->find(expert_weight(1, 3, "w1"));
    EXPECT_EQ(w1->weight.dtype, DType::kF4E2M1);
    EXPECT_EQ(w1->weight.shape, (std::vector<int64_t>{I, H}));  // logical shape
    EXPECT_EQ(w1->weight.nbytes, static_cast<uint64_t>(I * H / 2));
    EXPECT_EQ(w1->weight.numel(), I * H);
    EXPECT_EQ(w1->scale->shape, (std::vector<int64_t>{I, H / 32}));
    EXPECT_EQ((*reg)->find(expert_weight(1, 3, "w2"))->scale->dtype, DType::kF32);
  }
  // FP8 without its scale; a scale of the wrong shape; a scale on an unquantised weight.
  std::vector<TensorToWrite> bad;
  for (const TensorToWrite& x : t) {
    if (x.name == "model.layers.1.attn.wq_b.scale") continue;
    if (x.name == "model.layers.1.ffn.experts.3.w1.scale") {
      bad.push_back({x.name, DType::kF8E8M0, {I, H / 16}, random_bytes(I * H / 16)});
      continue;
    }
    bad.push_back(x);
  }
  bad.push_back({"model.layers.1.attn.wkv.scale", DType::kF8E8M0, {1, 1}, {127}});
  TempDir tmp;
  std::unique_ptr<Checkpoint> keep;
  expect_error(build_from(bad, cfg, tmp, &keep),
               {"3 tensors with the wrong shape or dtype",
                "model.layers.1.attn.wq_b.weight", "FP8 weight without its block-scale tensor",
                "F8_E8M0 [2, 1]", "model.layers.1.ffn.experts.3.w1.scale is F8_E8M0 [64, 8]",
                "expected F8_E8M0 or F32 [64, 4]", "model.layers.1.attn.wkv.weight",
                "has a scale tensor model.layers.1.attn.wkv.scale but is not quantised"});
}

TEST(WeightRegistryTest, CanonicalNameMapping) {
  bool scale = false;
  EXPECT_EQ(canonical_deepseek_v4_name("embed.weight", &scale), "embed");
  EXPECT_EQ(canonical_deepseek_v4_name("model.embed_tokens.weight", &scale), "embed");
  EXPECT_EQ(canonical_deepseek_v4_name("lm_head.weight", &scale), "head");
  EXPECT_EQ(canonical_deepseek_v4_name("hc_head_fn", &scale), "hc_head.fn");
  EXPECT_EQ(canonical_deepseek_v4_name("model.hc_head.hc_scale", &scale), "hc_head.scale");
  EXPECT_FALSE(scale);
  EXPECT_EQ(canonical_deepseek_v4_name("layers.12.hc_ffn_scale", &scale), "layers.12.hc_ffn.scale");
  EXPECT_FALSE(scale);
  EXPECT_EQ(canonical_deepseek_v4_name("model.layers.12.attn_hc.scale", &scale),
            "layers.12.hc_attn.scale");
  EXPECT_FALSE(scale);
  EXPECT_EQ(canonical_deepseek_v4_name("layers.3.attn.wq_a.scale", &scale), "layers.3.attn.wq_a");
  EXPECT_TRUE(scale);
  EXPECT_EQ(canonical_deepseek_v4_name("model.layers.3.self_attn.q_a_proj.weight_scale_inv", &scale),
            "layers.3.attn.wq_a");
  EXPECT_TRUE(scale);
  EXPECT_EQ(canonical_deepseek_v4_name("layers.3.attn.kv_norm.weight", &scale),
            "layers.3.attn.kv_norm");
  EXPECT_EQ(canonical_deepseek_v4_name("model.layers.3.self_attn.compressor.indexer.position_bias",
                                       &scale),
            "layers.3.attn.indexer.compressor.ape");
  EXPECT_EQ(canonical_deepseek_v4_name("layers.3.ffn.experts.255.w2.weight", &scale),
            "layers.3.ffn.experts.255.w2");
  EXPECT_EQ(canonical_deepseek_v4_name("mtp.0.ffn.experts.1.w3.scale", &scale),
            "mtp.0.ffn.experts.1.w3");
  EXPECT_TRUE(scale);
  EXPECT_EQ(canonical_deepseek_v4_name("mtp.0.enorm.weight", &scale), "mtp.0.enorm");
  EXPECT_EQ(canonical_deepseek_v4_name("layers.3.enorm.weight", &scale), std::nullopt);
  EXPECT_EQ(canonical_deepseek_v4_name("layers.03.attn.wkv.weight", &scale), std::nullopt);
  EXPECT_EQ(canonical_deepseek_v4_name("layers.3.ffn.experts.1.w4.weight", &scale), std::nullopt);
  EXPECT_EQ(canonical_llama_name("model.layers.2.self_attn.k_proj.weight"), "layers.2.attn.wk");
  EXPECT_EQ(canonical_llama_name("model.layers.2.mlp.up_proj.bias"), "layers.2.ffn.b3");
  EXPECT_EQ(canonical_llama_name("lm_head.weight"), "head");
  EXPECT_EQ(canonical_llama_name("model.layers.2.mlp.experts.0.w1"), std::nullopt);
}

}  // namespace
}  // namespace deepinfer::io
