// How far a lexeme provably runs on plain text of measure `measure` (plain_text.h: a class, and
// bytes or code points as the unit of length), for the mask fast path: from DFA state `state`,
// over every plain-text string w of length 1..n in that unit,
//   stop_at_dead = true:  the DFA stays alive and non-accepting (the lexeme cannot end or die);
//   stop_at_dead = false: the DFA never accepts (it may die).
// plain_depth returns the largest such n, capped at `cap` (a breadth-first search over
// (DFA state, plain-text state) pairs; past `max_visit` pairs it stops and returns the depth it
// fully verified, so the answer is always safe).
#pragma once

#include <cstdint>

#include "structured/automaton.h"
#include "structured/plain_text.h"

namespace deepinfer::structured {

// How a question is answered. kAuto (session 7): a lookup when the automaton's exact table
// (plain_depth.cpp, PlainTable) exists; otherwise a search bounded by a small probe budget,
// taken when it finishes within it (then it is exact); otherwise the table is built (small
// automata) or the bounded search runs. Most automata asked about once (object keys, enums:
// some plain byte kills them at once) then never pay for a table. kTable / kSearch force one
// way (tests compare them: every answer must be equal).
enum class PlainPath { kAuto, kTable, kSearch };
// Drops this thread's tables (tests: makes the next kAuto question probe again).
void forget_plain_tables();
// kAuto's probe budgets (defaults 256 pairs / 1,024 steps; tests lower them so probes run out).
// Not thread-safe: set before any question is asked.
void set_plain_probe_budgets(uint32_t visits, uint32_t work);

uint32_t plain_depth(const Dfa& dfa, uint32_t state, bool stop_at_dead, uint32_t cap,
                     uint32_t max_visit = 4096, int measure = plain_text::kJson,
                     PlainPath path = PlainPath::kAuto);

// True when every plain-text string of length exactly k (in the measure's unit) takes the DFA
// from `state` to the dead state (so does every longer one). False when some does not, or past
// `max_work` steps.
bool plain_dies_by(const Dfa& dfa, uint32_t state, uint32_t k, uint32_t max_work = 20000,
                   int measure = plain_text::kJson, PlainPath path = PlainPath::kAuto);

}  // namespace deepinfer::structured
