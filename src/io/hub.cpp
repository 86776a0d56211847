// Model resolution through the Hugging Face cache, downloading missing files from the Hub.
#include "io/hub.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/logging.h"
#include "io/hub_http.h"

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A server-provided value used as a single path component (commit sha, blob name).
bool is_safe_component(const std::string& s) {
  if (s.empty() || s.size() > 255 || s == "." || s == "..") return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// huggingface_hub's _normalize_etag: drop a weak "W/" prefix and the quotes.
std::string normalize_etag(std::string etag) {
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  while (!etag.empty() && etag.front() == '"') etag.erase(etag.begin());
  while (!etag.empty() && etag.back() == '"') etag.pop_back();
  return etag;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_text_atomic(const fs::path& p, const std::string& text) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  const fs::path tmp = p.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return Internal("cannot write '" + tmp.string() + "'");
  }
  fs::rename(tmp, p, ec);
  if (ec)
    return Internal("cannot rename '" + tmp.string() + "' to '" + p.string() +
                    "': " + ec.message());
  return OkStatus();
}

// An exclusive advisory lock on a file, held while this object lives (RAII).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// The hub-layout paths of one repo.
struct RepoCache {
  fs::path root;   // <cache>/models--org--name
  fs::path locks;  // <cache>/.locks/models--org--name (where huggingface_hub locks, too)
  fs::path lock(const std::string& etag) const { return locks / (etag + ".lock"); }
  fs::path ref(const std::string& rev) const { return root / "refs" / rev; }
  fs::path snapshot(const std::string& commit) const { return root / "snapshots" / commit; }
  fs::path blob(const std::string& etag) const { return root / "blobs" / etag; }
  fs::path no_exist(const std::string& commit, const std::string& file) const {
    return root / ".no_exist" / commit / file;
  }
};

RepoCache repo_cache(const HubId& id, const Env& env) {
  const fs::path cache(hub_cache_dir(env));
  return RepoCache{cache / id.folder_name(), cache / ".locks" / id.folder_name()};
}

// The commit a revision points at in the cache, or "" if unknown.
std::string cached_commit(const RepoCache& rc, const std::string& revision) {
  std::error_code ec;
  if (is_commit_hash(revision) && fs::is_directory(rc.snapshot(revision), ec)) return revision;
  const fs::path ref = rc.ref(revision);
  if (!fs::is_regular_file(ref, ec)) return "";
  std::string commit = read_text(ref);
  while (!commit.empty() &&
         (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' '))
    commit.pop_back();
  return is_safe_component(commit) ? commit : "";
}

// Cache-only lookup of one file: its snapshot path, or kNotFound / kUnavailable naming what is
// missing.
StatusOr<std::string> cached_file(const HubId& id, const RepoCache& rc, const std::string& file,
                                  const std::string& why_offline) {
  const std::string commit = cached_commit(rc, id.revision);
  if (commit.empty()) {
    return Unavailable("model '" + id.to_string() + "' is not in the Hugging Face cache (no '" +
                       rc.ref(id.revision).string() + "') and " + why_offline);
  }
  std::error_code ec;
  const fs::path p = rc.snapshot(commit) / file;
  if (fs::exists(p, ec)) return p.string();  // follows the symlink: the blob must be there
  if (fs::exists(rc.no_exist(commit, file), ec)) {
    return NotFound("model '" + id.to_string() + "' has no file '" + file + "' (cached answer)");
  }
  return Unavailable("file '" + file + "' of model '" + id.to_string() + "' (commit " + commit +
                     ") is not in the Hugging Face cache ('" + p.string() + "' missing) and " +
                     why_offline);
}

std::vector<std::string> auth_headers(const Env& env) {
  std::vector<std::string> h;
  if (env.hf_token && !env.hf_token->empty()) h.push_back("Authorization: Bearer " + *env.hf_token);
  return h;
}

