#include <fstream>
#include <sstream>

#include <lzma.h>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

StatusOr<std::string> read_file_maybe_xz(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string data = ss.str();
  if (path.size() < 3 || path.compare(path.size() - 3, 3, ".xz") != 0) return data;

  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, 0) != LZMA_OK) {
    return Internal("liblzma: cannot initialise the decoder for " + path);
  }
  std::string out;
  out.resize(data.size() * 6 + 4096);
  strm.next_in = reinterpret_cast<const uint8_t*>(data.data());
  strm.avail_in = data.size();
  size_t produced = 0;
  while (true) {
    if (produced == out.size()) out.resize(out.size() * 2);
    strm.next_out = reinterpret_cast<uint8_t*>(out.data()) + produced;
    strm.avail_out = out.size() - produced;
    const lzma_ret r = lzma_code(&strm, LZMA_FINISH);
    produced = out.size() - strm.avail_out;
    if (r == LZMA_STREAM_END) break;
    if (r != LZMA_OK && r != LZMA_BUF_ERROR) {
      lzma_end(&strm);
      return DataLoss(path + ": corrupt xz data (liblzma error " + std::to_string(r) + ")");
    }
    if (r == LZMA_BUF_ERROR && strm.avail_in == 0 && strm.avail_out != 0) {
      lzma_end(&strm);
      return DataLoss(path + ": truncated xz data");
    }
  }
  lzma_end(&strm);
  out.resize(produced);
  return out;
}

}  // namespace deepinfer::tokenizer
