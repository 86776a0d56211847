// safetensors header parsing, validation and the mmap-backed single-file reader.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace deepinfer::io {
namespace {

using json = nlohmann::ordered_json;

// The reference implementation refuses headers past 100 MB; a real header is a few MB at most.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string show_name(std::string_view s) {
  // Names come from untrusted files: keep messages printable and bounded.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  if (s.size() > 200) out += "...";
  return out + "'";
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status bad(const std::string& file, const std::string& what) {
  return DataLoss("safetensors file '" + file + "': " + what);
}
Status bad_tensor(const std::string& file, std::string_view tensor, const std::string& what) {
  return DataLoss("safetensors file '" + file + "', tensor " + show_name(tensor) + ": " + what);
}

Status parse_metadata(const json& value, const std::string& file,
                      std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return bad(file, "\"__metadata__\" must be an object of string -> string, got " +
                         std::string(value.type_name()));
  }
  for (const auto& [k, v] : value.items()) {
    if (!v.is_string()) {
      return bad(file, "\"__metadata__\" value of key " + show_name(k) + " must be a string, got " +
                           std::string(v.type_name()));
    }
    if (metadata) (*metadata)[k] = v.get<std::string>();
  }
  return OkStatus();
}

StatusOr<TensorInfo> parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                                 const std::string& file) {
  if (!entry.is_object()) {
    return bad_tensor(file, name,
                      "entry must be an object with dtype, shape, data_offsets, got " +
                          std::string(entry.type_name()));
  }
  for (const auto& [k, v] : entry.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      return bad_tensor(
          file, name,
          "unexpected key " + show_name(k) + " (expected only dtype, shape, data_offsets)");
    }
  }
  TensorInfo t;
  t.name = name;
  t.file = file;

  auto dt = entry.find("dtype");
  if (dt == entry.end() || !dt->is_string()) {
    return bad_tensor(file, name, "missing or non-string \"dtype\"");
  }
  const auto& dtype_str = dt->get_ref<const std::string&>();
  auto dtype = dtype_from_name(dtype_str);
  if (!dtype) {
    return bad_tensor(file, name,
                      "unknown dtype " + show_name(dtype_str) +
                          " (expected one of F64, F32, F16, BF16, F8_E4M3, F8_E5M2, "
                          "F8_E8M0, F4, I64, I32, I16, I8, U64, U32, U16, U8, BOOL)");
  }
  t.dtype = *dtype;

  auto sh = entry.find("shape");
  if (sh == entry.end() || !sh->is_array()) {
    return bad_tensor(file, name, "missing \"shape\" (expected an array of non-negative integers)");
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    if (!d.is_number_integer() ||
        (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)) {
      return bad_tensor(
          file, name,
          "shape " + d.dump() + " entry in " + sh->dump() + " is not a non-negative integer");
    }
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad_tensor(file, name, "shape dimension " + d.dump() + " is too large");
    }
    t.shape.push_back(static_cast<int64_t>(v));
    if (!overflow && __builtin_mul_overflow(numel, v, &numel)) overflow = true;
  }
  // Also caps numel so that numel * bits below cannot overflow.
  if (overflow || numel > (std::numeric_limits<uint64_t>::max() / 64)) {
    if (!std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d == 0; })) {
      return bad_tensor(file, name, "shape " + shape_string(t.shape) + " has too many elements");
    }
    numel = 0;
  }

  auto off = entry.find("data_offsets");
  if (off == entry.end() || !off->is_array() || off->size() != 2 ||
      !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
    return bad_tensor(file, name,
                      "\"data_offsets\" must be [begin, end] of non-negative integers" +
                          (off == entry.end() ? std::string(", missing") : ", got " + off->dump()));
  }
  t.data_begin = (*off)[0].get<uint64_t>();
  t.data_end = (*off)[1].get<uint64_t>();
  if (t.data_begin > t.data_end) {
    return bad_tensor(file, name,
                      "data_offsets [" + std::to_string(t.data_begin) + ", " +
                          std::to_string(t.data_end) + "] has begin > end");
  }
  if (t.data_end > data_size) {
    return bad_tensor(file, name,
                      "data_offsets [" + std::to_string(t.data_begin) + ", " +
                          std::to_string(t.data_end) + "] run past the end of the data section (" +
                          std::to_string(data_size) + " bytes): file truncated or header corrupt");
  }
  t.nbytes = t.data_end - t.data_begin;
  const uint64_t expected = dtype_bytes(t.dtype, numel);
  if (expected != t.nbytes) {
    return bad_tensor(file, name,
                      "shape " + shape_string(t.shape) + " x " + dtype_name(t.dtype) + " needs " +
                          std::to_string(expected) + " bytes but data_offsets span " +
                          std::to_string(t.nbytes));
  }
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<std::vector<TensorInfo>> parse_safetensors_header(std::string_view header_json,
                                                           uint64_t data_size,
                                                           const std::string& file) {
  return parse_safetensors_header(header_json, data_size, file, nullptr);
}

