#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>
#include <unordered_map>

namespace deepinfer::tokenizer {
namespace {

// GGUF metadata value type codes.
enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// Size in bytes of a fixed-size scalar type, 0 for string/array/unknown.
size_t scalar_size(uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

// Bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  Cursor(std::string_view b, const std::string& name) : b_(b), name_(name) {}
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  Status need(size_t n, const std::string& what) const {
    if (n > left()) {
      return DataLoss(name_ + ": truncated GGUF: " + what + " needs " + std::to_string(n) +
                      " bytes at offset " + std::to_string(pos_) + ", only " + std::to_string(left()) +
                      " left");
    }
    return OkStatus();
  }
  template <typename T>
  StatusOr<T> read(const std::string& what) {
    DI_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  StatusOr<std::string> read_string(const std::string& what) {
    DI_ASSIGN_OR_RETURN(uint64_t n, read<uint64_t>(what + " length"));
    DI_RETURN_IF_ERROR(need(n, what + " (length " + std::to_string(n) + ")"));
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  std::string_view b_;
  const std::string& name_;
  size_t pos_ = 0;
};

StatusOr<GgufValue> read_value(Cursor& c, uint32_t type, const std::string& key, const std::string& name,
                               bool in_array) {
  GgufValue v;
  v.gguf_type = type;
  const std::string what = "value of \"" + key + "\"";
  switch (type) {
    case kU8: { DI_ASSIGN_OR_RETURN(uint8_t x, c.read<uint8_t>(what)); v.kind = GgufValue::Kind::kUInt; v.u = x; return v; }
    case kU16: { DI_ASSIGN_OR_RETURN(uint16_t x, c.read<uint16_t>(what)); v.kind = GgufValue::Kind::kUInt; v.u = x; return v; }
    case kU32: { DI_ASSIGN_OR_RETURN(uint32_t x, c.read<uint32_t>(what)); v.kind = GgufValue::Kind::kUInt; v.u = x; return v; }
    case kU64: { DI_ASSIGN_OR_RETURN(uint64_t x, c.read<uint64_t>(what)); v.kind = GgufValue::Kind::kUInt; v.u = x; return v; }
    case kI8: { DI_ASSIGN_OR_RETURN(int8_t x, c.read<int8_t>(what)); v.kind = GgufValue::Kind::kInt; v.i = x; return v; }
    case kI16: { DI_ASSIGN_OR_RETURN(int16_t x, c.read<int16_t>(what)); v.kind = GgufValue::Kind::kInt; v.i = x; return v; }
    case kI32: { DI_ASSIGN_OR_RETURN(int32_t x, c.read<int32_t>(what)); v.kind = GgufValue::Kind::kInt; v.i = x; return v; }
    case kI64: { DI_ASSIGN_OR_RETURN(int64_t x, c.read<int64_t>(what)); v.kind = GgufValue::Kind::kInt; v.i = x; return v; }
    case kF32: { DI_ASSIGN_OR_RETURN(float x, c.read<float>(what)); v.kind = GgufValue::Kind::kFloat; v.f = x; return v; }
    case kF64: { DI_ASSIGN_OR_RETURN(double x, c.read<double>(what)); v.kind = GgufValue::Kind::kFloat; v.f = x; return v; }
    case kBool: {
      DI_ASSIGN_OR_RETURN(uint8_t x, c.read<uint8_t>(what));
      if (x > 1) return DataLoss(name + ": " + what + ": bool byte is " + std::to_string(x) + " (must be 0 or 1)");
      v.kind = GgufValue::Kind::kBool;
      v.b = x != 0;
      return v;
    }
    case kString: { DI_ASSIGN_OR_RETURN(v.s, c.read_string(what)); v.kind = GgufValue::Kind::kString; return v; }
    case kArray: {
      if (in_array) return Unimplemented(name + ": " + what + ": nested GGUF arrays are not supported");
      DI_ASSIGN_OR_RETURN(uint32_t et, c.read<uint32_t>(what + " element type"));
      DI_ASSIGN_OR_RETURN(uint64_t n, c.read<uint64_t>(what + " element count"));
      if (et == kArray) return Unimplemented(name + ": " + what + ": nested GGUF arrays are not supported");
      if (et != kString && scalar_size(et) == 0) {
        return DataLoss(name + ": " + what + ": unknown array element type " + std::to_string(et));
      }
      // Every element takes at least its scalar size (strings: their 8-byte length).
      const size_t min_elem = et == kString ? 8 : scalar_size(et);
      if (n > c.left() / min_elem) {
        return DataLoss(name + ": truncated GGUF: " + what + " claims " + std::to_string(n) +
                        " elements but only " + std::to_string(c.left()) + " bytes are left");
      }
      v.kind = GgufValue::Kind::kArray;
      v.gguf_type = et;
      for (uint64_t k = 0; k < n; ++k) {
        DI_ASSIGN_OR_RETURN(GgufValue e, read_value(c, et, key + "[" + std::to_string(k) + "]", name, true));
        v.elem_kind = e.kind;
        switch (e.kind) {
          case GgufValue::Kind::kString: v.strings.push_back(std::move(e.s)); break;
          case GgufValue::Kind::kFloat: v.floats.push_back(e.f); break;
          case GgufValue::Kind::kUInt: v.ints.push_back(static_cast<int64_t>(e.u)); break;
          case GgufValue::Kind::kInt: v.ints.push_back(e.i); break;
          case GgufValue::Kind::kBool: v.ints.push_back(e.b ? 1 : 0); break;
          case GgufValue::Kind::kArray: break;
        }
      }
      if (n == 0) {
        v.elem_kind = et == kString ? GgufValue::Kind::kString
                      : (et == kF32 || et == kF64) ? GgufValue::Kind::kFloat
                                                   : GgufValue::Kind::kInt;
      }
      return v;
    }
    default:
      return DataLoss(name + ": unknown GGUF value type " + std::to_string(type) + " for key \"" + key + "\"");
  }
}

// Typed accessors with errors naming the file and key.
class Meta {
 public:
  Meta(const GgufFile& f, const std::string& name) : f_(f), name_(name) {}
  const GgufValue* find(const std::string& k) const {
    auto it = f_.kv.find(k);
    return it == f_.kv.end() ? nullptr : &it->second;
  }
  Status missing(const std::string& k) const { return InvalidArgument(name_ + ": GGUF key \"" + k + "\" is missing"); }
  Status wrong(const std::string& k, const std::string& want) const {
    return InvalidArgument(name_ + ": GGUF key \"" + k + "\" must be " + want);
  }
  StatusOr<std::string> str(const std::string& k) const {
    const GgufValue* v = find(k);
    if (!v) return missing(k);
    if (v->kind != GgufValue::Kind::kString) return wrong(k, "a string");
    return v->s;
  }
  StatusOr<const std::vector<std::string>*> str_array(const std::string& k) const {
    const GgufValue* v = find(k);
    if (!v) return missing(k);
    if (v->kind != GgufValue::Kind::kArray || v->elem_kind != GgufValue::Kind::kString) {
      return wrong(k, "an array of strings");
    }
    return &v->strings;
  }
  // Optional id: a non-negative integer below `limit`.
  StatusOr<std::optional<int32_t>> id(const std::string& k, size_t limit) const {
    const GgufValue* v = find(k);
    if (!v) return std::optional<int32_t>();
    int64_t x;
    std::string shown;
    if (v->kind == GgufValue::Kind::kUInt) {
      x = v->u > uint64_t(INT32_MAX) ? -1 : int64_t(v->u);
      shown = std::to_string(v->u);
    } else if (v->kind == GgufValue::Kind::kInt) {
      x = v->i;
      shown = std::to_string(v->i);
    } else {
      return wrong(k, "an integer token id");
    }
    if (x < 0 || static_cast<uint64_t>(x) >= limit) {
      return wrong(k, "a token id below the vocabulary size " + std::to_string(limit) + " (is " + shown + ")");
    }
    return std::optional<int32_t>(static_cast<int32_t>(x));
  }
  StatusOr<std::optional<bool>> flag(const std::string& k) const {
    const GgufValue* v = find(k);
    if (!v) return std::optional<bool>();
    if (v->kind != GgufValue::Kind::kBool) return wrong(k, "a bool");
    return std::optional<bool>(v->b);
  }

 private:
  const GgufFile& f_;
  const std::string& name_;
};

// llama.cpp token types.
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// llama.cpp's pre-tokenizer regexes (tokenizer.ggml.pre), each applied in turn, matches isolated.
// Written with \\x{..} escapes: several endpoints (U+1F7D, U+1FD3, U+1FDB, U+1FBE, U+2126, U+212A)
// are canonical singletons that any NFC-normalizing editor would silently change.
StatusOr<std::vector<std::string>> pre_regexes(const std::string& pre, const std::string& name) {
  if (pre == "deepseek-llm") {
    return std::vector<std::string>{
        "[\r\n]",
        "\\s?["
        "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
        "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-"
        "\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-"
        "\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-"
        "\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-"
        "\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
        "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-"
        "\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-"
        "\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"
        "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"
        "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}"
        "\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-"
        "\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-"
        "\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
        "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
        "]+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+$",
        "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
        "\\p{N}+",
    };
  }
  if (pre == "deepseek-coder") {
    return std::vector<std::string>{
        "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}",
    };
  }
  return Unimplemented(name + ": tokenizer.ggml.pre \"" + pre +
                       "\" is not supported (only \"deepseek-llm\" and \"deepseek-coder\")");
}

// SentencePiece BPE as merges: every split of a normal token into two vocabulary pieces is a
// merge, ranked by the merged token's score (highest first), then by its id.
nlohmann::json spm_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                          const std::vector<int64_t>& types,
                          const std::unordered_map<std::string, int32_t>& ids) {
  struct M { double score; int32_t id; size_t split; };
  std::vector<M> ms;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] != kNormal && types[id] != kUserDefined) continue;
    const std::string& t = tokens[id];
    for (size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<uint8_t>(t[k]) & 0xC0) == 0x80) continue;  // inside a UTF-8 sequence
      if (ids.count(t.substr(0, k)) && ids.count(t.substr(k))) {
        ms.push_back({scores[id], static_cast<int32_t>(id), k});
      }
    }
  }
  std::sort(ms.begin(), ms.end(), [](const M& a, const M& b) {
    return std::tie(b.score, a.id, a.split) < std::tie(a.score, b.id, b.split);
  });
  nlohmann::json out = nlohmann::json::array();
  for (const M& m : ms) {
    const std::string& t = tokens[m.id];
    out.push_back(nlohmann::json::array({t.substr(0, m.split), t.substr(m.split)}));
  }
  return out;
}

}  // namespace

