// Tests of the safetensors reader: round trips through write_safetensors, the real fixture, and
// many kinds of corrupt / truncated files and sharded indexes (each with a clear error).
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("di_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// 8-byte LE length + header + `data_size` bytes of data.
std::string raw_file(const std::string& header, uint64_t data_size, uint64_t length_field) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((length_field >> (8 * i)) & 0xFF);
  s += header;
  for (uint64_t i = 0; i < data_size; ++i) s.push_back(static_cast<char>(i * 7 + 1));
  return s;
}
std::string raw_file(const std::string& header, uint64_t data_size) {
  return raw_file(header, data_size, header.size());
}

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Expects `s` to fail with `code` and a message containing every one of `parts`.
template <typename T>
void expect_error(const StatusOr<T>& s, StatusCode code, std::vector<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << parts.front() << "'";
  EXPECT_EQ(s.status().code(), code) << s.status().to_string();
  for (const auto& p : parts) {
    EXPECT_NE(s.status().message().find(p), std::string::npos)
        << "message lacks '" << p << "': " << s.status().to_string();
  }
}

// ---- round trips ----

TEST(Safetensors, RoundTripManyDtypes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  std::vector<TensorToWrite> ts = {
      {"w.f32", DType::kF32, {3, 5}, random_bytes(rng, 60)},
      {"w.bf16", DType::kBF16, {7}, random_bytes(rng, 14)},
      {"w.fp8", DType::kF8E4M3, {4, 4}, random_bytes(rng, 16)},
      {"w.fp4", DType::kF4E2M1, {3, 3}, random_bytes(rng, 5)},  // 9 nibbles -> 5 bytes
      {"w.i8", DType::kI8, {2, 3}, random_bytes(rng, 6)},
      {"scalar", DType::kF64, {}, random_bytes(rng, 8)},
      {"empty", DType::kF32, {0, 3}, {}},
      {"ids", DType::kI64, {2}, random_bytes(rng, 16)},
  };
  const std::string path = dir.file("rt.safetensors");
  ASSERT_TRUE(write_safetensors(path, ts, {{"format", "pt"}}).ok());

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorInfo& t = (*f)->tensors()[i];  // header order == write order
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.dtype, ts[i].dtype) << t.name;
    EXPECT_EQ(t.shape, ts[i].shape) << t.name;
    EXPECT_EQ(t.file, path);
    ASSERT_EQ(t.nbytes, ts[i].bytes.size()) << t.name;
    if (t.nbytes) EXPECT_EQ(std::memcmp(t.data, ts[i].bytes.data(), t.nbytes), 0) << t.name;
    EXPECT_EQ((*f)->find(ts[i].name), &t);
  }
  EXPECT_EQ((*f)->find("w.f32")->numel(), 15);
  EXPECT_EQ((*f)->find("scalar")->numel(), 1);
  EXPECT_EQ((*f)->find("empty")->numel(), 0);
  EXPECT_EQ((*f)->find("absent"), nullptr);
}

TEST(Safetensors, ShardedCheckpointRoundTrip) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  auto a = random_bytes(rng, 24), b = random_bytes(rng, 8), c = random_bytes(rng, 12);
  ASSERT_TRUE(
      write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                        {{"z.weight", DType::kF32, {2, 3}, a}, {"a.bias", DType::kBF16, {4}, b}})
          .ok());
  ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"),
                                {{"m.weight", DType::kI32, {3}, c}})
                  .ok());
  write_bytes(dir.file("model.safetensors.index.json"),
              R"({"metadata": {"total_size": 44}, "weight_map": {
                 "z.weight": "model-00001-of-00002.safetensors",
                 "a.bias": "model-00001-of-00002.safetensors",
                 "m.weight": "model-00002-of-00002.safetensors"}})");
  // An unrelated safetensors file next to the shards is ignored.
  ASSERT_TRUE(write_safetensors(dir.file("other.safetensors"), {{"x", DType::kU8, {1}, {1}}}).ok());

  auto ck = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->directory(), dir.path().string());
  ASSERT_EQ((*ck)->tensors().size(), 3u);
  EXPECT_EQ((*ck)->tensors()[0]->name, "a.bias");  // sorted by name
  EXPECT_EQ((*ck)->tensors()[1]->name, "m.weight");
  EXPECT_EQ((*ck)->tensors()[2]->name, "z.weight");
  const TensorInfo* m = (*ck)->find("m.weight");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->file, dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(m->dtype, DType::kI32);
  EXPECT_EQ(std::memcmp(m->data, c.data(), 12), 0);
  EXPECT_EQ(std::memcmp((*ck)->find("z.weight")->data, a.data(), 24), 0);
  EXPECT_EQ((*ck)->find("x"), nullptr);

  // Opening the index file directly gives the same checkpoint.
  auto ck2 = Checkpoint::open(dir.file("model.safetensors.index.json"));
  ASSERT_TRUE(ck2.ok()) << ck2.status().to_string();
  EXPECT_EQ((*ck2)->tensors().size(), 3u);
}

