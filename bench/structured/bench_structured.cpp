// Per-token mask time and compile time on MaskBench schemas with a real vocabulary, single
// thread. For every schema that compiles, each valid instance is serialized compactly (keys in
// instance order; instances the grammar does not accept in that order are skipped and counted),
// tokenized, and driven token by token: fill_mask (timed) then accept_token, then EOS.
//   bench_structured --maskbench DIR --tokenizer DIR [--every N] [--json-out FILE]
//                    [--ids-out FILE] [--profile FILE] [--generate N --gen-out FILE]
//                    [--clock wall|cpu] [--dfa-digest FILE] [--cold-compile]
//                    [--verify] [--ab] [--only SUBSTRING] [--repeat N]
// --profile writes one JSON line per mask (time and MaskStats) for finding slow states.
// --verify / --ab compare with MatcherOptions::keep_exit_walks off (exactness / in-process
// timing, see below); --only and --repeat restrict the run to some schemas, driven N times.
// bench_structured --serve --tokenizer DIR: the deepinfer side of compare.py. Reads JSON lines
// {"schema": {...}, "docs": [[ids], ...]} from stdin and answers each with one line
// {"compile_us": x, "mask_us": [...], "mask_errors": n, "token_not_allowed": n} (or {"error": ..}),
// so that the three engines can be interleaved schema by schema in one process tree.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_schema.h"
#include "structured/json_schema_internal.h"
#include "structured/matcher.h"
#include "structured/vocab_from_tokenizer.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;
using namespace deepinfer::structured;
using OJson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

// --clock cpu: time with this thread's CPU clock instead of the wall clock, for before/after
// comparisons on a loaded machine (the peers in compare.py are always timed by wall clock).
bool g_cpu_clock = false;
// --cold-compile: empty the process-wide DFA build memo before every compile, so that compile
// times do not profit from lexemes of earlier schemas (the mask cache is still shared).
bool g_cold_compile = false;
// --verify: drive a second matcher with MatcherOptions::keep_exit_walks off (walks below exits
// recomputed every mask) in lockstep and count masks that differ (verify_mismatches); before
// each step the first matcher also accepts up to two random allowed tokens and rolls them back
// (as speculative decoding would), so kept walks must survive foreign sets being pushed/popped.
bool g_verify = false;
uint64_t g_verify_masks = 0, g_verify_mismatches = 0;
std::mt19937 g_verify_rng(12345);
// --ab: also time a matcher with keep_exit_walks off on every mask (the two alternate which goes
// first), interleaved in one process so that both see the same machine load; reported as
// mask_us_b. (A/B of one option, robust to the load of a shared machine.)
bool g_ab = false;
std::vector<double> g_ab_us;

double now_us() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
  }
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

// The thread-CPU clock is a system call on this VM (~2.8 us per call; the part of it that lands
// inside a timed interval was ~0.7 us), so --clock cpu subtracts the median of 2,001 empty
// intervals from every mask time (reported as clock_overhead_us). The wall clock (vDSO, ~0.1 us) is not corrected, like the
// peers' Python timers.
double g_clock_overhead_us = 0;

void calibrate_clock() {
  if (!g_cpu_clock) return;
  std::vector<double> empty;
  for (int i = 0; i < 2001; ++i) {
    double t = now_us();
    empty.push_back(now_us() - t);
  }
  std::nth_element(empty.begin(), empty.begin() + 1000, empty.end());
  g_clock_overhead_us = empty[1000];
}

std::string serialize(const OJson& v) {
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) s += ",";
      first = false;
      s += json_quote(it.key()) + ":" + serialize(it.value());
    }
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + serialize(v[i]);
    return s + "]";
  }
  if (v.is_string()) return json_quote(v.get<std::string>());
  if (v.is_number()) return json_internal::canonical_number(v);
  return v.dump();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// Drives one document (ids + EOS): fill_mask (timed) then accept_token. Returns false on a