StatusOr<GgufFile> parse_gguf(std::string_view bytes, const std::string& name) {
  Cursor c(bytes, name);
  DI_RETURN_IF_ERROR(c.need(4, "magic"));
  if (bytes.substr(0, 4) != "GGUF") return DataLoss(name + ": not a GGUF file (magic is not \"GGUF\")");
  c.read<uint32_t>("magic").value();
  GgufFile f;
  DI_ASSIGN_OR_RETURN(f.version, c.read<uint32_t>("version"));
  if (f.version != 2 && f.version != 3) {
    return Unimplemented(name + ": GGUF version " + std::to_string(f.version) + " (only 2 and 3 are supported)");
  }
  DI_ASSIGN_OR_RETURN(f.tensor_count, c.read<uint64_t>("tensor count"));
  DI_ASSIGN_OR_RETURN(uint64_t n_kv, c.read<uint64_t>("metadata count"));
  if (n_kv > c.left() / 13) {  // a key/value takes at least 8 (key length) + 4 (type) + 1 bytes
    return DataLoss(name + ": truncated GGUF: header claims " + std::to_string(n_kv) +
                    " metadata entries but only " + std::to_string(c.left()) + " bytes follow");
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    DI_ASSIGN_OR_RETURN(std::string key, c.read_string("key of metadata entry " + std::to_string(k)));
    if (key.empty()) return DataLoss(name + ": metadata entry " + std::to_string(k) + " has an empty key");
    DI_ASSIGN_OR_RETURN(uint32_t type, c.read<uint32_t>("type of \"" + key + "\""));
    DI_ASSIGN_OR_RETURN(GgufValue v, read_value(c, type, key, name, false));
    if (!f.kv.emplace(key, std::move(v)).second) {
      return DataLoss(name + ": duplicate GGUF key \"" + key + "\"");
    }
  }
  return f;
}

