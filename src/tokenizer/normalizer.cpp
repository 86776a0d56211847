#include "tokenizer/normalizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

namespace deepinfer::tokenizer {
namespace {

bool is_ascii(const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm f) : form_(f) {}
  void normalize(std::string& text) const override { unicode_normalize(form_, text); }

 private:
  UnicodeForm form_;
};

// Lowercase as HF does it: each character mapped on its own (Rust char::to_lowercase), so no
// context rules such as Greek final sigma.
class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    if (is_ascii(text)) {
      for (char& c : text) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      return;
    }
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
    icu::UnicodeString out;
    for (int32_t i = 0; i < u.length();) {
      const UChar32 c = u.char32At(i);
      icu::UnicodeString one(c);
      one.toLower(icu::Locale::getRoot());
      out += one;
      i = u.moveIndex32(i, 1);
    }
    text.clear();
    out.toUTF8String(text);
  }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prefix_(std::move(p)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);  // HF prepends only to non-empty strings
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string from, std::unique_ptr<Regex> re, std::string to)
      : from_(std::move(from)), re_(std::move(re)), to_(std::move(to)) {}
  void normalize(std::string& text) const override {
    std::string out;
    size_t pos = 0;
    if (re_ == nullptr) {
      if (from_.empty()) return;
      size_t hit;
      while ((hit = text.find(from_, pos)) != std::string::npos) {
        out.append(text, pos, hit - pos);
        out += to_;
        pos = hit + from_.size();
      }
    } else {
      size_t ms, me;
      size_t search = 0;
      while (search <= text.size() && re_->find(text, search, &ms, &me)) {
        if (me == ms) {  // empty match: skip one character
          search = ms + 1;
          while (search < text.size() && (static_cast<unsigned char>(text[search]) & 0xC0) == 0x80)
            ++search;
          continue;
        }
        out.append(text, pos, ms - pos);
        out += to_;
        pos = me;
        search = me;
      }
    }
    if (pos == 0) return;
    out.append(text, pos, std::string::npos);
    text.swap(out);
  }

 private:
  std::string from_;
  std::unique_ptr<Regex> re_;
  std::string to_;
};

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
    int32_t b = 0, e = u.length();
    while (left_ && b < e && is_unicode_whitespace(u.char32At(b))) b = u.moveIndex32(b, 1);
    while (right_ && e > b && is_unicode_whitespace(u.char32At(u.moveIndex32(e, -1))))
      e = u.moveIndex32(e, -1);
    std::string out;
    u.tempSubStringBetween(b, e).toUTF8String(out);
    text.swap(out);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> s) : steps_(std::move(s)) {}
  void normalize(std::string& text) const override {
    for (const auto& s : steps_) s->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

void unicode_normalize(UnicodeForm form, std::string& text) {
  if (is_ascii(text)) return;  // every normalization form maps ASCII to itself
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case UnicodeForm::kNFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case UnicodeForm::kNFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case UnicodeForm::kNFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case UnicodeForm::kNFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status) || n == nullptr) return;
  if (n->isNormalizedUTF8(text, status) && U_SUCCESS(status)) return;
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + 16);
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, text, sink, nullptr, status);
  if (U_SUCCESS(status)) text.swap(out);
}

StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  if (!j.is_object() || !j.contains("type")) {
    return InvalidArgument("normalizer: expected an object with a \"type\" field");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Prepend") {
    return std::unique_ptr<Normalizer>(new PrependNormalizer(j.value("prepend", std::string())));
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(j.value("strip_left", true), j.value("strip_right", true)));
  }
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    std::string content = j.value("content", std::string());
    if (pat.contains("String")) {
      return std::unique_ptr<Normalizer>(
          new ReplaceNormalizer(pat["String"].get<std::string>(), nullptr, content));
    }
    if (pat.contains("Regex")) {
      DI_ASSIGN_OR_RETURN(auto re, Regex::compile(pat["Regex"].get<std::string>()));
      return std::unique_ptr<Normalizer>(new ReplaceNormalizer("", std::move(re), content));
    }
    return InvalidArgument("normalizer Replace: pattern must be {\"String\"} or {\"Regex\"}");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& s : j.at("normalizers")) {
      DI_ASSIGN_OR_RETURN(auto n, make_normalizer(s));
      if (n) steps.push_back(std::move(n));
    }
    if (steps.empty()) return std::unique_ptr<Normalizer>();
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
  }
  return Unimplemented("normalizer type \"" + type + "\" is not supported");
}

}  // namespace deepinfer::tokenizer
