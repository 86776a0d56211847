#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

const std::string kEmpty;

// A token named in tokenizer_config.json: "text" or {"content": "text", ...} or null.
std::optional<std::string> config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

StatusOr<nlohmann::json> read_json(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::string text, read_file_maybe_xz(path));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  return j;
}

// Byte form of a token string under the decoder (see Tokenizer::token_bytes).
std::string token_to_bytes(const std::string& tok, const DecoderSpec& spec) {
  if (spec.byte_level) {
    std::string out;
    size_t i = 0;
    while (i < tok.size()) {
      if (valid_utf8_seq_len(tok, i) == 0) return tok;
      size_t len;
      const int b = unicode_to_byte(decode_utf8(tok, i, &len));
      if (b < 0) return tok;
      out.push_back(static_cast<char>(b));
      i += len;
    }
    return out;
  }
  std::string t = tok;
  for (const auto& [from, to] : spec.replacements) {
    if (from.empty()) continue;
    size_t pos = 0;
    while ((pos = t.find(from, pos)) != std::string::npos) {
      t.replace(pos, from.size(), to);
      pos += to.size();
    }
  }
  if (spec.byte_fallback && tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') {
    const auto hexv = [](char c) {
      return (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    };
    const int h = hexv(tok[3]), l = hexv(tok[4]);
    if (h >= 0 && l >= 0) return std::string(1, static_cast<char>(h * 16 + l));
  }
  return t;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(path)) {
    if (fs::exists(path + ".xz")) {
      path += ".xz";
    } else {
      return NotFound("no tokenizer.json in " + dir);
    }
  }
  nlohmann::json cfg, gen;
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(cfg_path)) {
    DI_ASSIGN_OR_RETURN(cfg, read_json(cfg_path));
  }
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(gen_path)) {
    DI_ASSIGN_OR_RETURN(gen, read_json(gen_path));
  }
  return from_file(path, cfg, gen);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::string& path,
                                                          const nlohmann::json& cfg,
                                                          const nlohmann::json& gen) {
  DI_ASSIGN_OR_RETURN(nlohmann::json j, read_json(path));
  auto t = from_json(j, cfg, gen);
  if (!t.ok()) return t.status().with_context("while loading " + path);
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_json(const nlohmann::json& j,
                                                          const nlohmann::json& cfg,
                                                          const nlohmann::json& gen) {
  try {
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    if (!j.is_object() || !j.contains("model")) {
      return InvalidArgument("tokenizer.json: missing \"model\"");
    }
    const std::string model_type = j["model"].value("type", std::string("BPE"));
    if (model_type != "BPE") {
      return Unimplemented("tokenizer.json: model type \"" + model_type + "\" (only BPE is supported)");
    }
    DI_ASSIGN_OR_RETURN(t->normalizer_, make_normalizer(j.value("normalizer", nlohmann::json())));
    DI_ASSIGN_OR_RETURN(t->pre_tokenizer_, make_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json())));
    const bool byte_level = t->pre_tokenizer_ && t->pre_tokenizer_->has_byte_level();
    DI_ASSIGN_OR_RETURN(t->model_, BpeModel::load(j["model"], byte_level));
    const nlohmann::json dec = j.value("decoder", nlohmann::json());
    DI_ASSIGN_OR_RETURN(t->decoder_, make_decoder(dec));
    t->decoder_spec_ = describe_decoder(dec);

    // Id tables: model vocab, then added tokens (which take precedence for id -> token).
    int32_t max_id = -1;
    for (const auto& [tok, id] : t->model_->vocab()) max_id = std::max(max_id, id);
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        AddedToken at;
        at.id = a.at("id").get<int32_t>();
        at.content = a.at("content").get<std::string>();
        at.single_word = a.value("single_word", false);
        at.lstrip = a.value("lstrip", false);
        at.rstrip = a.value("rstrip", false);
        at.normalized = a.value("normalized", !a.value("special", false));
        at.special = a.value("special", false);
        if (at.id < 0) return InvalidArgument("added_tokens: negative id for \"" + at.content + "\"");
        max_id = std::max(max_id, at.id);
        t->added_.push_back(std::move(at));
      }
    }
    if (max_id < 0) return InvalidArgument("tokenizer.json: empty vocabulary");
    t->id_to_token_.assign(max_id + 1, std::string());
    t->special_.assign(max_id + 1, 0);
    for (const auto& [tok, id] : t->model_->vocab()) {
      if (id >= 0) t->id_to_token_[id] = tok;
    }
    std::vector<const AddedToken*> raw, norm;
    for (auto& at : t->added_) {
      // HF stores normalized added tokens in their normalized form: that is what decode yields.
      t->id_to_token_[at.id] = at.content;
      if (at.normalized && t->normalizer_) t->normalizer_->normalize(t->id_to_token_[at.id]);
      t->special_[at.id] = at.special ? 1 : 0;
      (at.normalized ? norm : raw).push_back(&at);
    }
    // Normalized tokens are matched against normalized text: normalize their content too.
    std::vector<AddedToken> norm_copies;
    norm_copies.reserve(norm.size());
    for (const AddedToken* a : norm) {
      AddedToken c = *a;
      if (t->normalizer_) t->normalizer_->normalize(c.content);
      norm_copies.push_back(std::move(c));
    }
    t->raw_matcher_.build(raw);
    t->normalized_copies_ = std::make_unique<std::vector<AddedToken>>(std::move(norm_copies));
    std::vector<const AddedToken*> norm_ptrs;
    for (const auto& c : *t->normalized_copies_) norm_ptrs.push_back(&c);
    t->normalized_matcher_.build(norm_ptrs);

    t->token_bytes_.resize(t->id_to_token_.size());
    for (size_t id = 0; id < t->id_to_token_.size(); ++id) {
      t->token_bytes_[id] = token_to_bytes(t->id_to_token_[id], t->decoder_spec_);
    }

    // BOS / EOS.
    auto lookup = [&](const std::optional<std::string>& s) -> std::optional<int32_t> {
      if (!s) return std::nullopt;
      return t->token_to_id(*s);
    };
    t->bos_id_ = lookup(config_token(cfg, "bos_token"));
    if (!t->bos_id_ && gen.is_object() && gen.contains("bos_token_id") && gen["bos_token_id"].is_number_integer()) {
      t->bos_id_ = gen["bos_token_id"].get<int32_t>();
    }
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const auto& e = gen["eos_token_id"];
      if (e.is_number_integer()) t->eos_ids_.push_back(e.get<int32_t>());
      if (e.is_array()) {
        for (const auto& x : e) t->eos_ids_.push_back(x.get<int32_t>());
      }
    }
    if (auto eos = lookup(config_token(cfg, "eos_token"))) {
      if (std::find(t->eos_ids_.begin(), t->eos_ids_.end(), *eos) == t->eos_ids_.end()) {
        t->eos_ids_.insert(t->eos_ids_.begin(), *eos);
      }
    }

    // What add_special_tokens adds: the TemplateProcessing post-processor when there is one,
    // else tokenizer_config's add_bos_token / add_eos_token (transformers' Llama tokenizers add
    // BOS themselves). Without add_bos_token, BOS is added when a bos_token distinct from the
    // eos_token is configured (Llama-3's PreTrainedTokenizerFast config) - see docs/tokenizer.md.
    const nlohmann::json pp = j.value("post_processor", nlohmann::json());
    const std::string pp_type = pp.is_object() ? pp.value("type", std::string()) : "";
    if (pp_type == "TemplateProcessing") {
      bool after = false;
      for (const auto& item : pp.at("single")) {
        if (item.contains("Sequence")) {
          after = true;
          continue;
        }
        if (item.contains("SpecialToken")) {
          const std::string name = item["SpecialToken"].at("id").get<std::string>();
          const auto& st = pp.at("special_tokens");
          if (!st.contains(name)) {
            return InvalidArgument("post_processor: special token \"" + name + "\" is not defined");
          }
          for (const auto& id : st[name].at("ids")) {
            (after ? t->suffix_ids_ : t->prefix_ids_).push_back(id.get<int32_t>());
          }
        }
      }
    } else if (pp_type == "BertProcessing" || pp_type == "RobertaProcessing") {
      t->prefix_ids_.push_back(pp.at("cls").at(1).get<int32_t>());
      t->suffix_ids_.push_back(pp.at("sep").at(1).get<int32_t>());
    } else {
      const auto bos_s = config_token(cfg, "bos_token");
      const auto eos_s = config_token(cfg, "eos_token");
      bool add_bos = false, add_eos = false;
      if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
        add_bos = cfg["add_bos_token"].get<bool>();
      } else {
        add_bos = bos_s.has_value() && bos_s != eos_s;
      }
      if (cfg.is_object() && cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) {
        add_eos = cfg["add_eos_token"].get<bool>();
      }
      if (add_bos && t->bos_id_) t->prefix_ids_.push_back(*t->bos_id_);
      if (add_eos && !t->eos_ids_.empty()) t->suffix_ids_.push_back(t->eos_ids_.front());
    }
    t->add_bos_ = !t->prefix_ids_.empty() && t->bos_id_ && t->prefix_ids_.front() == *t->bos_id_;
    return t;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(token_bytes_.size())) return kEmpty;
  return token_bytes_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(special_.size()) && special_[id] != 0;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size())) return kEmpty;
  return id_to_token_[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = model_->vocab().find(token);
  if (it != model_->vocab().end()) return it->second;
  return std::nullopt;
}

