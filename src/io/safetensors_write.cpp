// write_safetensors: a small, correct writer for tests and tools that build tiny checkpoints.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace deepinfer::io {

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) header["__metadata__"][k] = v;
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        return InvalidArgument("write_safetensors: tensor '" + t.name +
                               "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t need = dtype_bytes(t.dtype, numel);
    if (need != t.bytes.size()) {
      return InvalidArgument("write_safetensors: tensor '" + t.name + "' needs " +
                             std::to_string(need) + " bytes, got " +
                             std::to_string(t.bytes.size()));
    }
    if (header.contains(t.name)) {
      return InvalidArgument("write_safetensors: duplicate tensor '" + t.name + "'");
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + need}}};
    offset += need;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // keep the data section 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return NotFound("write_safetensors: cannot create '" + path + "'");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()),
              static_cast<std::streamsize>(t.bytes.size()));
  }
  out.close();
  if (!out) return DataLoss("write_safetensors: error writing '" + path + "'");
  return OkStatus();
}

}  // namespace deepinfer::io
