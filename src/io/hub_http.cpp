// libcurl wrappers for the Hub downloader: HEAD for metadata, resumable GET into a file with a
// progress bar (TTY) or a few log lines.
#include "io/hub_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>

#include "common/logging.h"

namespace deepinfer::io::http {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

std::string trim(std::string s) {
  const auto not_space = [](char c) { return c != ' ' && c != '\t' && c != '\r' && c != '\n'; };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

// Header callback: keeps the headers of the LAST response (a redirect chain restarts them).
size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    r->headers.clear();
  } else if (auto colon = line.find(':'); colon != std::string::npos) {
    std::string key = line.substr(0, colon);
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    r->headers[key] = trim(line.substr(colon + 1));
  }
  return size * n;
}

SlistPtr make_headers(const std::vector<std::string>& headers) {
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  return SlistPtr(list);
}

void common_options(CURL* c, const std::string& url, curl_slist* headers, long connect_timeout_s,
                    Response* r, char* errbuf) {
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "deepinfer/0.1");
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "identity");
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  // A stalled transfer (under 1 byte/s for 60 s) is a failure, not a hang.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
}

Status transport_error(const std::string& what, const std::string& url, CURLcode rc,
                       const char* errbuf) {
  return Unavailable(what + " " + url + " failed: " +
                     (errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc))));
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

struct GetState {
  Response* response = nullptr;
  CURL* curl = nullptr;
  std::string path;
  uint64_t resume_from = 0;
  uint64_t expected_total = 0;
  FILE* file = nullptr;
  bool decided = false;
  bool error_status = false;
  Status file_error;
  const Progress* progress = nullptr;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw{};
  int last_quarter = 0;
  bool drew_complete = false;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<GetState*>(user);
  const size_t bytes = size * n;
  if (!s->decided) {
    s->decided = true;
    long status = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300) {
      s->error_status = true;
    } else {
      // 206: continue the partial file; 200: the server sent everything, start over.
      const bool append = status == 206 && s->resume_from > 0;
      s->file = std::fopen(s->path.c_str(), append ? "ab" : "wb");
      if (!s->file) {
        s->file_error = Internal("cannot write '" + s->path + "'");
        return 0;
      }
      if (!append) s->resume_from = 0;
    }
  }
  if (s->error_status) {
    if (s->response->body.size() < 4096)
      s->response->body.append(data, std::min<size_t>(bytes, 4096));
    return bytes;
  }
  if (std::fwrite(data, 1, bytes, s->file) != bytes) {
    s->file_error = Internal("short write to '" + s->path + "' (disk full?)");
    return 0;
  }
  return bytes;
}

int on_progress(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* s = static_cast<GetState*>(user);
  if (s->progress->quiet || s->error_status) return 0;
  const double total = s->expected_total ? static_cast<double>(s->expected_total)
                                         : static_cast<double>(s->resume_from + dltotal);
  const double now_bytes = static_cast<double>(s->resume_from + dlnow);
  const auto now = std::chrono::steady_clock::now();
  if (s->progress->tty) {
    const bool complete = total > 0 && now_bytes >= total;
    if (complete ? s->drew_complete : now - s->last_draw < std::chrono::milliseconds(100)) return 0;
    s->last_draw = now;
    s->drew_complete = complete;
    const double secs = std::chrono::duration<double>(now - s->start).count();
    const double rate = secs > 0 ? static_cast<double>(dlnow) / secs : 0;
    const double frac = total > 0 ? std::min(1.0, now_bytes / total) : 0;
    const int width = 30, filled = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r%-40.40s [%s%s] %3d%% %s/%s %s/s ", s->progress->label.c_str(),
                 std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                 static_cast<int>(frac * 100), human_bytes(now_bytes).c_str(),
                 human_bytes(total).c_str(), human_bytes(rate).c_str());
    std::fflush(stderr);
  } else if (total > 0) {
    const int quarter = static_cast<int>(4 * now_bytes / total);
    if (quarter > s->last_quarter && quarter < 4) {
      s->last_quarter = quarter;
      log_info(s->progress->label + ": " + std::to_string(quarter * 25) + "% (" +
               human_bytes(now_bytes) + " of " + human_bytes(total) + ")");
    }
  }
  return 0;
}

}  // namespace

std::string url_quote(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

StatusOr<Response> head(const std::string& url, const std::vector<std::string>& headers,
                        long connect_timeout_s) {
  global_init();
  CurlPtr c(curl_easy_init());
  if (!c) return Internal("curl_easy_init failed");
  Response r;
  char errbuf[CURL_ERROR_SIZE] = {0};
  SlistPtr list = make_headers(headers);
  common_options(c.get(), url, list.get(), connect_timeout_s, &r, errbuf);
  curl_easy_setopt(c.get(), CURLOPT_NOBODY, 1L);
  curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c.get(), CURLOPT_TIMEOUT, std::max(connect_timeout_s, 10L) * 2);
  const CURLcode rc = curl_easy_perform(c.get());
  if (rc != CURLE_OK) return transport_error("HEAD", url, rc, errbuf);
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &r.status);
  return r;
}

StatusOr<Response> get_to_file(const std::string& url, const std::vector<std::string>& headers,
                               const std::string& path, uint64_t resume_from,
                               uint64_t expected_total, long connect_timeout_s,
                               const Progress& progress) {
  global_init();
  CurlPtr c(curl_easy_init());
  if (!c) return Internal("curl_easy_init failed");
  Response r;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::vector<std::string> all = headers;
  if (resume_from > 0) all.push_back("Range: bytes=" + std::to_string(resume_from) + "-");
  SlistPtr list = make_headers(all);
  common_options(c.get(), url, list.get(), connect_timeout_s, &r, errbuf);
  GetState s;
  s.response = &r;
  s.curl = c.get();
  s.path = path;
  s.resume_from = resume_from;
  s.expected_total = expected_total;
  s.progress = &progress;
  curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.get(), CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &s);
  curl_easy_setopt(c.get(), CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c.get(), CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c.get(), CURLOPT_XFERINFODATA, &s);
  const CURLcode rc = curl_easy_perform(c.get());
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &r.status);
  if (s.file && std::fclose(s.file) != 0 && s.file_error.ok()) {
    s.file_error = Internal("error closing '" + path + "' (disk full?)");
  }
  if (progress.tty && !progress.quiet && !s.error_status) std::fprintf(stderr, "\n");
  if (!s.file_error.ok()) return s.file_error;
  if (rc != CURLE_OK) return transport_error("GET", url, rc, errbuf);
  if (!s.decided && r.status < 300 && r.status != 0) {
    // Empty body (a 0-byte file, or nothing left after the range): make sure the file exists.
    const bool append = r.status == 206 && resume_from > 0;
    if (FILE* f = std::fopen(path.c_str(), append ? "ab" : "wb")) std::fclose(f);
  }
  return r;
}

}  // namespace deepinfer::io::http
