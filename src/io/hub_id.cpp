// Hub id and repository file name validation: nothing from a model argument or a server reply
// may point outside the cache.
#include <string>

#include "io/hub.h"

namespace deepinfer::io {
namespace {

bool has_control_char(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return true;
  }
  return false;
}

// Checks every '/'-separated component of `s`: non-empty, not "." or "..".
std::string bad_component(std::string_view s) {
  size_t start = 0;
  while (true) {
    const size_t slash = s.find('/', start);
    const std::string_view part =
        s.substr(start, slash == std::string_view::npos ? s.npos : slash - start);
    if (part.empty()) return "has an empty path component";
    if (part == "." || part == "..") return "has a '" + std::string(part) + "' path component";
    if (slash == std::string_view::npos) return "";
    start = slash + 1;
  }
}

// Hub org and repo names: letters, digits, '-', '_', '.'; not "." or "..", no leading '.' or '-'.
std::string bad_name_part(std::string_view part) {
  if (part.empty()) return "is empty";
  if (part.size() > 96) return "is longer than 96 characters";
  if (part == "." || part == "..") return "is '" + std::string(part) + "'";
  if (part.front() == '.' || part.front() == '-')
    return "starts with '" + std::string(1, part.front()) + "'";
  for (char c : part) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok)
      return "contains the character '" + std::string(1, c) + "' (allowed: letters, digits, - _ .)";
  }
  if (part.find("..") != std::string_view::npos) return "contains '..'";
  return "";
}

}  // namespace

Status validate_repo_file_name(std::string_view file) {
  std::string why;
  if (file.empty())
    why = "is empty";
  else if (file.front() == '/')
    why = "is an absolute path";
  else if (file.find('\\') != std::string_view::npos)
    why = "contains a backslash";
  else if (has_control_char(file))
    why = "contains a control character";
  else
    why = bad_component(file);
  if (why.empty()) return OkStatus();
  return InvalidArgument("repository file name '" + std::string(file) + "' " + why +
                         " (expected a relative path inside the repository)");
}

StatusOr<HubId> parse_hub_id(std::string_view arg) {
  auto invalid = [&](const std::string& why) {
    return InvalidArgument("model '" + std::string(arg) + "' is not a local path and not a valid " +
                           "Hub id (expected 'org/name' or 'org/name@revision'): " + why);
  };
  if (arg.empty()) return invalid("it is empty");
  if (has_control_char(arg)) return invalid("it contains a control character");
  if (arg.find('\\') != std::string_view::npos) return invalid("it contains a backslash");
  if (arg.front() == '/') return invalid("it is an absolute path that does not exist");
  HubId id;
  std::string_view repo = arg;
  const size_t at = arg.find('@');
  if (at != std::string_view::npos) {
    repo = arg.substr(0, at);
    const std::string_view rev = arg.substr(at + 1);
    if (rev.empty()) return invalid("the revision after '@' is empty");
    if (rev.front() == '/')
      return invalid("the revision '" + std::string(rev) + "' starts with '/'");
    if (rev.size() > 255) return invalid("the revision is longer than 255 characters");
    const std::string why = bad_component(rev);
    if (!why.empty()) return invalid("the revision '" + std::string(rev) + "' " + why);
    id.revision = std::string(rev);
  }
  const size_t slash = repo.find('/');
  if (slash == std::string_view::npos) return invalid("there is no '/' between org and name");
  if (repo.find('/', slash + 1) != std::string_view::npos)
    return invalid("it has more than one '/'");
  const std::string_view org = repo.substr(0, slash), name = repo.substr(slash + 1);
  if (std::string why = bad_name_part(org); !why.empty())
    return invalid("the org '" + std::string(org) + "' " + why);
  if (std::string why = bad_name_part(name); !why.empty())
    return invalid("the name '" + std::string(name) + "' " + why);
  id.org = std::string(org);
  id.name = std::string(name);
  return id;
}

std::string hub_cache_dir(const Env& env) {
  if (!env.hf_hub_cache.empty()) return env.hf_hub_cache;
  return env.hf_home + "/hub";
}

}  // namespace deepinfer::io