// ---- the real fixture ----

TEST(Safetensors, FixtureV4TinyB) {
  auto ck = Checkpoint::open("tests/data/models/v4tiny_b");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  ASSERT_EQ((*ck)->tensors().size(), 210u);
  EXPECT_EQ((*ck)->files().size(), 1u);
  EXPECT_EQ((*ck)->files()[0]->metadata().at("format"), "pt");

  // config.json: vocab_size 320, hidden_size 128, hc_mult 4, 4 routed experts of 64.
  const TensorInfo* emb = (*ck)->find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kF32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{320, 128}));
  EXPECT_EQ(emb->nbytes, 320u * 128u * 4u);
  float first[3];
  std::memcpy(first, emb->data, sizeof(first));
  EXPECT_EQ(first[0], -0.011210063472390175f);
  EXPECT_EQ(first[1], -0.003175568301230669f);
  EXPECT_EQ(first[2], 0.09036844223737717f);

  const TensorInfo* tid = (*ck)->find("model.layers.0.ffn.gate.tid2eid");
  ASSERT_NE(tid, nullptr);
  EXPECT_EQ(tid->dtype, DType::kI64);
  EXPECT_EQ(tid->shape, (std::vector<int64_t>{320, 2}));  // [vocab, num_experts_per_tok]
  int64_t ids[4];
  std::memcpy(ids, tid->data, sizeof(ids));
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 4);
  EXPECT_EQ(ids[2], 0);
  EXPECT_EQ(ids[3], 2);

  const TensorInfo* hc = (*ck)->find("model.hc_head.hc_fn");
  ASSERT_NE(hc, nullptr);
  EXPECT_EQ(hc->shape, (std::vector<int64_t>{4, 512}));  // [hc_mult, hc_mult * hidden]
  const TensorInfo* w1 = (*ck)->find("model.layers.0.ffn.experts.7.w1.weight");
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{64, 128}));  // [moe_intermediate, hidden]
  float scale;
  std::memcpy(&scale, (*ck)->find("model.hc_head.hc_scale")->data, 4);
  EXPECT_EQ(scale, 0.06390939652919769f);
}

TEST(Safetensors, OtherFixturesOpen) {
  for (const char* p :
       {"tests/data/models/stories260K/hf", "tests/data/models/deepseek-v4-tiny-stories",
        "tests/data/models/v4tiny_b/reference_outputs.safetensors"}) {
    auto ck = Checkpoint::open(p);
    EXPECT_TRUE(ck.ok()) << p << ": " << ck.status().to_string();
  }
}

// ---- corrupt and truncated files ----

class Corrupt : public ::testing::Test {
 protected:
  StatusOr<std::unique_ptr<SafetensorsFile>> open_raw(const std::string& bytes) {
    write_bytes(path_, bytes);
    return SafetensorsFile::open(path_);
  }
  TempDir dir_;
  std::string path_ = dir_.file("bad.safetensors");
};

TEST_F(Corrupt, MissingFile) {
  expect_error(SafetensorsFile::open(dir_.file("nope.safetensors")), StatusCode::kNotFound,
               {"nope.safetensors"});
}

TEST_F(Corrupt, ShorterThanLengthPrefix) {
  expect_error(open_raw(std::string("\x05\x00\x00", 3)), StatusCode::kDataLoss,
               {path_, "3 bytes", "shorter than the 8-byte header length"});
  expect_error(open_raw(""), StatusCode::kDataLoss, {path_, "0 bytes"});
}

TEST_F(Corrupt, HeaderLengthPastEof) {
  expect_error(open_raw(raw_file("{}", 0, 1000)), StatusCode::kDataLoss,
               {path_, "header length 1000", "past the end of the file (10 bytes)"});
  expect_error(open_raw(raw_file("{}", 0, ~0ull)), StatusCode::kDataLoss,
               {path_, "exceeds", "limit"});
}