void Tokenizer::encode_normalized(std::string& buf, bool at_input_start,
                                  std::vector<int32_t>& out) const {
  thread_local std::vector<Span> pieces;
  pieces.clear();
  if (buf.empty()) return;
  pieces.push_back({0, static_cast<uint32_t>(buf.size())});
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(buf, pieces, at_input_start);
  for (const Span& p : pieces) {
    model_->tokenize_word(std::string_view(buf.data() + p.begin, p.end - p.begin), out);
  }
}

void Tokenizer::encode_plain(std::string_view segment, bool at_input_start,
                             std::vector<int32_t>& out) const {
  std::string buf(segment);
  if (normalizer_) normalizer_->normalize(buf);
  if (normalized_matcher_.empty()) {
    encode_normalized(buf, at_input_start, out);
    return;
  }
  std::vector<TextSplit> splits;
  normalized_matcher_.split(buf, splits);
  for (const auto& s : splits) {
    if (s.token_id >= 0) {
      out.push_back(s.token_id);
    } else {
      std::string sub = buf.substr(s.begin, s.end - s.begin);
      encode_normalized(sub, at_input_start && s.begin == 0, out);
    }
  }
}

StatusOr<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    return InvalidArgument("encode: text is not valid UTF-8 (first bad byte at offset " +
                           std::to_string(bad) + ")");
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special_tokens) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  if (raw_matcher_.empty()) {
    encode_plain(text, true, out);
  } else {
    std::vector<TextSplit> splits;
    raw_matcher_.split(text, splits);
    for (const auto& s : splits) {
      if (s.token_id >= 0) {
        out.push_back(s.token_id);
      } else {
        encode_plain(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
      }
    }
  }
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size())) continue;
    if (id_to_token_[id].empty() && token_bytes_[id].empty()) continue;  // hole in the id space
    if (skip_special_tokens && special_[id]) continue;
    tokens.push_back(id_to_token_[id]);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace deepinfer::tokenizer
