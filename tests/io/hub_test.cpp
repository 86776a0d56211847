// Tests of Hub model resolution against a local fake Hub (cpp-httplib on 127.0.0.1): cache
// layout, no re-download, resume of a cut transfer, 404/401 errors, offline mode, escaping ids.
#include "io/hub.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "io/safetensors.h"

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string random_hex(std::mt19937& rng, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += hex[rng() % 16];
  return s;
}

// A fake Hub serving /<org>/<name>/resolve/<rev>/<file> like huggingface.co: small files with
// X-Repo-Commit + ETag; "LFS" files (*.safetensors) as a 302 to /cdn/<etag> with X-Linked-Etag
// and X-Linked-Size. GET supports Range. Counts every request.
class FakeHub {
 public:
  struct Repo {
    std::string commit;
    std::map<std::string, std::string> files;  // name -> content
    std::string token;                         // required bearer token ("" = public)
  };

  FakeHub() {
    server_.Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))",
                [this](const httplib::Request& req, httplib::Response& res) { resolve(req, res); });
    server_.Get(R"(/cdn/([0-9a-f]+))",
                [this](const httplib::Request& req, httplib::Response& res) { cdn(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~FakeHub() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

  void add_repo(const std::string& id, Repo repo) {
    std::lock_guard<std::mutex> l(mu_);
    repos_[id] = std::move(repo);
  }
  static std::string etag_of(const std::string& content) {
    // Stand-in for the git/LFS hash: any stable function of the bytes.
    return std::to_string(std::hash<std::string>{}(content)) + std::to_string(content.size());
  }
  static bool is_lfs(const std::string& file) {
    return file.size() > 12 && file.substr(file.size() - 12) == ".safetensors";
  }

  // The next GET of /cdn/<etag of file> sends only `bytes` bytes, then drops the connection.
  void cut_next_get(const std::string& content, size_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    cut_[etag_of(content)] = bytes;
  }
  void reset_counts() {
    std::lock_guard<std::mutex> l(mu_);
    heads_ = gets_ = 0;
    ranges_.clear();
    auth_.clear();
  }
  int heads() {
    std::lock_guard<std::mutex> l(mu_);
    return heads_;
  }
  int gets() {
    std::lock_guard<std::mutex> l(mu_);
    return gets_;
  }
  std::vector<std::string> ranges() {
    std::lock_guard<std::mutex> l(mu_);
    return ranges_;
  }
  std::vector<std::string> auth() {
    std::lock_guard<std::mutex> l(mu_);
    return auth_;
  }

 private:
  void count(const httplib::Request& req) {
    std::lock_guard<std::mutex> l(mu_);
    (req.method == "HEAD" ? heads_ : gets_)++;
    if (req.has_header("Range")) ranges_.push_back(req.get_header_value("Range"));
    if (req.has_header("Authorization")) auth_.push_back(req.get_header_value("Authorization"));
  }

  void resolve(const httplib::Request& req, httplib::Response& res) {
    count(req);
    std::lock_guard<std::mutex> l(mu_);
    const std::string id = req.matches[1].str() + "/" + req.matches[2].str();
    const std::string rev = req.matches[3].str(), file = req.matches[4].str();
    auto repo = repos_.find(id);
    if (repo == repos_.end()) {
      res.status = 404;
      res.set_header("X-Error-Code", "RepoNotFound");
      res.set_content("Repository not found", "text/plain");
      return;
    }
    const Repo& r = repo->second;
    if (!r.token.empty() && req.get_header_value("Authorization") != "Bearer " + r.token) {
      res.status = 401;
      res.set_content("Invalid credentials", "text/plain");
      return;
    }
    if (rev != "main" && rev != r.commit) {
      res.status = 404;
      res.set_header("X-Error-Code", "RevisionNotFound");
      return;
    }
    res.set_header("X-Repo-Commit", r.commit);
    auto f = r.files.find(file);
    if (f == r.files.end()) {
      res.status = 404;
      res.set_header("X-Error-Code", "EntryNotFound");
      res.set_content("Entry not found", "text/plain");
      return;
    }
    const std::string etag = etag_of(f->second);
    if (is_lfs(file)) {
      res.status = 302;
      res.set_header("X-Linked-Etag", "\"" + etag + "\"");
      res.set_header("X-Linked-Size", std::to_string(f->second.size()));
      res.set_header("ETag", "W/\"not-this-one\"");
      res.set_header("Location", endpoint() + "/cdn/" + etag);
      cdn_[etag] = f->second;
      return;
    }
    res.set_header("ETag", "W/\"" + etag + "\"");
    res.set_content(f->second, "application/octet-stream");
  }

  void cdn(const httplib::Request& req, httplib::Response& res) {
    count(req);
    std::lock_guard<std::mutex> l(mu_);
    auto it = cdn_.find(req.matches[1].str());
    if (it == cdn_.end()) {
      res.status = 404;
      return;
    }
    auto cut = cut_.find(it->first);
    if (cut != cut_.end() && req.method == "GET") {
      const size_t limit = cut->second;
      cut_.erase(cut);
      const std::string content = it->second;
      res.set_content_provider(
          content.size(), "application/octet-stream",
          [content, limit](size_t offset, size_t length, httplib::DataSink& sink) {
            if (offset >= limit) return false;  // drop the connection
            const size_t n = std::min(length, limit - offset);
            sink.write(content.data() + offset, n);
            return true;
          });
      return;
    }
    res.set_content(it->second, "application/octet-stream");  // httplib answers Range with 206
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::map<std::string, Repo> repos_;
  std::map<std::string, std::string> cdn_;
  std::map<std::string, size_t> cut_;
  int heads_ = 0, gets_ = 0;
  std::vector<std::string> ranges_, auth_;
};

class HubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    root_ = fs::temp_directory_path() /
            ("di_hub_test_" + std::to_string(::getpid()) + "_" + std::to_string(seed_));
    fs::create_directories(root_);
    env_.hf_home = (root_ / "hf").string();
    env_.hf_hub_cache = (root_ / "hf" / "hub").string();
    env_.hf_endpoint = hub_.endpoint();
    opt_.quiet = true;

    // A tiny model: config, tokenizer, and weights big enough to cut mid-transfer.
    std::vector<TensorToWrite> ts;
    for (int i = 0; i < 3; ++i) {
      std::vector<uint8_t> bytes(4 * 64 * 64);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng_());
      ts.push_back({"layer." + std::to_string(i) + ".weight", DType::kF32, {64, 64}, bytes});
    }
    const fs::path w = root_ / "src.safetensors";
    ASSERT_TRUE(write_safetensors(w.string(), ts).ok());
    weights_ = read_file(w);
    commit_ = random_hex(rng_, 40);
    hub_.add_repo(
        "tiny/model",
        {commit_,
         {{"config.json", R"({"model_type": "llama", "seed": )" + std::to_string(seed_) + "}"},
          {"tokenizer.json", R"({"model": {"type": "BPE"}})"},
          {"tokenizer_config.json", R"({"bos_token": "<s>"})"},
          {"model.safetensors", weights_}},
         ""});
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
    if (HasFailure()) std::cerr << "seed " << seed_ << "\n";
  }
  fs::path repo_dir(const std::string& folder = "models--tiny--model") const {
    return fs::path(env_.hf_hub_cache) / folder;
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  FakeHub hub_;
  fs::path root_;
  Env env_;
  ResolveOptions opt_;
  std::string weights_, commit_;
};

TEST_F(HubTest, DownloadCreatesHubCacheLayout) {
  auto dir = resolve_model("tiny/model", env_, opt_);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  const fs::path repo = repo_dir();
  EXPECT_EQ(fs::path(*dir), repo / "snapshots" / commit_);
  EXPECT_EQ(read_file(repo / "refs" / "main"), commit_);

  for (const std::string f :
       {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}) {
    SCOPED_TRACE(f);
    const fs::path pointer = repo / "snapshots" / commit_ / f;
    ASSERT_TRUE(fs::is_symlink(pointer));
    const std::string etag =
        FakeHub::etag_of(f == "model.safetensors" ? weights_ : read_file(pointer));
    EXPECT_EQ(fs::read_symlink(pointer), fs::path("../../blobs/" + etag));  // relative, as hf does
    EXPECT_TRUE(fs::is_regular_file(repo / "blobs" / etag));
    EXPECT_FALSE(fs::exists(repo / "blobs" / (etag + ".incomplete")));
  }
  EXPECT_EQ(read_file(repo / "snapshots" / commit_ / "model.safetensors"), weights_);
  EXPECT_EQ(read_file(repo / "snapshots" / commit_ / "tokenizer.json"),
            R"({"model": {"type": "BPE"}})");
  // The repo has no generation_config.json: remembered like huggingface_hub's .no_exist.
  EXPECT_FALSE(fs::exists(repo / "snapshots" / commit_ / "generation_config.json"));
  EXPECT_TRUE(fs::exists(repo / ".no_exist" / commit_ / "generation_config.json"));
  // No index in the repo, so model.safetensors was fetched; it loads.
  auto ck = Checkpoint::open(*dir);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->tensors().size(), 3u);
  EXPECT_EQ(hub_.gets(), 4);  // 3 small files + 1 CDN GET (the redirect hop is followed by curl)
}

