// Checkpoint: every tensor of a model directory, single-file or sharded through
// model.safetensors.index.json.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "io/safetensors.h"

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// A shard name must be a plain file name inside the checkpoint directory.
Status check_shard_name(const std::string& shard, const std::string& tensor,
                        const std::string& index_path) {
  std::string why;
  if (shard.empty())
    why = "is empty";
  else if (shard == "." || shard == "..")
    why = "is not a file name";
  else if (shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos)
    why = "contains a path separator (shards must be plain file names in the same directory)";
  else if (shard.find('\0') != std::string::npos)
    why = "contains a NUL byte";
  if (why.empty()) return OkStatus();
  return InvalidArgument("index '" + index_path + "': shard file name '" + shard +
                         "' for tensor '" + tensor + "' " + why);
}

StatusOr<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLoss("error reading '" + path + "'");
  return ss.str();
}

// weight_map of an index: tensor name -> shard file name (validated).
StatusOr<std::vector<std::pair<std::string, std::string>>> read_index(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::string text, read_small_file(path));
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    return DataLoss("index '" + path + "' is not valid JSON: " + e.what());
  }
  if (!index.is_object()) return DataLoss("index '" + path + "' must be a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return DataLoss("index '" + path +
                    "' has no \"weight_map\" object (expected {tensor name: shard file name})");
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string()) {
      return DataLoss("index '" + path + "': weight_map entry for tensor '" + tensor +
                      "' must be a shard file name string, got " + shard.dump());
    }
    const auto& s = shard.get_ref<const std::string&>();
    DI_RETURN_IF_ERROR(check_shard_name(s, tensor, path));
    out.emplace_back(tensor, s);
  }
  if (out.empty()) return DataLoss("index '" + path + "' has an empty weight_map");
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir_or_file) {
  std::error_code ec;
  const fs::path arg(dir_or_file);
  if (!fs::exists(arg, ec)) return NotFound("checkpoint path '" + dir_or_file + "' does not exist");
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());

  fs::path index_path;
  std::vector<std::string> single_files;
  if (fs::is_directory(arg, ec)) {
    ckpt->directory_ = arg.string();
    if (fs::exists(arg / kIndexName, ec)) {
      index_path = arg / kIndexName;
    } else if (fs::exists(arg / kSingleName, ec)) {
      single_files.push_back((arg / kSingleName).string());
    } else {
      return NotFound("checkpoint directory '" + dir_or_file + "' has neither " + kIndexName +
                      " nor " + kSingleName);
    }
  } else {
    ckpt->directory_ = arg.has_parent_path() ? arg.parent_path().string() : std::string(".");
    if (arg.extension() == ".json")
      index_path = arg;
    else
      single_files.push_back(arg.string());
  }

  std::unordered_map<std::string, const TensorInfo*> by_name;
  auto add_file = [&](std::unique_ptr<SafetensorsFile> f) -> Status {
    for (const TensorInfo& t : f->tensors()) {
      auto [it, inserted] = by_name.emplace(t.name, &t);
      if (!inserted) {
        return DataLoss("tensor '" + t.name + "' appears in two files: '" + it->second->file +
                        "' and '" + t.file + "'");
      }
    }
    ckpt->files_.push_back(std::move(f));
    return OkStatus();
  };

  if (!index_path.empty()) {
    const std::string ipath = index_path.string();
    DI_ASSIGN_OR_RETURN(auto weight_map, read_index(ipath));
    std::vector<std::string> shards;
    for (const auto& [tensor, shard] : weight_map) {
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    std::sort(shards.begin(), shards.end());
    for (const std::string& shard : shards) {
      const fs::path p = fs::path(ckpt->directory_) / shard;
      if (!fs::is_regular_file(p, ec)) {
        return NotFound("index '" + ipath + "' names shard '" + shard + "' but '" + p.string() +
                        "' does not exist");
      }
      DI_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(p.string()));
      DI_RETURN_IF_ERROR(add_file(std::move(f)));
    }
    // The index and the shards must agree exactly.
    std::unordered_map<std::string, const std::string*> listed;
    for (const auto& [tensor, shard] : weight_map) {
      listed.emplace(tensor, &shard);
      auto it = by_name.find(tensor);
      const std::string shard_path = (fs::path(ckpt->directory_) / shard).string();
      if (it == by_name.end()) {
        return DataLoss("index '" + ipath + "' lists tensor '" + tensor + "' in shard '" +
                        shard_path + "' but that shard does not contain it");
      }
      if (it->second->file != shard_path) {
        return DataLoss("index '" + ipath + "' lists tensor '" + tensor + "' in shard '" +
                        shard_path + "' but it is stored in '" + it->second->file + "'");
      }
    }
    for (const auto& [name, t] : by_name) {
      if (!listed.count(name)) {
        return DataLoss("shard '" + t->file + "' contains tensor '" + name + "' which index '" +
                        ipath + "' does not list");
      }
    }
  } else {
    for (const std::string& path : single_files) {
      DI_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(path));
      DI_RETURN_IF_ERROR(add_file(std::move(f)));
    }
  }

  for (const auto& f : ckpt->files_) {
    for (const TensorInfo& t : f->tensors()) ckpt->sorted_.push_back(&t);
  }
  std::sort(ckpt->sorted_.begin(), ckpt->sorted_.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  return ckpt;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), name,
                             [](const TensorInfo* t, std::string_view n) { return t->name < n; });
  return (it != sorted_.end() && (*it)->name == name) ? *it : nullptr;
}

}  // namespace deepinfer::io
