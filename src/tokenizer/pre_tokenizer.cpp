#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/regex.h"

namespace deepinfer::tokenizer {
namespace {

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

StatusOr<Behavior> parse_behavior(const std::string& s) {
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  return InvalidArgument("pre_tokenizer Split: unknown behavior \"" + s + "\"");
}

struct Segment {
  uint32_t begin, end;
  bool is_match;
};

// Applies a split behavior to the match/non-match segments of one piece and appends the
// resulting non-empty pieces to `out` (HF SplitDelimiterBehavior semantics).
void apply_behavior(Behavior b, std::vector<Segment>& segs, std::vector<Span>& out) {
  switch (b) {
    case Behavior::kIsolated:
      for (const auto& s : segs) {
        if (s.end > s.begin) out.push_back({s.begin, s.end});
      }
      return;
    case Behavior::kRemoved:
      for (const auto& s : segs) {
        if (!s.is_match && s.end > s.begin) out.push_back({s.begin, s.end});
      }
      return;
    case Behavior::kMergedWithPrevious: {
      const size_t first = out.size();
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match && !prev_match && out.size() > first) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end});
        }
        prev_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      std::vector<Span> acc;
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const auto& s = segs[k];
        if (s.is_match && !prev_match && !acc.empty()) {
          acc.back().begin = s.begin;
        } else {
          acc.push_back({s.begin, s.end});
        }
        prev_match = s.is_match;
      }
      for (size_t k = acc.size(); k-- > 0;) out.push_back(acc[k]);
      break;
    }
    case Behavior::kContiguous: {
      const size_t first = out.size();
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match == prev_match && out.size() > first) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end});
        }
        prev_match = s.is_match;
      }
      break;
    }
  }
  // Drop empty pieces created above.
  size_t w = 0;
  for (size_t r = 0; r < out.size(); ++r) {
    if (out[r].end > out[r].begin) out[w++] = out[r];
  }
  out.resize(w);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, std::string literal, Behavior b, bool invert)
      : re_(std::move(re)), literal_(std::move(literal)), behavior_(b), invert_(invert) {}

  void pre_tokenize(std::string& buf, std::vector<Span>& pieces, bool) const override {
    thread_local std::vector<Span> out;
    thread_local std::vector<Segment> segs;
    out.clear();
    out.reserve(pieces.size() * 2);
    for (const Span& p : pieces) {
      segs.clear();
      const std::string_view piece(buf.data() + p.begin, p.end - p.begin);
      size_t prev = 0, pos = 0, ms, me;
      while (pos <= piece.size() && find(piece, pos, &ms, &me)) {
        if (me == ms) {  // empty match: no piece, step one character
          pos = ms + 1;
          while (pos < piece.size() && (static_cast<unsigned char>(piece[pos]) & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (ms > prev) segs.push_back({p.begin + uint32_t(prev), p.begin + uint32_t(ms), invert_});
        segs.push_back({p.begin + uint32_t(ms), p.begin + uint32_t(me), !invert_});
        prev = pos = me;
      }
      if (prev < piece.size()) segs.push_back({p.begin + uint32_t(prev), p.end, invert_});
      apply_behavior(behavior_, segs, out);
    }
    pieces.swap(out);
  }

 private:
  bool find(std::string_view s, size_t start, size_t* ms, size_t* me) const {
    if (re_) return re_->find(s, start, ms, me);
    if (literal_.empty()) return false;
    const size_t hit = s.find(literal_, start);
    if (hit == std::string_view::npos) return false;
    *ms = hit;
    *me = hit + literal_.size();
    return true;
  }

  std::unique_ptr<Regex> re_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space),
        split_(re ? std::make_unique<SplitPreTokenizer>(std::move(re), "", Behavior::kIsolated, false)
                  : nullptr) {}

  void pre_tokenize(std::string& buf, std::vector<Span>& pieces, bool first) const override {
    if (add_prefix_space_) {
      std::string nb;
      std::vector<Span> np;
      for (const Span& p : pieces) {
        const uint32_t b = static_cast<uint32_t>(nb.size());
        if (p.end > p.begin && buf[p.begin] != ' ') nb.push_back(' ');
        nb.append(buf, p.begin, p.end - p.begin);
        np.push_back({b, static_cast<uint32_t>(nb.size())});
      }
      buf.swap(nb);
      pieces.swap(np);
    }
    if (split_) split_->pre_tokenize(buf, pieces, first);
  }
  bool has_byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> split_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string rep, std::string scheme, bool split)
      : rep_(std::move(rep)), scheme_(std::move(scheme)), split_(split) {}

  void pre_tokenize(std::string& buf, std::vector<Span>& pieces, bool first) const override {
    std::string nb;
    std::vector<Span> np;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Span p = pieces[k];
      std::string t;
      for (uint32_t i = p.begin; i < p.end; ++i) {
        if (buf[i] == ' ') {
          t += rep_;
        } else {
          t.push_back(buf[i]);
        }
      }
      const bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == "always" || (scheme_ == "first" && first && p.begin == 0))) {
        t.insert(0, rep_);
      }
      const uint32_t base = static_cast<uint32_t>(nb.size());
      nb += t;
      if (!split_) {
        np.push_back({base, static_cast<uint32_t>(nb.size())});
        continue;
      }
      // Split on the replacement, MergedWithNext.
      size_t start = 0;
      size_t pos = t.find(rep_, rep_.size() > 0 ? 1 : 0);
      while (pos != std::string::npos && !rep_.empty()) {
        if (pos > start) np.push_back({base + uint32_t(start), base + uint32_t(pos)});
        start = pos;
        pos = t.find(rep_, pos + rep_.size());
      }
      if (t.size() > start) np.push_back({base + uint32_t(start), base + uint32_t(t.size())});
    }
    buf.swap(nb);
    pieces.swap(np);
  }

 private:
  std::string rep_, scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> s) : steps_(std::move(s)) {}
  void pre_tokenize(std::string& buf, std::vector<Span>& pieces, bool first) const override {
    for (const auto& s : steps_) s->pre_tokenize(buf, pieces, first);
  }
  bool has_byte_level() const override {
    for (const auto& s : steps_) {
      if (s->has_byte_level()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

StatusOr<std::unique_ptr<PreTokenizer>> make_split(const std::string& pattern, bool is_regex,
                                                   Behavior b, bool invert) {
  std::unique_ptr<Regex> re;
  if (is_regex) {
    DI_ASSIGN_OR_RETURN(re, Regex::compile(pattern));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(re), "", b, invert));
  }
  return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(nullptr, pattern, b, invert));
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!j.is_object() || !j.contains("type")) {
    return InvalidArgument("pre_tokenizer: expected an object with a \"type\" field");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& s : j.at("pretokenizers")) {
      DI_ASSIGN_OR_RETURN(auto p, make_pre_tokenizer(s));
      if (p) steps.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
  }
  if (type == "Split") {
    const auto& pat = j.at("pattern");
    DI_ASSIGN_OR_RETURN(Behavior b, parse_behavior(j.value("behavior", std::string("Isolated"))));
    const bool invert = j.value("invert", false);
    if (pat.contains("Regex")) return make_split(pat["Regex"].get<std::string>(), true, b, invert);
    if (pat.contains("String")) return make_split(pat["String"].get<std::string>(), false, b, invert);
    return InvalidArgument("pre_tokenizer Split: pattern must be {\"Regex\"} or {\"String\"}");
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> re;
    if (j.value("use_regex", true)) {
      DI_ASSIGN_OR_RETURN(re, Regex::compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(j.value("add_prefix_space", false), std::move(re)));
  }
  if (type == "Digits") {
    return make_split(j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", true,
                      Behavior::kIsolated, false);
  }
  if (type == "Whitespace") {
    return make_split("\\w+|[^\\w\\s]+", true, Behavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return make_split("\\s+", true, Behavior::kRemoved, false);
  }
  if (type == "Metaspace") {
    std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(
        j.value("replacement", std::string("\xE2\x96\x81")), scheme, j.value("split", true)));
  }
  return Unimplemented("pre_tokenizer type \"" + type + "\" is not supported");
}

}  // namespace deepinfer::tokenizer