StatusOr<std::vector<TensorInfo>> parse_safetensors_header(
    std::string_view header_json, uint64_t data_size, const std::string& file,
    std::map<std::string, std::string>* metadata) {
  // Duplicate top-level keys would silently shadow each other: reject them during the parse.
  std::set<std::string> seen_keys;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen_keys.insert(k).second) duplicate = k;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(header_json.begin(), header_json.end(), on_event);
  } catch (const json::exception& e) {
    return bad(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) {
    return bad(file, "header must be a JSON object, got " + std::string(header.type_name()));
  }
  if (!duplicate.empty()) return bad(file, "header has duplicate key " + show_name(duplicate));

  std::vector<TensorInfo> tensors;
  tensors.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      DI_RETURN_IF_ERROR(parse_metadata(value, file, metadata));
      continue;
    }
    DI_ASSIGN_OR_RETURN(TensorInfo t, parse_entry(key, value, data_size, file));
    tensors.push_back(std::move(t));
  }

  // Spans must not overlap and, as the format requires, must cover the data section exactly
  // (no holes: a hole could hide a second file inside this one).
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const TensorInfo* a, const TensorInfo* b) {
                     return a->data_begin != b->data_begin ? a->data_begin < b->data_begin
                                                           : a->data_end < b->data_end;
                   });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->data_begin < pos) {
      return bad_tensor(file, t->name,
                        "data_offsets [" + std::to_string(t->data_begin) + ", " +
                            std::to_string(t->data_end) + "] overlap tensor " +
                            show_name(prev->name) + " which ends at " + std::to_string(pos));
    }
    if (t->data_begin > pos) {
      return bad_tensor(file, t->name,
                        "data_offsets begin at " + std::to_string(t->data_begin) +
                            " but the previous tensor ends at " + std::to_string(pos) +
                            " (the data section must have no holes)");
    }
    pos = t->data_end;
    prev = t;
  }
  if (pos != data_size) {
    return bad(file, "tensors cover " + std::to_string(pos) + " bytes but the data section has " +
                         std::to_string(data_size) + " (trailing bytes after the last tensor)");
  }
  return tensors;
}

// ---- MappedFile ----

StatusOr<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string what = "cannot open '" + path + "': " + std::strerror(err);
    return err == ENOENT ? NotFound(what) : PermissionDenied(what);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("'" + path + "' is not a regular file");
  }
  std::unique_ptr<MappedFile> m(new MappedFile());
  m->size_ = static_cast<uint64_t>(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ResourceExhausted("cannot mmap '" + path + "' (" + std::to_string(m->size_) +
                               " bytes): " + std::strerror(err));
    }
    m->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---- SafetensorsFile ----

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  DI_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  const uint64_t size = map->size();
  if (size < 8) {
    return bad(path, "file is " + std::to_string(size) +
                         " bytes, shorter than the 8-byte header length (truncated?)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | map->data()[i];  // little-endian
  if (header_len > kMaxHeaderBytes) {
    return bad(path, "header length " + std::to_string(header_len) + " exceeds the " +
                         std::to_string(kMaxHeaderBytes) + "-byte limit (corrupt length prefix?)");
  }
  if (header_len > size - 8) {
    return bad(path, "header length " + std::to_string(header_len) +
                         " runs past the end of the file (" + std::to_string(size) +
                         " bytes): truncated or not a safetensors file");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const std::string_view header(reinterpret_cast<const char*>(map->data() + 8), header_len);
  const uint64_t data_start = 8 + header_len;
  DI_ASSIGN_OR_RETURN(f->tensors_,
                      parse_safetensors_header(header, size - data_start, path, &f->metadata_));
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    TensorInfo& t = f->tensors_[i];
    t.data = map->data() + data_start + t.data_begin;
    f->index_.emplace(t.name, i);
  }
  f->map_ = std::move(map);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace deepinfer::io