TEST_F(HubTest, SecondResolveDownloadsNothing) {
  auto first = resolve_model("tiny/model", env_, opt_);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  hub_.reset_counts();
  auto second = resolve_model("tiny/model", env_, opt_);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(hub_.gets(), 0);
  // A branch can move: its commit is checked (one HEAD, for config.json, as huggingface_hub
  // does); the other files are then fetched at that commit, which the cache already has.
  EXPECT_EQ(hub_.heads(), 1);
  // A commit sha cannot move: no request at all.
  hub_.reset_counts();
  auto pinned = resolve_model("tiny/model@" + commit_, env_, opt_);
  ASSERT_TRUE(pinned.ok()) << pinned.status().to_string();
  EXPECT_EQ(*pinned, *first);
  EXPECT_EQ(hub_.heads() + hub_.gets(), 0);
}

TEST_F(HubTest, InterruptedTransferResumesWithRange) {
  const size_t cut = 1000 + rng_() % 20000;
  hub_.cut_next_get(weights_, cut);
  ResolveOptions no_retry = opt_;
  no_retry.max_retries = 0;
  auto failed = resolve_model("tiny/model", env_, no_retry);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status().to_string();
  EXPECT_NE(failed.status().message().find("model.safetensors"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("resumed by the next run"), std::string::npos)
      << failed.status().message();
  const fs::path incomplete = repo_dir() / "blobs" / (FakeHub::etag_of(weights_) + ".incomplete");
  ASSERT_TRUE(fs::exists(incomplete));
  EXPECT_EQ(fs::file_size(incomplete), cut);

  hub_.reset_counts();
  auto dir = resolve_model("tiny/model", env_, no_retry);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(hub_.ranges(), std::vector<std::string>{"bytes=" + std::to_string(cut) + "-"});
  EXPECT_FALSE(fs::exists(incomplete));
  EXPECT_EQ(read_file(fs::path(*dir) / "model.safetensors"), weights_);
}

TEST_F(HubTest, DroppedConnectionIsRetriedInOneResolve) {
  const size_t cut = 500 + rng_() % 20000;
  hub_.cut_next_get(weights_, cut);
  auto dir = resolve_model("tiny/model", env_, opt_);  // default: retries, each resuming
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(hub_.ranges(), std::vector<std::string>{"bytes=" + std::to_string(cut) + "-"});
  EXPECT_EQ(read_file(fs::path(*dir) / "model.safetensors"), weights_);
}

TEST_F(HubTest, ShardedCheckpoint) {
  std::vector<std::string> shards;
  std::map<std::string, std::string> files = {{"config.json", "{}"}, {"tokenizer.json", "{}"}};
  std::string weight_map;
  for (int s = 0; s < 2; ++s) {
    const std::string name = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    std::vector<uint8_t> bytes(40);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng_());
    const fs::path p = root_ / name;
    ASSERT_TRUE(
        write_safetensors(p.string(), {{"t" + std::to_string(s), DType::kBF16, {4, 5}, bytes}})
            .ok());
    files[name] = read_file(p);
    weight_map += std::string(s ? "," : "") + "\"t" + std::to_string(s) + "\": \"" + name + "\"";
  }
  files["model.safetensors.index.json"] = "{\"weight_map\": {" + weight_map + "}}";
  hub_.add_repo("tiny/sharded", {commit_, files, ""});
  auto dir = resolve_model("tiny/sharded", env_, opt_);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  auto ck = Checkpoint::open(*dir);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->tensors().size(), 2u);
  EXPECT_FALSE(fs::exists(fs::path(*dir) / "model.safetensors"));  // not asked for
}