TEST_F(Corrupt, HeaderNotJson) {
  expect_error(open_raw(raw_file("{\"a\": {\"dtype\": ", 0)), StatusCode::kDataLoss,
               {path_, "header is not valid JSON"});
  expect_error(open_raw(raw_file("[1, 2]", 0)), StatusCode::kDataLoss,
               {path_, "header must be a JSON object, got array"});
}

TEST_F(Corrupt, UnknownDtype) {
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", 4)),
               StatusCode::kDataLoss,
               {path_, "tensor 'w'", "unknown dtype 'F12'", "expected one of"});
}

TEST_F(Corrupt, ShapeTimesDtypeMismatch) {
  expect_error(
      open_raw(raw_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20)),
      StatusCode::kDataLoss,
      {path_, "tensor 'w'", "shape [2, 3] x F32 needs 24 bytes but data_offsets span 20"});
  // FP4 packs two per byte: 5 elements need 3 bytes.
  expect_error(open_raw(raw_file(R"({"q":{"dtype":"F4","shape":[5],"data_offsets":[0,5]}})", 5)),
               StatusCode::kDataLoss, {"tensor 'q'", "needs 3 bytes but data_offsets span 5"});
}

TEST_F(Corrupt, SpanPastEnd) {
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", 8)),
               StatusCode::kDataLoss,
               {path_, "tensor 'w'", "[0, 16] run past the end of the data section (8 bytes)"});
}

TEST_F(Corrupt, TruncatedDataSection) {
  std::mt19937 rng(1234);
  ASSERT_TRUE(write_safetensors(path_, {{"a", DType::kF32, {4}, random_bytes(rng, 16)},
                                        {"b", DType::kF16, {8}, random_bytes(rng, 16)}})
                  .ok());
  const auto full = fs::file_size(path_);
  fs::resize_file(path_, full - 5);
  expect_error(SafetensorsFile::open(path_), StatusCode::kDataLoss,
               {path_, "tensor 'b'", "run past the end of the data section", "truncated"});
}

TEST_F(Corrupt, OverlappingSpans) {
  expect_error(open_raw(raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},
                           "b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                                 12)),
               StatusCode::kDataLoss, {path_, "tensor 'b'", "overlap tensor 'a' which ends at 8"});
}

TEST_F(Corrupt, HoleAndTrailingBytes) {
  expect_error(open_raw(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
                           "b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                                 12)),
               StatusCode::kDataLoss,
               {path_, "tensor 'b'", "previous tensor ends at 4", "no holes"});
  expect_error(open_raw(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9)),
               StatusCode::kDataLoss, {path_, "cover 4 bytes but the data section has 9"});
}

TEST_F(Corrupt, BadShapes) {
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,0]}})", 0)),
               StatusCode::kDataLoss, {path_, "tensor 'w'", "-2", "not a non-negative integer"});
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"U8","shape":[2.5],"data_offsets":[0,2]}})", 2)),
               StatusCode::kDataLoss, {"tensor 'w'", "2.5", "not a non-negative integer"});
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"U8","shape":"3","data_offsets":[0,3]}})", 3)),
               StatusCode::kDataLoss, {"tensor 'w'", "missing \"shape\""});
  expect_error(
      open_raw(raw_file(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", 0)),
      StatusCode::kDataLoss, {"tensor 'w'", "too many elements"});
}

TEST_F(Corrupt, BadOffsetsAndEntries) {
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4)),
               StatusCode::kDataLoss, {"tensor 'w'", "[4, 2] has begin > end"});
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", 2)),
               StatusCode::kDataLoss, {"tensor 'w'", "must be [begin, end]"});
  expect_error(open_raw(raw_file(R"({"w":{"dtype":"U8","shape":[2]}})", 2)), StatusCode::kDataLoss,
               {"tensor 'w'", "data_offsets", "missing"});
  expect_error(open_raw(raw_file(R"({"w":[1,2]})", 0)), StatusCode::kDataLoss,
               {"tensor 'w'", "entry must be an object"});
  expect_error(
      open_raw(raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})", 1)),
      StatusCode::kDataLoss, {"tensor 'w'", "unexpected key 'extra'"});
}

TEST_F(Corrupt, MetadataAndDuplicates) {
  expect_error(open_raw(raw_file(R"({"__metadata__":{"format":1}})", 0)), StatusCode::kDataLoss,
               {path_, "__metadata__", "'format'", "must be a string"});
  expect_error(open_raw(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},
                                    "a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                 2)),
               StatusCode::kDataLoss, {path_, "duplicate key 'a'"});
}

