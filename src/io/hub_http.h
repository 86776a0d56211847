// Minimal libcurl wrappers used by the Hub downloader (internal to di_io).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepinfer::io::http {

struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the last response, keys lower-cased
  std::string body;                            // error bodies only (bounded)
  std::string header(const std::string& lower_key) const {
    auto it = headers.find(lower_key);
    return it == headers.end() ? std::string() : it->second;
  }
};

// HEAD without following redirects. A transport failure (no connection, timeout) is kUnavailable.
StatusOr<Response> head(const std::string& url, const std::vector<std::string>& headers,
                        long connect_timeout_s);

struct Progress {
  std::string label;  // shown in the bar / log lines
  bool tty = false;   // draw a bar on stderr; otherwise log a few lines
  bool quiet = false;
};

// GET `url` (following redirects) into `path`. If `path` already holds `resume_from` bytes a
// "Range: bytes=<resume_from>-" request continues it; a server that answers 200 instead of 206
// restarts the file. On a transport failure the partial file is kept (kUnavailable). On an HTTP
// error status the file is left as it was and the response (status, headers, body) is returned.
StatusOr<Response> get_to_file(const std::string& url, const std::vector<std::string>& headers,
                               const std::string& path, uint64_t resume_from,
                               uint64_t expected_total, long connect_timeout_s,
                               const Progress& progress);

// Percent-encodes everything except unreserved characters (RFC 3986), like quote(s, safe="").
std::string url_quote(const std::string& s, bool keep_slash);

}  // namespace deepinfer::io::http