TEST_F(HubTest, NotFoundAndAuthErrors) {
  auto missing = resolve_model("tiny/nothing", env_, opt_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  for (const char* part :
       {"tiny/nothing", "revision 'main'", "config.json", "HTTP 404", "repository not found"}) {
    EXPECT_NE(missing.status().message().find(part), std::string::npos)
        << part << ": " << missing.status().message();
  }

  hub_.add_repo("tiny/notok", {commit_, {{"config.json", "{}"}}, ""});
  auto no_tok = resolve_model("tiny/notok", env_, opt_);
  ASSERT_FALSE(no_tok.ok());
  EXPECT_EQ(no_tok.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_tok.status().message().find("file 'tokenizer.json'"), std::string::npos)
      << no_tok.status().message();
  EXPECT_NE(no_tok.status().message().find("file not found"), std::string::npos)
      << no_tok.status().message();

  auto bad_rev = resolve_model("tiny/model@v9", env_, opt_);
  ASSERT_FALSE(bad_rev.ok());
  EXPECT_EQ(bad_rev.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad_rev.status().message().find("revision 'v9'"), std::string::npos)
      << bad_rev.status().message();

  const std::string token = random_hex(rng_, 16);
  hub_.add_repo("gated/model",
                {commit_,
                 {{"config.json", "{}"}, {"tokenizer.json", "{}"}, {"model.safetensors", weights_}},
                 token});
  auto denied = resolve_model("gated/model", env_, opt_);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.status().message().find("HF_TOKEN"), std::string::npos)
      << denied.status().message();
  EXPECT_NE(denied.status().message().find("HTTP 401"), std::string::npos)
      << denied.status().message();

  hub_.reset_counts();
  Env with_token = env_;
  with_token.hf_token = token;
  auto allowed = resolve_model("gated/model", with_token, opt_);
  ASSERT_TRUE(allowed.ok()) << allowed.status().to_string();
  ASSERT_FALSE(hub_.auth().empty());
  for (const auto& a : hub_.auth()) EXPECT_EQ(a, "Bearer " + token);
}