std::string endpoint(const Env& env) {
  std::string e = env.hf_endpoint;
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

// The URL's "scheme://host[:port]" part.
std::string origin_of(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t path = url.find('/', scheme + 3);
  return path == std::string::npos ? url : url.substr(0, path);
}

Status http_error(const HubId& id, const std::string& file, const std::string& url,
                  const http::Response& r) {
  const std::string what = "model '" + id.repo_id() + "' revision '" + id.revision + "' file '" +
                           file + "' (" + url + "): HTTP " + std::to_string(r.status);
  const std::string code = r.header("x-error-code");
  if (r.status == 401 || r.status == 403) {
    return PermissionDenied(what +
                            ": access denied. If the repository is private or gated, "
                            "accept its terms on the Hub and set HF_TOKEN to an access token");
  }
  if (r.status == 404) {
    if (code == "RepoNotFound") {
      return NotFound(what + ": repository not found (if it is private or gated, set HF_TOKEN)");
    }
    if (code == "RevisionNotFound") return NotFound(what + ": revision not found");
    return NotFound(what + ": file not found");
  }
  return Unavailable(what + (r.body.empty() ? std::string() : ": " + r.body.substr(0, 300)));
}

struct FileMeta {
  std::string commit;
  std::string etag;
  std::string download_url;
  uint64_t size = 0;  // 0: unknown
};

StatusOr<FileMeta> fetch_meta(const HubId& id, const RepoCache& rc, const std::string& file,
                              const Env& env, const ResolveOptions& opt) {
  const std::string base = endpoint(env);
  std::string url = base + "/" + id.repo_id() + "/resolve/" + http::url_quote(id.revision, false) +
                    "/" + http::url_quote(file, true);
  const std::string first_url = url;
  for (int hop = 0; hop < 5; ++hop) {
    DI_ASSIGN_OR_RETURN(http::Response r,
                        http::head(url, auth_headers(env), opt.connect_timeout_s));
    if (r.status == 404 && r.header("x-error-code") == "EntryNotFound") {
      const std::string commit = r.header("x-repo-commit");
      if (is_safe_component(commit)) {  // remember the absence, as huggingface_hub does
        std::error_code ec;
        fs::create_directories(rc.no_exist(commit, file).parent_path(), ec);
        std::ofstream touch(rc.no_exist(commit, file));
      }
    }
    const bool redirect = r.status >= 300 && r.status < 400;
    if (!redirect && r.status != 200) return http_error(id, file, first_url, r);
    FileMeta m;
    m.commit = r.header("x-repo-commit");
    m.etag = normalize_etag(!r.header("x-linked-etag").empty() ? r.header("x-linked-etag")
                                                               : r.header("etag"));
    std::string location = r.header("location");
    if (!location.empty() && location.front() == '/') location = origin_of(url) + location;
    if (redirect && location.empty()) {
      return Unavailable("HEAD " + url + " answered HTTP " + std::to_string(r.status) +
                         " without a Location");
    }
    if (redirect && m.commit.empty()) {
      // A redirect without hub metadata (e.g. a renamed repo): follow it on the same host only.
      if (origin_of(location) != origin_of(url)) {
        return Unavailable("HEAD " + url + " redirected to another host without X-Repo-Commit");
      }
      url = location;
      continue;
    }
    if (!is_safe_component(m.commit) || !is_safe_component(m.etag)) {
      return DataLoss("HEAD " + first_url + ": the server sent an unusable X-Repo-Commit '" +
                      m.commit + "' or ETag '" + m.etag +
                      "' (expected letters, digits, '-', '_', '.'); is HF_ENDPOINT a Hub server?");
    }
    m.download_url = redirect ? location : url;
    const std::string size = !r.header("x-linked-size").empty()
                                 ? r.header("x-linked-size")
                                 : (redirect ? "" : r.header("content-length"));
    if (!size.empty()) {
      try {
        m.size = std::stoull(size);
      } catch (...) {
        m.size = 0;
      }
    }
    return m;
  }
  return Unavailable("HEAD " + first_url + ": too many redirects");
}

// Points snapshots/<commit>/<file> at blobs/<etag> with a relative symlink, atomically.
Status link_snapshot(const RepoCache& rc, const std::string& commit, const std::string& file,
                     const std::string& etag) {
  const fs::path pointer = rc.snapshot(commit) / file;
  std::error_code ec;
  fs::create_directories(pointer.parent_path(), ec);
  std::string target;
  const size_t depth = static_cast<size_t>(std::count(file.begin(), file.end(), '/'));
  for (size_t i = 0; i < depth + 2; ++i) target += "../";
  target += "blobs/" + etag;
  const fs::path tmp = pointer.string() + ".tmp" + std::to_string(::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) return Internal("cannot create symlink '" + tmp.string() + "': " + ec.message());
  fs::rename(tmp, pointer, ec);
  if (ec)
    return Internal("cannot rename '" + tmp.string() + "' to '" + pointer.string() +
                    "': " + ec.message());
  return OkStatus();
}

Status download_blob(const HubId& id, const RepoCache& rc, const std::string& file,
                     const FileMeta& m, const Env& env, const ResolveOptions& opt) {
  const fs::path blob = rc.blob(m.etag);
  std::error_code ec;
  fs::create_directories(blob.parent_path(), ec);
  fs::create_directories(rc.locks, ec);
  FileLock lock(rc.lock(m.etag).string());      // one downloader per blob across processes
  if (fs::exists(blob, ec)) return OkStatus();  // another process finished it meanwhile
  const std::string incomplete = blob.string() + ".incomplete";
  http::Progress progress;
  progress.label = id.repo_id() + "/" + file;
  progress.tty = ::isatty(STDERR_FILENO) != 0;
  progress.quiet = opt.quiet;
  if (!opt.quiet) {
    log_info("downloading " + progress.label + " (" +
             (m.size ? std::to_string(m.size) + " bytes" : std::string("size unknown")) +
             ") from " + m.download_url);
  }
  Status last;
  for (int attempt = 0; attempt <= opt.max_retries; ++attempt) {
    const uint64_t have = fs::exists(incomplete, ec) ? fs::file_size(incomplete, ec) : 0;
    if (have > 0 && !opt.quiet)
      log_info("resuming " + progress.label + " at byte " + std::to_string(have));
    auto r = http::get_to_file(m.download_url, auth_headers(env), incomplete, have, m.size,
                               opt.connect_timeout_s, progress);
    if (!r.ok()) {
      last = r.status();
      if (r.status().code() != StatusCode::kUnavailable) return last;  // local error: no retry
      if (!opt.quiet && attempt < opt.max_retries) log_warning(last.message() + "; retrying");
      continue;
    }
    const bool range_done = r->status == 416 && m.size != 0 && have == m.size;
    if (r->status >= 300 && !range_done) return http_error(id, file, m.download_url, *r);
    const uint64_t got = fs::file_size(incomplete, ec);
    if (m.size != 0 && got != m.size) {
      last = Unavailable("download of '" + file + "' for model '" + id.to_string() + "' ended at " +
                         std::to_string(got) + " of " + std::to_string(m.size) + " bytes");
      if (got > m.size) fs::remove(incomplete, ec);  // garbage: start over
      continue;
    }
    fs::rename(incomplete, blob, ec);  // atomic: a blob is complete or absent
    if (ec)
      return Internal("cannot rename '" + incomplete + "' to '" + blob.string() +
                      "': " + ec.message());
    if (!opt.quiet)
      log_info("downloaded " + progress.label + " (" + std::to_string(got) + " bytes)");
    return OkStatus();
  }
  return Status(last.code(), "downloading '" + file + "' of model '" + id.to_string() +
                                 "': " + last.message() + " (the partial download in '" +
                                 incomplete + "' is resumed by the next run)");
}

}  // namespace