// mask error or a token the mask did not allow.
bool drive(const std::shared_ptr<CompiledGrammar>& g, const std::shared_ptr<const TokenVocabulary>& vocab,
           const std::vector<int32_t>& ids, std::vector<uint32_t>& mask, std::vector<double>& mask_us,
           int* mask_errors, int* not_accepted, std::ostream* profile = nullptr,
           const std::string& label = "") {
  GrammarMatcher m(g, vocab);
  MatcherOptions ref_opts;
  ref_opts.keep_exit_walks = false;
  GrammarMatcher ref(g, vocab, ref_opts);
  std::vector<uint32_t> ref_mask(g_verify ? mask.size() : 0);
  std::vector<int32_t> seq = ids;
  seq.push_back(vocab->eos_ids()[0]);
  int step = 0;
  std::vector<uint32_t> ab_mask(g_ab ? mask.size() : 0);
  for (int32_t id : seq) {
    if (g_ab && (step & 1)) {
      double t0 = now_us();
      (void)ref.fill_mask(ab_mask.data(), ab_mask.size());
      g_ab_us.push_back(std::max(0.0, now_us() - t0 - g_clock_overhead_us));
    }
    double t1 = now_us();
    Status st = m.fill_mask(mask.data(), mask.size());
    double us = std::max(0.0, now_us() - t1 - g_clock_overhead_us);
    mask_us.push_back(us);
    if (g_ab) {
      if (!(step & 1)) {
        double t0 = now_us();
        (void)ref.fill_mask(ab_mask.data(), ab_mask.size());
        g_ab_us.push_back(std::max(0.0, now_us() - t0 - g_clock_overhead_us));
      }
      if (!g_verify) ref.accept_token(id);  // (--verify advances ref itself)
    }
    if (g_verify && st.ok()) {
      ++g_verify_masks;
      Status rs = ref.fill_mask(ref_mask.data(), ref_mask.size());
      if (!rs.ok() || ref_mask != mask) ++g_verify_mismatches;
      // A speculative excursion: up to two allowed tokens (each from the mask where it is
      // taken), rolled back; then the mask again.
      int pushed = 0;
      std::vector<uint32_t> cur = ref_mask;
      std::vector<int32_t> allowed;
      for (int k = 0; k < 2 && !m.is_terminated(); ++k) {
        allowed.clear();
        for (size_t w = 0; w < cur.size(); ++w) {
          for (uint32_t bits = cur[w]; bits; bits &= bits - 1) allowed.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(bits)));
        }
        if (allowed.empty()) break;
        if (!m.accept_token(allowed[g_verify_rng() % allowed.size()])) { ++g_verify_mismatches; break; }
        ++pushed;
        if (!m.fill_mask(cur.data(), cur.size()).ok()) break;
      }
      m.rollback(pushed);
      st = m.fill_mask(mask.data(), mask.size());
      Status rs2 = ref.fill_mask(ref_mask.data(), ref_mask.size());
      ++g_verify_masks;
      if (!st.ok() || !rs2.ok() || ref_mask != mask) ++g_verify_mismatches;
      ref.accept_token(id);
    }
    if (profile) {
      const MaskStats& ms = m.last_mask_stats();
      *profile << OJson{{"doc", label}, {"step", step}, {"us", us}, {"hit", ms.cache_hit},
                        {"frontier", ms.frontier}, {"plain", ms.plain_depth}, {"exits", ms.exits},
                        {"exit_walks", ms.exit_walks}, {"reuses", ms.exit_reuses}, {"groups", ms.exit_groups},
                        {"pushes", ms.top_pushes}, {"top_items", ms.top_items}, {"nodes", ms.trie_nodes},
                        {"items", ms.parser_items}}.dump() << "\n";
    }
    ++step;
    if (!st.ok()) { ++*mask_errors; return false; }
    if (!((mask[id >> 5] >> (id & 31)) & 1) || !m.accept_token(id)) { ++*not_accepted; return false; }
  }
  return true;
}

// FNV-style digest of a terminal automaton's tables through the public API (--dfa-digest: checks
// that a change to the DFA construction yields identical automata on every MaskBench terminal).
uint64_t dfa_digest(const Dfa& d) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  mix(d.start());
  mix(d.num_states());
  for (int b = 0; b < 256; ++b) mix(d.byte_class(static_cast<uint8_t>(b)));
  for (uint32_t s = 0; s < d.num_states(); ++s) {
    mix(d.accepting(s));
    for (int b = 0; b < 256; ++b) mix(d.next(s, static_cast<uint8_t>(b)));
  }
  return h;
}