TEST_F(HubTest, OfflineModeUsesOnlyTheCache) {
  ASSERT_TRUE(resolve_model("tiny/model", env_, opt_).ok());
  hub_.reset_counts();
  Env offline = env_;
  offline.hf_hub_offline = true;
  auto dir = resolve_model("tiny/model", offline, opt_);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(fs::path(*dir), repo_dir() / "snapshots" / commit_);
  EXPECT_EQ(hub_.heads() + hub_.gets(), 0);

  auto uncached = resolve_model("tiny/other", offline, opt_);
  ASSERT_FALSE(uncached.ok());
  EXPECT_EQ(uncached.status().code(), StatusCode::kUnavailable);
  for (const char* part :
       {"tiny/other@main", "not in the Hugging Face cache", "HF_HUB_OFFLINE=1"}) {
    EXPECT_NE(uncached.status().message().find(part), std::string::npos)
        << part << ": " << uncached.status().message();
  }
  // A snapshot whose weights are missing names the missing file.
  fs::remove(repo_dir() / "snapshots" / commit_ / "model.safetensors");
  auto partial = resolve_model("tiny/model", offline, opt_);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("'model.safetensors'"), std::string::npos)
      << partial.status().message();
  EXPECT_EQ(hub_.heads() + hub_.gets(), 0);
}

