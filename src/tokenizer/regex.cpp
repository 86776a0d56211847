#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace deepinfer::tokenizer {
namespace {

// Unicode White_Space (what Oniguruma's \s matches under UTF-8).
constexpr const char* kWhiteSpaceItems =
    "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

#include "tokenizer/unicode16_delta.inc"

// Extra class items for \p{X}: the code points Unicode 16 added to category X.
const char* unicode16_added(char cat) {
  switch (cat) {
    case 'L': return kUnicode16AddedL;
    case 'N': return kUnicode16AddedN;
    case 'P': return kUnicode16AddedP;
    case 'S': return kUnicode16AddedS;
    case 'M': return kUnicode16AddedM;
    default: return nullptr;
  }
}

// One match-data block per thread, reused across calls (no allocation per match).
struct MatchData {
  pcre2_match_data_8* md = nullptr;
  pcre2_match_context_8* mctx = nullptr;
  pcre2_jit_stack_8* jit_stack = nullptr;
  MatchData() {
    md = pcre2_match_data_create_8(4, nullptr);
    mctx = pcre2_match_context_create_8(nullptr);
    jit_stack = pcre2_jit_stack_create_8(32 * 1024, 1024 * 1024, nullptr);
    pcre2_jit_stack_assign_8(mctx, nullptr, jit_stack);
  }
  ~MatchData() {
    pcre2_match_data_free_8(md);
    pcre2_match_context_free_8(mctx);
    pcre2_jit_stack_free_8(jit_stack);
  }
};

MatchData& thread_match_data() {
  thread_local MatchData data;
  return data;
}

}  // namespace

StatusOr<std::string> translate_oniguruma_pattern(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 64);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        if (class_depth > 0) {
          out += kWhiteSpaceItems;
        } else {
          out += "[";
          out += kWhiteSpaceItems;
          out += "]";
        }
        ++i;
        continue;
      }
      // \p{L} (one-letter major categories): add what Unicode 16 assigned since PCRE2's tables.
      if (n == 'p' && i + 4 < p.size() && p[i + 2] == '{' && p[i + 4] == '}' &&
          unicode16_added(p[i + 3]) != nullptr) {
        const std::string item = std::string("\\p{") + p[i + 3] + "}" + unicode16_added(p[i + 3]);
        out += class_depth > 0 ? item : "[" + item + "]";
        i += 4;
        continue;
      }
      if (n == 'P' && i + 4 < p.size() && p[i + 2] == '{' && p[i + 4] == '}' &&
          unicode16_added(p[i + 3]) != nullptr) {
        if (class_depth > 0) {
          return InvalidArgument("regex '" + p + "': \\P{..} inside a character class is not supported");
        }
        out += std::string("[^\\p{") + p[i + 3] + "}" + unicode16_added(p[i + 3]) + "]";
        i += 4;
        continue;
      }
      if (n == 'S') {
        if (class_depth > 0) {
          return InvalidArgument("regex '" + p + "': \\S inside a character class is not supported");
        }
        out += "[^";
        out += kWhiteSpaceItems;
        out += "]";
        ++i;
        continue;
      }
      out += c;
      out += n;
      ++i;
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out += '^';
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out += ']';
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

StatusOr<std::unique_ptr<Regex>> Regex::compile(const std::string& pattern) {
  DI_ASSIGN_OR_RETURN(std::string translated, translate_oniguruma_pattern(pattern));
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(translated.data()),
                                       translated.size(), PCRE2_UTF | PCRE2_UCP, &err, &err_off,
                                       nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR8 buf[256];
    pcre2_get_error_message_8(err, buf, sizeof(buf));
    return InvalidArgument("regex '" + pattern + "' does not compile at offset " +
                           std::to_string(err_off) + ": " + reinterpret_cast<char*>(buf));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = pattern;
  re->code_ = code;
  re->jit_ = pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free_8(static_cast<pcre2_code_8*>(code_));
}

bool Regex::find(std::string_view subject, size_t start, size_t* mstart, size_t* mend) const {
  MatchData& d = thread_match_data();
  auto* code = static_cast<pcre2_code_8*>(code_);
  const auto* subj = reinterpret_cast<PCRE2_SPTR8>(subject.data());
  int rc;
  if (jit_) {
    rc = pcre2_jit_match_8(code, subj, subject.size(), start, PCRE2_NO_UTF_CHECK, d.md, d.mctx);
  } else {
    rc = pcre2_match_8(code, subj, subject.size(), start, PCRE2_NO_UTF_CHECK, d.md, d.mctx);
  }
  if (rc < 0) return false;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(d.md);
  *mstart = ov[0];
  *mend = ov[1];
  return true;
}

}  // namespace deepinfer::tokenizer
