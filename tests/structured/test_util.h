// Shared helpers for the structured-output tests.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_schema.h"
#include "structured/json_schema_internal.h"
#include "structured/matcher.h"

namespace deepinfer::structured::testing {

using OJson = nlohmann::ordered_json;

// Extracts a .tar.xz under tests/data/structured into a per-process temp folder (once).
inline std::string extract_archive(const std::string& name) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("di_structured_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::string marker = dir + "/." + name + ".done";
  if (!std::filesystem::exists(marker)) {
    std::string cmd = "tar -xJf tests/data/structured/" + name + " -C " + dir;
    if (std::system(cmd.c_str()) != 0) return "";
    std::system(("touch " + marker).c_str());
  }
  return dir;
}

// The number lexemes of a JSON text exactly as written, keyed by the JSON pointer of the value
// ("/0/tests/3/data/a"). Test instances are fed with these, not re-serialised through a double
// (which turns 9007199254740992.0 into 9.007199254740992e+15 and a 54-digit integer into
// 1.2345678910111214e+52): a test must feed the instance it claims to test.
using NumberLexemes = std::map<std::string, std::string>;

namespace detail {

// The numbers of a JSON text in document order (outside strings).
inline std::vector<std::string> scan_number_lexemes(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) if (text[i] == '\\') ++i;
      ++i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < text.size() && std::strchr("0123456789+-.eE", text[j]) != nullptr) ++j;
      out.push_back(text.substr(i, j - i));
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

// SAX events in document order; each number event takes the next scanned lexeme.
class LexemeSax : public nlohmann::json_sax<OJson> {
 public:
  LexemeSax(std::vector<std::string> lexemes, NumberLexemes* out) : lex_(std::move(lexemes)), out_(out) {}
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return number(); }
  bool number_unsigned(number_unsigned_t) override { return number(); }
  bool number_float(number_float_t, const string_t&) override { return number(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { open(false); return true; }
  bool key(string_t& k) override { stack_.back().key = k; return true; }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { open(true); return true; }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
  bool complete() const { return next_ == lex_.size(); }

 private:
  struct Level { bool array; size_t index = 0; std::string key; };
  std::string pointer() const {
    std::string p;
    for (const auto& l : stack_) p += "/" + (l.array ? std::to_string(l.index) : json_internal::pointer_escape(l.key));
    return p;
  }
  bool value() { if (!stack_.empty() && stack_.back().array) ++stack_.back().index; return true; }
  bool number() {
    if (next_ >= lex_.size()) return false;
    (*out_)[pointer()] = lex_[next_++];
    return value();
  }
  void open(bool array) { stack_.push_back({array, 0, {}}); }
  bool close() { stack_.pop_back(); return value(); }
  std::vector<std::string> lex_;
  size_t next_ = 0;
  NumberLexemes* out_;
  std::vector<Level> stack_;
};

}  // namespace detail

// Parses a JSON text into *doc and records its number lexemes; false when the text does not
// parse or the lexemes could not be matched to the numbers.
inline bool parse_with_lexemes(const std::string& text, OJson* doc, NumberLexemes* lexemes) {
  lexemes->clear();
  detail::LexemeSax sax(detail::scan_number_lexemes(text), lexemes);
  if (!OJson::sax_parse(text, &sax) || !sax.complete()) return false;
  *doc = OJson::parse(text);
  return true;
}

// The lexemes under `prefix` (a JSON pointer), re-keyed relative to it.
inline NumberLexemes lexemes_under(const NumberLexemes& all, const std::string& prefix) {
  NumberLexemes out;
  for (auto it = all.lower_bound(prefix); it != all.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    std::string rest = it->first.substr(prefix.size());
    if (rest.empty() || rest[0] == '/') out[rest] = it->second;
  }
  return out;
}

// Drives a matcher over a JSON value serialized compactly with canonical strings. Numbers are
// written as given in `lexemes` (the instance's own text, see NumberLexemes), else canonically.
// Objects are unordered, so every key order is tried (with rollback) until one is accepted
// completely: the instance is accepted iff some serialization of it is.
class InstanceDriver {
 public:
  // keep_float_form (numbers without a lexeme): write integral floats as "1.0"; otherwise
  // numbers are written canonically (1.0 -> "1").
  explicit InstanceDriver(GrammarMatcher* m, bool keep_float_form = false)
      : m_(m), keep_float_form_(keep_float_form) {}

  // `lexemes`: the number lexemes of `v`, keyed by JSON pointer relative to `v` ("" = v itself).
  bool accepts(const OJson& v, const NumberLexemes* lexemes = nullptr) {
    steps_ = 0;
    lexemes_ = lexemes;
    path_.clear();
    return feed(v, [&] { return m_->can_terminate(); });
  }
  bool gave_up() const { return steps_ > kMaxSteps; }