StatusOr<GgufFile> read_gguf(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::string bytes, read_file_maybe_xz(path));
  return parse_gguf(bytes, path);
}

StatusOr<GgufTokenizerJson> gguf_to_tokenizer_json(const GgufFile& f, const std::string& name) {
  Meta m(f, name);
  DI_ASSIGN_OR_RETURN(std::string model, m.str("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return Unimplemented(name + ": tokenizer.ggml.model \"" + model + "\" (only \"gpt2\" and \"llama\" are supported)");
  }
  DI_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens_p, m.str_array("tokenizer.ggml.tokens"));
  const auto& tokens = *tokens_p;
  if (tokens.empty()) return InvalidArgument(name + ": tokenizer.ggml.tokens is empty");
  if (tokens.size() > size_t(INT32_MAX)) return InvalidArgument(name + ": tokenizer.ggml.tokens is too large");
  const size_t n = tokens.size();

  std::vector<int64_t> types(n, kNormal);
  if (const GgufValue* tv = m.find("tokenizer.ggml.token_type")) {
    if (tv->kind != GgufValue::Kind::kArray || tv->elem_kind == GgufValue::Kind::kString ||
        tv->elem_kind == GgufValue::Kind::kFloat) {
      return m.wrong("tokenizer.ggml.token_type", "an array of integers");
    }
    if (tv->ints.size() != n) {
      return m.wrong("tokenizer.ggml.token_type", "as long as tokenizer.ggml.tokens (" + std::to_string(n) +
                                                      "), has " + std::to_string(tv->ints.size()));
    }
    for (size_t i = 0; i < n; ++i) {
      if (tv->ints[i] < kNormal || tv->ints[i] > kByte) {
        return InvalidArgument(name + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is " +
                               std::to_string(tv->ints[i]) + " (must be 1..6)");
      }
    }
    types = tv->ints;
  }

  nlohmann::json vocab = nlohmann::json::object();
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < n; ++i) {
    if (!ids.emplace(tokens[i], static_cast<int32_t>(i)).second) {
      return InvalidArgument(name + ": token \"" + tokens[i] + "\" appears twice (ids " +
                             std::to_string(ids[tokens[i]]) + " and " + std::to_string(i) + ")");
    }
    vocab[tokens[i]] = static_cast<int32_t>(i);
  }

  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) {
    const bool control = types[i] == kControl || types[i] == kUnknown;
    if (!control && types[i] != kUserDefined) continue;
    added.push_back({{"id", static_cast<int32_t>(i)}, {"content", tokens[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", control}});
  }

  DI_ASSIGN_OR_RETURN(std::optional<int32_t> bos, m.id("tokenizer.ggml.bos_token_id", n));
  DI_ASSIGN_OR_RETURN(std::optional<int32_t> eos, m.id("tokenizer.ggml.eos_token_id", n));
  DI_ASSIGN_OR_RETURN(std::optional<int32_t> unk, m.id("tokenizer.ggml.unknown_token_id", n));
  DI_ASSIGN_OR_RETURN(std::optional<bool> add_bos, m.flag("tokenizer.ggml.add_bos_token"));
  DI_ASSIGN_OR_RETURN(std::optional<bool> add_eos, m.flag("tokenizer.ggml.add_eos_token"));

  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = added;
  j["post_processor"] = nullptr;
  if (model == "gpt2") {
    DI_ASSIGN_OR_RETURN(std::string pre, m.str("tokenizer.ggml.pre"));
    DI_ASSIGN_OR_RETURN(std::vector<std::string> regexes, pre_regexes(pre, name));
    DI_ASSIGN_OR_RETURN(const std::vector<std::string>* merges_p, m.str_array("tokenizer.ggml.merges"));
    nlohmann::json merges = nlohmann::json::array();
    for (size_t i = 0; i < merges_p->size(); ++i) {
      const std::string& s = (*merges_p)[i];
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos) {
        return InvalidArgument(name + ": tokenizer.ggml.merges[" + std::to_string(i) + "] \"" + s +
                               "\" is not two tokens separated by one space");
      }
      std::string a = s.substr(0, sp), b = s.substr(sp + 1);
      if (!ids.count(a) || !ids.count(b)) {
        return InvalidArgument(name + ": tokenizer.ggml.merges[" + std::to_string(i) + "] \"" + s +
                               "\" names a token that is not in the vocabulary");
      }
      merges.push_back(nlohmann::json::array({std::move(a), std::move(b)}));
    }
    nlohmann::json seq = nlohmann::json::array();
    for (const auto& r : regexes) {
      seq.push_back({{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
    }
    seq.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", seq}};
    j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                  {"vocab", vocab}, {"merges", merges}};
    j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    const GgufValue* sv = m.find("tokenizer.ggml.scores");
    if (!sv) return m.missing("tokenizer.ggml.scores");
    if (sv->kind != GgufValue::Kind::kArray || sv->elem_kind != GgufValue::Kind::kFloat) {
      return m.wrong("tokenizer.ggml.scores", "an array of floats");
    }
    if (sv->floats.size() != n) {
      return m.wrong("tokenizer.ggml.scores", "as long as tokenizer.ggml.tokens (" + std::to_string(n) +
                                                  "), has " + std::to_string(sv->floats.size()));
    }
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      if (!ids.count(hex)) return InvalidArgument(name + ": SentencePiece vocabulary lacks byte token " + hex);
    }
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
    j["pre_tokenizer"] = nullptr;
    j["model"] = {{"type", "BPE"}, {"dropout", nullptr},
                  {"unk_token", unk ? nlohmann::json(tokens[*unk]) : nlohmann::json()},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
                  {"vocab", vocab}, {"merges", spm_merges(tokens, sv->floats, types, ids)}};
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  }

  nlohmann::json cfg = nlohmann::json::object();
  if (bos) cfg["bos_token"] = tokens[*bos];
  if (eos) cfg["eos_token"] = tokens[*eos];
  cfg["add_bos_token"] = add_bos.value_or(false);
  cfg["add_eos_token"] = add_eos.value_or(false);
  return GgufTokenizerJson{std::move(j), std::move(cfg)};
}

StatusOr<std::unique_ptr<Tokenizer>> tokenizer_from_gguf(const std::string& path) {
  DI_ASSIGN_OR_RETURN(GgufFile f, read_gguf(path));
  DI_ASSIGN_OR_RETURN(GgufTokenizerJson tj, gguf_to_tokenizer_json(f, path));
  auto t = Tokenizer::from_json(tj.tokenizer, tj.config);
  if (!t.ok()) return Status(t.status().code(), path + ": " + t.status().message());
  return t;
}

}  // namespace deepinfer::tokenizer