StatusOr<std::string> hub_download_file(const HubId& id, const std::string& file, const Env& env,
                                        const ResolveOptions& opt) {
  DI_RETURN_IF_ERROR(validate_repo_file_name(file));
  const RepoCache rc = repo_cache(id, env);
  std::error_code ec;
  // A commit sha cannot move: a file already in its snapshot needs no network.
  if (is_commit_hash(id.revision)) {
    if (fs::exists(rc.snapshot(id.revision) / file, ec))
      return (rc.snapshot(id.revision) / file).string();
    if (fs::exists(rc.no_exist(id.revision, file), ec)) {
      return NotFound("model '" + id.to_string() + "' has no file '" + file + "' (cached answer)");
    }
  }
  if (env.hf_hub_offline) {
    return cached_file(id, rc, file, "HF_HUB_OFFLINE=1 forbids downloading it");
  }
  auto meta = fetch_meta(id, rc, file, env, opt);
  if (!meta.ok()) {
    if (meta.status().code() == StatusCode::kUnavailable) {
      // No connection: use the cache when it has the file, as huggingface_hub does.
      auto cached = cached_file(id, rc, file, "the Hub cannot be reached");
      if (cached.ok()) {
        log_warning(meta.status().message() + "; using the cached copy");
        return cached;
      }
      return Unavailable(meta.status().message() + "; and " + cached.status().message());
    }
    return meta.status();
  }
  const FileMeta& m = *meta;
  if (id.revision != m.commit) {
    const fs::path ref = rc.ref(id.revision);
    if (!fs::exists(ref, ec) || read_text(ref) != m.commit)
      DI_RETURN_IF_ERROR(write_text_atomic(ref, m.commit));
  }
  const fs::path pointer = rc.snapshot(m.commit) / file;
  if (fs::exists(pointer, ec)) return pointer.string();
  if (!fs::exists(rc.blob(m.etag), ec))
    DI_RETURN_IF_ERROR(download_blob(id, rc, file, m, env, opt));
  DI_RETURN_IF_ERROR(link_snapshot(rc, m.commit, file, m.etag));
  return pointer.string();
}