// ---- sharded indexes ----

class BadIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(99);
    ASSERT_TRUE(write_safetensors(dir_.file("s1.safetensors"),
                                  {{"a", DType::kF32, {2}, random_bytes(rng, 8)},
                                   {"b", DType::kF32, {1}, random_bytes(rng, 4)}})
                    .ok());
    ASSERT_TRUE(write_safetensors(dir_.file("s2.safetensors"),
                                  {{"c", DType::kU8, {3}, random_bytes(rng, 3)}})
                    .ok());
  }
  StatusOr<std::unique_ptr<Checkpoint>> open_with_index(const std::string& index) {
    write_bytes(index_path_, index);
    return Checkpoint::open(dir_.path().string());
  }
  TempDir dir_;
  std::string index_path_ = dir_.file("model.safetensors.index.json");
};

TEST_F(BadIndex, ValidIndexOpens) {
  auto ck = open_with_index(
      R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->tensors().size(), 3u);
}

TEST_F(BadIndex, MissingShard) {
  expect_error(open_with_index(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors",
                                   "c":"s3.safetensors"}})"),
               StatusCode::kNotFound,
               {index_path_, "names shard 's3.safetensors'", "does not exist"});
}

TEST_F(BadIndex, TensorMissingFromItsShard) {
  expect_error(open_with_index(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors",
                                   "c":"s2.safetensors","d":"s2.safetensors"}})"),
               StatusCode::kDataLoss,
               {index_path_, "tensor 'd'", dir_.file("s2.safetensors"), "does not contain it"});
  expect_error(open_with_index(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors",
                                   "c":"s1.safetensors","x":"s2.safetensors"}})"),
               StatusCode::kDataLoss, {index_path_, "tensor 'c'"});
}

TEST_F(BadIndex, TensorInTwoShards) {
  std::mt19937 rng(7);
  ASSERT_TRUE(write_safetensors(dir_.file("s2.safetensors"),
                                {{"c", DType::kU8, {3}, random_bytes(rng, 3)},
                                 {"a", DType::kF32, {2}, random_bytes(rng, 8)}})
                  .ok());
  expect_error(
      open_with_index(
          R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})"),
      StatusCode::kDataLoss,
      {"tensor 'a' appears in two files", dir_.file("s1.safetensors"),
       dir_.file("s2.safetensors")});
}

TEST_F(BadIndex, UnlistedTensorInShard) {
  expect_error(open_with_index(R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})"),
               StatusCode::kDataLoss, {dir_.file("s1.safetensors"), "tensor 'b'", "does not list"});
}

TEST_F(BadIndex, ShardNameEscapesDirectory) {
  for (const std::string shard : {"../s1.safetensors", "/etc/passwd", "sub/s1.safetensors", "..",
                                  "", "..\\\\s1.safetensors"}) {
    SCOPED_TRACE(shard);
    expect_error(open_with_index(R"({"weight_map":{"a":")" + shard + R"("}})"),
                 StatusCode::kInvalidArgument, {index_path_, "tensor 'a'", "shard file name"});
  }
}

TEST_F(BadIndex, IndexNotJsonOrWithoutWeightMap) {
  expect_error(open_with_index("{\"weight_map\": {"), StatusCode::kDataLoss,
               {index_path_, "not valid JSON"});
  expect_error(open_with_index(R"({"metadata":{}})"), StatusCode::kDataLoss,
               {index_path_, "no \"weight_map\" object"});
  expect_error(open_with_index(R"({"weight_map":{"a":7}})"), StatusCode::kDataLoss,
               {index_path_, "tensor 'a'", "must be a shard file name string"});
}

TEST_F(BadIndex, CorruptShardNamesTheShard) {
  write_bytes(dir_.file("s2.safetensors"), "\x01\x02");
  expect_error(
      open_with_index(
          R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})"),
      StatusCode::kDataLoss, {dir_.file("s2.safetensors"), "shorter than"});
}

TEST(Checkpoint, MissingDirectoryOrFiles) {
  TempDir dir;
  expect_error(Checkpoint::open(dir.file("nothing")), StatusCode::kNotFound,
               {"nothing", "does not exist"});
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kNotFound,
               {dir.path().string(), "model.safetensors.index.json", "model.safetensors"});
}

}  // namespace
}  // namespace deepinfer::io
