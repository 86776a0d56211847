#include "tokenizer/decoder.h"

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int h = hex(t[3]), l = hex(t[4]);
  return (h < 0 || l < 0) ? -1 : h * 16 + l;
}

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::string tb;
    for (const auto& t : tokens) {
      tb.clear();
      bool ok = true;
      size_t i = 0;
      while (i < t.size()) {
        if (valid_utf8_seq_len(t, i) == 0) {
          ok = false;
          break;
        }
        size_t len;
        const int b = unicode_to_byte(decode_utf8(t, i, &len));
        if (b < 0) {
          ok = false;
          break;
        }
        tb.push_back(static_cast<char>(b));
        i += len;
      }
      bytes += ok ? tb : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) replace_all(t, from_, to_);
  }

 private:
  std::string from_, to_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string group;
    size_t group_n = 0;
    auto flush = [&] {
      if (group_n == 0) return;
      if (find_invalid_utf8(group) == std::string::npos) {
        out.push_back(group);
      } else {
        for (size_t k = 0; k < group_n; ++k) out.push_back("\xEF\xBF\xBD");
      }
      group.clear();
      group_n = 0;
    };
    for (auto& t : tokens) {
      const int b = parse_byte_token(t);
      if (b >= 0) {
        group.push_back(static_cast<char>(b));
        ++group_n;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char c, int start, int stop) : c_(c), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (int k = 0; k < start_ && b < e && t[b] == c_; ++k) ++b;
      for (int k = 0; k < stop_ && e > b && t[e - 1] == c_; ++k) --e;
      t = t.substr(b, e - b);
    }
  }

 private:
  char c_;
  int start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // Only a leading replacement character of the first token is dropped (not a real space).
      if (i == 0 && strip_ && !rep_.empty() && tokens[i].compare(0, rep_.size(), rep_) == 0) {
        tokens[i].erase(0, rep_.size());
      }
      replace_all(tokens[i], rep_, " ");
    }
  }

 private:
  std::string rep_;
  bool strip_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> s) : steps_(std::move(s)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

bool metaspace_strips(const nlohmann::json& j) {
  std::string scheme = j.value("prepend_scheme", std::string());
  if (scheme.empty()) return j.value("add_prefix_space", true);
  return scheme != "never";
}

void describe_into(const nlohmann::json& j, DecoderSpec& spec) {
  const std::string type = j.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& d : j.at("decoders")) describe_into(d, spec);
  } else if (type == "ByteLevel") {
    spec.byte_level = true;
  } else if (type == "Replace" && j.at("pattern").contains("String")) {
    spec.replacements.emplace_back(j["pattern"]["String"].get<std::string>(),
                                   j.value("content", std::string()));
  } else if (type == "ByteFallback") {
    spec.byte_fallback = true;
  } else if (type == "Fuse") {
  } else if (type == "Strip") {
    const std::string c = j.value("content", std::string(" "));
    if (c.size() != 1 || j.value("stop", 0) != 0) spec.supported = false;
    spec.strip_char = c.empty() ? ' ' : c[0];
    spec.strip_leading = j.value("start", 0);
  } else if (type == "Metaspace") {
    const std::string rep = j.value("replacement", std::string("\xE2\x96\x81"));
    spec.replacements.emplace_back(rep, " ");
    if (metaspace_strips(j)) spec.metaspace_first_token_strip = rep;
  } else {
    spec.supported = false;
  }
}

}  // namespace

StatusOr<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  const std::string type = j.value("type", std::string());
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Replace") {
    if (!j.at("pattern").contains("String")) {
      return Unimplemented("decoder Replace with a regex pattern is not supported");
    }
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(j["pattern"]["String"].get<std::string>(), j.value("content", std::string())));
  }
  if (type == "Strip") {
    const std::string c = j.value("content", std::string(" "));
    if (c.size() != 1) return Unimplemented("decoder Strip: only single-byte content is supported");
    return std::unique_ptr<Decoder>(new StripDecoder(c[0], j.value("start", 0), j.value("stop", 0)));
  }
  if (type == "Metaspace") {
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(
        j.value("replacement", std::string("\xE2\x96\x81")), metaspace_strips(j)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& d : j.at("decoders")) {
      DI_ASSIGN_OR_RETURN(auto s, make_decoder(d));
      if (s) steps.push_back(std::move(s));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
  }
  return Unimplemented("decoder type \"" + type + "\" is not supported");
}

DecoderSpec describe_decoder(const nlohmann::json& j) {
  DecoderSpec spec;
  if (j.is_null()) {
    spec.supported = false;
    return spec;
  }
  describe_into(j, spec);
  if (spec.byte_level && (spec.byte_fallback || !spec.replacements.empty())) spec.supported = false;
  return spec;
}

}  // namespace deepinfer::tokenizer