 private:
  static constexpr uint64_t kMaxSteps = 20000;

  bool push(const std::string& s) { ++steps_; return steps_ <= kMaxSteps && m_->accept_bytes(s); }

  bool with(const std::string& s, const std::function<bool()>& cont) {
    if (!push(s)) return false;
    bool r = cont();
    m_->rollback(1);
    return r;
  }

  bool feed(const OJson& v, const std::function<bool()>& cont) {
    if (v.is_object()) {
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      std::vector<bool> used(keys.size(), false);
      return with("{", [&] { return members(v, keys, &used, true, cont); });
    }
    if (v.is_array()) {
      return with("[", [&] { return elements(v, 0, cont); });
    }
    std::string text;
    const std::string* lexeme = nullptr;
    if (v.is_number() && lexemes_ != nullptr) {
      auto it = lexemes_->find(path_);
      if (it != lexemes_->end()) lexeme = &it->second;
    }
    if (v.is_string()) text = json_quote(v.get<std::string>());
    else if (lexeme != nullptr) text = *lexeme;
    else if (v.is_number_float() && keep_float_form_) text = v.dump();
    else if (v.is_number()) text = json_internal::canonical_number(v);
    else text = v.dump();
    return with(text, cont);
  }

  // Feeds v[key or index] with path_ extended by it for the lexeme lookup.
  bool feed_child(const OJson& child, const std::string& token, const std::function<bool()>& cont) {
    size_t len = path_.size();
    path_ += "/" + token;
    bool r = feed(child, [&] {
      std::string saved = path_.substr(len);
      path_.resize(len);
      bool c = cont();
      path_ += saved;
      return c;
    });
    path_.resize(len);
    return r;
  }

  bool elements(const OJson& v, size_t i, const std::function<bool()>& cont) {
    if (i == v.size()) return with("]", cont);
    auto next = [&] { return feed_child(v[i], std::to_string(i), [&] { return elements(v, i + 1, cont); }); };
    if (i == 0) return next();
    return with(",", next);
  }

  bool members(const OJson& v, const std::vector<std::string>& keys, std::vector<bool>* used,
               bool first, const std::function<bool()>& cont) {
    bool any_left = false;
    for (size_t k = 0; k < keys.size(); ++k) {
      if ((*used)[k]) continue;
      any_left = true;
      std::string head = (first ? "" : ",") + json_quote(keys[k]) + ":";
      (*used)[k] = true;
      bool ok = with(head, [&] {
        return feed_child(v[keys[k]], json_internal::pointer_escape(keys[k]),
                          [&] { return members(v, keys, used, false, cont); });
      });
      (*used)[k] = false;
      if (ok) return true;
      if (steps_ > kMaxSteps) return false;
    }
    if (!any_left) return with("}", cont);
    return false;
  }

  GrammarMatcher* m_;
  bool keep_float_form_;
  const NumberLexemes* lexemes_ = nullptr;
  std::string path_;  // JSON pointer of the value being fed, relative to the instance
  uint64_t steps_ = 0;
};

// A small vocabulary of every single byte plus the given multi-byte tokens, one EOS, one
// special token.
inline std::shared_ptr<const TokenVocabulary> byte_vocab(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> toks;
  std::vector<uint8_t> special;
  for (int b = 0; b < 256; ++b) { toks.push_back(std::string(1, static_cast<char>(b))); special.push_back(0); }
  for (const auto& e : extra) { toks.push_back(e); special.push_back(0); }
  toks.push_back("</s>"); special.push_back(1);      // EOS
  toks.push_back("<|tool|>"); special.push_back(1);  // another special token
  int32_t eos = static_cast<int32_t>(toks.size()) - 2;
  return TokenVocabulary::create(toks, special, {eos}, static_cast<int32_t>(toks.size()) + 5).value();
}

// The mask by definition: a token is allowed iff the matcher can take its bytes; EOS iff the
// parse can end; special and empty tokens never.
inline std::vector<bool> brute_force(GrammarMatcher& m, const TokenVocabulary& v) {
  std::vector<bool> allowed(v.vocab_size(), false);
  for (int32_t t = 0; t < v.num_tokens(); ++t) {
    if (v.is_eos(t)) { allowed[t] = m.can_terminate(); continue; }
    if (v.is_special(t) || v.token_bytes(t).empty()) continue;
    allowed[t] = m.can_accept_bytes(v.token_bytes(t));
  }
  return allowed;
}

inline uint32_t test_seed() {
  static const uint32_t seed = std::random_device{}();
  return seed;
}

}  // namespace deepinfer::structured::testing
