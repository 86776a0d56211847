// Model resolution: a local directory, or a Hugging Face Hub id resolved through the HF cache
// (downloading what is missing), laid out exactly as huggingface_hub does:
//
//   <HF_HUB_CACHE>/models--<org>--<name>/
//       refs/<revision>                 file holding the commit sha the revision pointed at
//       snapshots/<commit>/<file>       relative symlink -> ../../blobs/<etag>
//       blobs/<etag>                    file contents (named by the normalized ETag)
//       blobs/<etag>.incomplete         partial download, resumed with an HTTP Range request
//       .no_exist/<commit>/<file>       marker: an optional file the repo does not have
//
//   DI_ASSIGN_OR_RETURN(std::string dir, io::resolve_model("deepseek-ai/DeepSeek-V4-Flash",
//   env()));
//
// Download: HEAD <HF_ENDPOINT>/<org>/<name>/resolve/<revision>/<file> without following
// redirects to a CDN (X-Repo-Commit, X-Linked-Etag/ETag, X-Linked-Size), then GET (redirects
// followed; Authorization: Bearer $HF_TOKEN is only sent to the endpoint's host).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"

namespace deepinfer::io {

// "org/name[@revision]".
struct HubId {
  std::string org;
  std::string name;
  std::string revision = "main";
  std::string repo_id() const { return org + "/" + name; }  // "org/name"
  std::string folder_name() const { return "models--" + org + "--" + name; }
  std::string to_string() const { return repo_id() + "@" + revision; }
};

// Parses and validates a Hub id. Rejects anything that could escape the cache: "..", ".",
// empty parts, absolute paths, backslashes, control characters, more than one '/' in the id.
// A revision may contain '/' (e.g. "refs/pr/1") but no empty, "." or ".." component.
StatusOr<HubId> parse_hub_id(std::string_view arg);

// A repository file name ("config.json", "sub/x.safetensors"): relative, no "..", "." or empty
// components, no backslash, no leading '/'.
Status validate_repo_file_name(std::string_view file);

// The hub cache directory: env.hf_hub_cache, else env.hf_home + "/hub".
std::string hub_cache_dir(const Env& env);

struct ResolveOptions {
  // Files fetched besides config.json, tokenizer.json, the optional generation_config.json and
  // tokenizer_config.json, and the weights (index + shards, or model.safetensors).
  std::vector<std::string> extra_files;
  bool download_weights = true;  // false: config/tokenizer files only
  int max_retries = 3;           // re-tries (each resuming) after a dropped connection
  long connect_timeout_s = 30;
  bool quiet = false;  // no progress output at all
};

// Resolves a model argument to a local directory:
//   1. env.model_path (DEEPINFER_MODEL_PATH) when set: that directory, whatever `model_arg` is;
//   2. an existing local path (directory or file): returned as is;
//   3. otherwise a Hub id: the snapshot directory in the HF cache, after downloading missing
//      files (or, with env.hf_hub_offline, from the cache alone, without any network access).
StatusOr<std::string> resolve_model(const std::string& model_arg, const Env& env,
                                    const ResolveOptions& options = {});

// Downloads (if needed) one file of a Hub repo into the cache and returns its snapshot path.
// A file the repo does not have gives kNotFound (and a .no_exist marker, as huggingface_hub).
StatusOr<std::string> hub_download_file(const HubId& id, const std::string& file, const Env& env,
                                        const ResolveOptions& options = {});

}  // namespace deepinfer::io
