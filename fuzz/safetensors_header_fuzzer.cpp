// libFuzzer target for the safetensors header parser.
//
// Input: "<data_size>\n<header json>" when it starts with decimal digits and a newline (the
// seed corpus is written that way, so it stays readable), else the whole input is the header
// and the data section is assumed to be as long as the input.
// Beyond "never crash", every header the parser accepts must satisfy its promises: spans inside
// the data section, begin <= end, span == dtype size x numel, no overlaps, full coverage.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint64_t data_size = size;
  size_t digits = 0;
  while (digits < in.size() && digits < 19 && in[digits] >= '0' && in[digits] <= '9') ++digits;
  if (digits > 0 && digits < in.size() && in[digits] == '\n') {
    data_size = std::stoull(std::string(in.substr(0, digits)));
    in.remove_prefix(digits + 1);
  }
  std::map<std::string, std::string> metadata;
  auto parsed = deepinfer::io::parse_safetensors_header(in, data_size, "fuzz", &metadata);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();  // every error says what was wrong
    return 0;
  }
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& t : *parsed) {
    if (t.data_begin > t.data_end || t.data_end > data_size) std::abort();
    if (t.nbytes != t.data_end - t.data_begin) std::abort();
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) std::abort();
      numel *= static_cast<uint64_t>(d);
    }
    if (deepinfer::dtype_bytes(t.dtype, numel) != t.nbytes) std::abort();
    spans.emplace_back(t.data_begin, t.data_end);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t pos = 0;
  for (const auto& [b, e] : spans) {
    if (b != pos) std::abort();
    pos = e;
  }
  if (pos != data_size) std::abort();
  return 0;
}