TEST_F(HubTest, UnreachableHubFallsBackToTheCache) {
  ASSERT_TRUE(resolve_model("tiny/model", env_, opt_).ok());
  Env down = env_;
  down.hf_endpoint = "http://127.0.0.1:1";  // nothing listens there: connection refused
  auto dir = resolve_model("tiny/model", down, opt_);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(fs::path(*dir), repo_dir() / "snapshots" / commit_);
  auto uncached = resolve_model("tiny/other", down, opt_);
  ASSERT_FALSE(uncached.ok());
  EXPECT_EQ(uncached.status().code(), StatusCode::kUnavailable);
  for (const char* part : {"127.0.0.1:1", "tiny/other@main", "not in the Hugging Face cache"}) {
    EXPECT_NE(uncached.status().message().find(part), std::string::npos)
        << part << ": " << uncached.status().message();
  }
  // huggingface_hub's lock location.
  EXPECT_TRUE(fs::exists(fs::path(env_.hf_hub_cache) / ".locks" / "models--tiny--model" /
                         (FakeHub::etag_of(weights_) + ".lock")));
}

TEST_F(HubTest, EscapingIdsAndNamesAreRejected) {
  for (const std::string bad :
       {"../etc/passwd", "tiny/..", "../model", "/abs/path/model", "tiny\\model", "tiny//model",
        "tiny/model/extra", "tiny/", "/tiny", "tiny/model@", "tiny/model@../../x",
        "tiny/model@/abs", "tiny/model@a//b", ".hidden/x", "no-slash"}) {
    SCOPED_TRACE(bad);
    auto r = resolve_model(bad, env_, opt_);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(hub_.heads() + hub_.gets(), 0);
  for (const std::string bad : {"../x", "/etc/passwd", "a/../../b", "a\\b", "", "a//b", "./a"}) {
    EXPECT_EQ(validate_repo_file_name(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(validate_repo_file_name("sub/model-00001.safetensors").ok());
  auto ok = parse_hub_id("deepseek-ai/DeepSeek-V4-Flash@refs/pr/1");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->folder_name(), "models--deepseek-ai--DeepSeek-V4-Flash");
  EXPECT_EQ(ok->revision, "refs/pr/1");

  // A served index naming a shard outside the repo is refused before any shard request.
  hub_.add_repo("tiny/evil", {commit_,
                              {{"config.json", "{}"},
                               {"tokenizer.json", "{}"},
                               {"model.safetensors.index.json",
                                R"({"weight_map": {"w": "../../../escape.safetensors"}})"}},
                              ""});
  auto evil = resolve_model("tiny/evil", env_, opt_);
  ASSERT_FALSE(evil.ok());
  EXPECT_EQ(evil.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(evil.status().message().find("../../../escape.safetensors"), std::string::npos)
      << evil.status().message();
}

TEST_F(HubTest, ModelPathOverrideAndLocalDirectories) {
  Env e = env_;
  e.model_path = "tests/data/models/v4tiny_b";
  auto r = resolve_model("tiny/model", e, opt_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "tests/data/models/v4tiny_b");
  e.model_path = (root_ / "does-not-exist").string();
  auto missing = resolve_model("tiny/model", e, opt_);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("DEEPINFER_MODEL_PATH"), std::string::npos);
  auto local = resolve_model("tests/data/models/stories260K/hf", env_, opt_);
  ASSERT_TRUE(local.ok()) << local.status().to_string();
  EXPECT_EQ(*local, "tests/data/models/stories260K/hf");
  EXPECT_EQ(hub_.heads() + hub_.gets(), 0);
}

}  // namespace
}  // namespace deepinfer::io
