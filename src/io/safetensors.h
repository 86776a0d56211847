// Read-only, mmap-backed access to safetensors checkpoints.
//
//   DI_ASSIGN_OR_RETURN(auto ckpt, io::Checkpoint::open("tests/data/models/v4tiny_b"));
//   const io::TensorInfo* w = ckpt->find("model.embed_tokens.weight");  // F32 [320, 128]
//
// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"k": "v"}}, then the data section; offsets are relative to its start.
// Everything is validated on open: a file that opens is safe to read through every TensorInfo.
// Errors: kDataLoss for corrupt/truncated files, kNotFound for missing files or tensors,
// kInvalidArgument for bad names (e.g. a shard path escaping its directory). Every message names
// the file, the tensor when relevant, and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtypes.h"
#include "common/status.h"

namespace deepinfer::io {

// A view into a mapped file; valid while the owning SafetensorsFile / Checkpoint lives.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // start of the tensor bytes (mmap). Aligned only if the writer
                                  // padded the header to 8 bytes (HF writers and ours do): the
                                  // format does not promise it, so read unaligned-safely (memcpy)
  uint64_t nbytes = 0;
  std::string file;         // path of the file it lives in (for error messages)
  uint64_t data_begin = 0;  // offsets within the data section, as in the header
  uint64_t data_end = 0;
  int64_t numel() const;  // product of shape (1 for a scalar [])
};

// Read-only memory map of a whole file (RAII).
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in header order
  const TensorInfo* find(std::string_view name) const;                 // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> map_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Parses a header blob (the JSON bytes after the 8-byte length) against a data section of
// `data_size` bytes. TensorInfo::data is left nullptr (offsets are in data_begin/data_end).
// Exposed for the fuzzer; `file` is used only in messages.
StatusOr<std::vector<TensorInfo>> parse_safetensors_header(std::string_view header_json,
                                                           uint64_t data_size,
                                                           const std::string& file);
// Same, also returning the optional "__metadata__" (string -> string).
StatusOr<std::vector<TensorInfo>> parse_safetensors_header(
    std::string_view header_json, uint64_t data_size, const std::string& file,
    std::map<std::string, std::string>* metadata);

// All tensors of a model directory: model.safetensors, or shards listed by
// model.safetensors.index.json ("weight_map": tensor name -> shard file name). Also accepts the
// path of a single .safetensors file, or of an index.json.
class Checkpoint {
 public:
  static StatusOr<std::unique_ptr<Checkpoint>> open(const std::string& dir_or_file);
  const std::vector<const TensorInfo*>& tensors() const { return sorted_; }  // sorted by name
  const TensorInfo* find(std::string_view name) const;
  const std::string& directory() const { return directory_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  Checkpoint() = default;
  std::string directory_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<const TensorInfo*> sorted_;
};

// A tensor to write: raw little-endian bytes (must equal dtype_bytes(dtype, numel)).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes a valid safetensors file (tensors in the given order, header padded to 8 bytes).
// Meant for tests and tools that build tiny checkpoints.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace deepinfer::io