namespace {

// The shard names of a model.safetensors.index.json (validated repository file names).
StatusOr<std::vector<std::string>> index_shards(const std::string& index_path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(index_path));
  } catch (const nlohmann::json::exception& e) {
    return DataLoss("index '" + index_path + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return DataLoss("index '" + index_path + "' has no \"weight_map\" object");
  }
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) {
      return DataLoss("index '" + index_path + "': weight_map entry for tensor '" + tensor +
                      "' is not a string");
    }
    const auto& s = shard.get_ref<const std::string&>();
    DI_RETURN_IF_ERROR(validate_repo_file_name(s).with_context("index '" + index_path +
                                                               "', tensor '" + tensor + "'"));
    shards.insert(s);
  }
  return std::vector<std::string>(shards.begin(), shards.end());
}

StatusOr<std::string> resolve_hub(const HubId& id, const Env& env, const ResolveOptions& opt) {
  // Pin the commit with the first file so that every file comes from the same snapshot even
  // if the branch moves meanwhile.
  DI_ASSIGN_OR_RETURN(std::string config_path, hub_download_file(id, "config.json", env, opt));
  const fs::path snapshot = fs::path(config_path).parent_path();
  HubId pinned = id;
  pinned.revision = snapshot.filename().string();

  auto fetch = [&](const std::string& file, bool required) -> Status {
    auto r = hub_download_file(pinned, file, env, opt);
    if (r.ok()) return OkStatus();
    if (!required && r.status().code() == StatusCode::kNotFound) return OkStatus();
    return Status(r.status().code(), r.status().message() + " (model '" + id.to_string() + "')");
  };
  DI_RETURN_IF_ERROR(fetch("tokenizer.json", true));
  DI_RETURN_IF_ERROR(fetch("generation_config.json", false));
  DI_RETURN_IF_ERROR(fetch("tokenizer_config.json", false));
  for (const auto& f : opt.extra_files) DI_RETURN_IF_ERROR(fetch(f, true));
  if (opt.download_weights) {
    auto index = hub_download_file(pinned, "model.safetensors.index.json", env, opt);
    if (index.ok()) {
      DI_ASSIGN_OR_RETURN(auto shards, index_shards(*index));
      for (const auto& s : shards) DI_RETURN_IF_ERROR(fetch(s, true));
    } else if (index.status().code() == StatusCode::kNotFound) {
      DI_RETURN_IF_ERROR(fetch("model.safetensors", true));
    } else {
      return index.status();
    }
  }
  return snapshot.string();
}

}  // namespace

StatusOr<std::string> resolve_model(const std::string& model_arg, const Env& env,
                                    const ResolveOptions& opt) {
  std::error_code ec;
  if (env.model_path) {
    if (!fs::exists(*env.model_path, ec)) {
      return NotFound("DEEPINFER_MODEL_PATH='" + *env.model_path + "' does not exist");
    }
    return *env.model_path;
  }
  if (!model_arg.empty() && fs::exists(model_arg, ec)) return model_arg;
  DI_ASSIGN_OR_RETURN(HubId id, parse_hub_id(model_arg));
  return resolve_hub(id, env, opt);
}

}  // namespace deepinfer::io