int serve(const std::shared_ptr<const TokenVocabulary>& vocab) {
  std::vector<uint32_t> mask(vocab->bitmask_words());
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    OJson req = OJson::parse(line);
    if (g_cold_compile) Dfa::clear_build_cache();
    double t0 = now_us();
    auto g = compile_json_schema(req["schema"].dump());
    if (!g.ok()) {
      std::cout << OJson{{"error", g.status().to_string()}}.dump() << std::endl;
      continue;
    }
    GrammarMatcher first(g->grammar, vocab);
    Status st0 = first.fill_mask(mask.data(), mask.size());
    double cus = now_us() - t0;
    std::vector<double> mask_us;
    int mask_errors = 0, not_accepted = 0;
    for (const auto& d : req["docs"]) {
      drive(g->grammar, vocab, d.get<std::vector<int32_t>>(), mask, mask_us, &mask_errors, &not_accepted);
    }
    std::cout << OJson{{"compile_us", cus}, {"mask_us", mask_us}, {"mask_errors", mask_errors},
                       {"token_not_allowed", not_accepted}}.dump() << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, tok_dir, json_out, ids_out, gen_out, profile_out, digest_out;
  int every = 1, gen_per_schema = 0, repeat = 1;
  std::string only;
  bool serve_mode = false;
  uint32_t seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--serve") serve_mode = true;
    if (std::string(argv[i]) == "--cold-compile") g_cold_compile = true;
    if (std::string(argv[i]) == "--verify") g_verify = true;
    if (std::string(argv[i]) == "--ab") g_ab = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--serve" || a == "--cold-compile" || a == "--verify" || a == "--ab") { --i; continue; }
    if (a == "--profile") profile_out = argv[i + 1];
    if (a == "--maskbench") dir = argv[i + 1];
    else if (a == "--tokenizer") tok_dir = argv[i + 1];
    else if (a == "--every") every = std::stoi(argv[i + 1]);
    else if (a == "--json-out") json_out = argv[i + 1];
    else if (a == "--ids-out") ids_out = argv[i + 1];
    else if (a == "--generate") gen_per_schema = std::stoi(argv[i + 1]);  // random documents per schema
    else if (a == "--gen-out") gen_out = argv[i + 1];
    else if (a == "--dfa-digest") digest_out = argv[i + 1];
    else if (a == "--only") only = argv[i + 1];  // schema files whose name contains this
    else if (a == "--repeat") repeat = std::stoi(argv[i + 1]);  // drive each document N times
    else if (a == "--clock") g_cpu_clock = std::string(argv[i + 1]) == "cpu";
    else if (a == "--seed") seed = static_cast<uint32_t>(std::stoul(argv[i + 1]));  // JSONL {file, schema, ids} for baselines
  }
  calibrate_clock();
  if (serve_mode && !tok_dir.empty()) {
    auto tok = tokenizer::Tokenizer::from_dir(tok_dir);
    if (!tok.ok()) { std::cerr << tok.status().to_string() << "\n"; return 1; }
    return serve(vocab_from_tokenizer(**tok).value());
  }
  if (dir.empty() || tok_dir.empty()) {
    std::cerr << "usage: bench_structured --maskbench DIR --tokenizer DIR [--every N] [--json-out FILE]\n";
    return 2;
  }
  auto tok = tokenizer::Tokenizer::from_dir(tok_dir);
  if (!tok.ok()) { std::cerr << tok.status().to_string() << "\n"; return 1; }
  auto vocab = vocab_from_tokenizer(**tok).value();
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<double> mask_us, compile_us;
  int schemas = 0, compiled = 0, instances = 0, skipped = 0, mask_errors = 0, not_accepted = 0;
  std::vector<uint32_t> mask(vocab->bitmask_words());
  OJson per_schema = OJson::array();
  std::ofstream gen_file;
  if (!gen_out.empty()) gen_file.open(gen_out);
  std::mt19937 rng(seed);
  int generated = 0, truncated = 0;
  std::ofstream ids_file, profile_file, digest_file;
  if (!digest_out.empty()) digest_file.open(digest_out);
  if (!ids_out.empty()) ids_file.open(ids_out);
  if (!profile_out.empty()) profile_file.open(profile_out);
  for (size_t fi = 0; fi < files.size(); fi += every) {
    if (!only.empty() && files[fi].filename().string().find(only) == std::string::npos) continue;
    std::ifstream f(files[fi]);
    OJson doc = OJson::parse(f);
    ++schemas;
    if (g_cold_compile) Dfa::clear_build_cache();
    double t0 = now_us();
    auto g = compile_json_schema(doc["schema"].dump());
    if (!g.ok()) continue;
    if (digest_file) {
      digest_file << files[fi].filename().string();
      for (int t = 0; t < g->grammar->num_terminals(); ++t) digest_file << " " << dfa_digest(g->grammar->dfa(t));
      digest_file << "\n";
    }
    // Time to first mask counts as compile (lexer automata are built eagerly at compile).
    GrammarMatcher first(g->grammar, vocab);
    Status st0 = first.fill_mask(mask.data(), mask.size());
    double cus = now_us() - t0;
    compile_us.push_back(cus);
    ++compiled;
    for (const auto& tc : doc["tests"]) {
      if (!tc["valid"].get<bool>()) continue;
      std::string text = serialize(tc["data"]);
      GrammarMatcher probe(g->grammar, vocab);
      if (!probe.accept_bytes(text) || !probe.can_terminate()) { ++skipped; continue; }
      auto ids = (*tok)->encode(text, false);
      if (!ids.ok()) { ++skipped; continue; }
      ++instances;
      if (ids_file) {
        ids_file << OJson{{"file", files[fi].filename().string()}, {"schema", doc["schema"]}, {"ids", *ids}}.dump() << "\n";
      }
      for (int r = 0; r < repeat; ++r) {
        drive(g->grammar, vocab, *ids, mask, mask_us, &mask_errors, &not_accepted,
              profile_file.is_open() ? &profile_file : nullptr,
              files[fi].filename().string() + "#" + std::to_string(instances));
      }
    }
    // Random constrained generations: uniform over the allowed tokens (EOS taken with
    // probability 1/2 when allowed), at most 400 tokens; the bytes are checked by an
    // independent validator (check_generations.py).
    for (int k = 0; k < gen_per_schema; ++k) {
      GrammarMatcher m(g->grammar, vocab);
      std::string text;
      std::vector<int32_t> allowed;
      for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
        if (!m.fill_mask(mask.data(), mask.size()).ok()) break;
        allowed.clear();
        bool eos_ok = false;
        for (size_t w = 0; w < mask.size(); ++w) {
          for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
            int32_t t = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
            if (vocab->is_eos(t)) eos_ok = true; else allowed.push_back(t);
          }
        }
        int32_t pick;
        if (eos_ok && (allowed.empty() || rng() % 2 == 0)) pick = vocab->eos_ids()[0];
        else if (allowed.empty()) break;
        else pick = allowed[rng() % allowed.size()];
        if (!m.accept_token(pick)) break;
        if (!vocab->is_eos(pick)) text += vocab->token_bytes(pick);
      }
      if (!m.is_terminated()) { ++truncated; continue; }
      ++generated;
      if (gen_file) gen_file << OJson{{"file", files[fi].filename().string()}, {"schema", doc["schema"]}, {"text", text}}.dump(-1, ' ', false, OJson::error_handler_t::replace) << "\n";
    }
    per_schema.push_back({{"file", files[fi].filename().string()}, {"compile_us", cus}});
  }
  double sum = 0;
  for (double x : mask_us) sum += x;
  double csum = 0;
  for (double x : compile_us) csum += x;
  OJson out = {
      {"schemas", schemas}, {"compiled", compiled}, {"instances", instances},
      {"instances_skipped_key_order", skipped}, {"mask_errors", mask_errors},
      {"token_not_allowed", not_accepted}, {"masks", mask_us.size()},
      {"mask_us", {{"mean", mask_us.empty() ? 0 : sum / mask_us.size()}, {"p50", pct(mask_us, 0.5)},
                   {"p99", pct(mask_us, 0.99)}, {"max", pct(mask_us, 1.0)}}},
      {"compile_us", {{"mean", compile_us.empty() ? 0 : csum / compile_us.size()}, {"p50", pct(compile_us, 0.5)},
                      {"p99", pct(compile_us, 0.99)}, {"max", pct(compile_us, 1.0)}}},
      {"vocab_size", vocab->vocab_size()}, {"generated", generated},
      {"generation_truncated_at_400_tokens", truncated}, {"seed", seed},
      {"clock", g_cpu_clock ? "thread_cpu" : "wall"}, {"clock_overhead_us", g_clock_overhead_us}};
  if (g_ab) {
    double sb = 0;
    for (double x : g_ab_us) sb += x;
    out["mask_us_b"] = {{"mean", g_ab_us.empty() ? 0 : sb / g_ab_us.size()}, {"p50", pct(g_ab_us, 0.5)},
                        {"p99", pct(g_ab_us, 0.99)}, {"max", pct(g_ab_us, 1.0)}};
  }
  if (g_verify) {
    out["verify_masks"] = g_verify_masks;
    out["verify_mismatches"] = g_verify_mismatches;
  }
  std::cout << out.dump(2) << "\n";
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  return 0;
}
