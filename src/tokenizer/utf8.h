// UTF-8 helpers shared by the tokenizer: decoding code points, validation, the lossy conversion
// Rust's String::from_utf8_lossy performs (which Hugging Face decoders use), and the GPT-2
// byte <-> unicode map of byte-level BPE.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// Appends the UTF-8 encoding of code point `cp` to `out`.
void append_utf8(std::string& out, uint32_t cp);

// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 when the bytes there are
// not a complete valid sequence (ill-formed or truncated).
size_t valid_utf8_seq_len(std::string_view s, size_t i);

// Decodes the (valid) code point at s[i]; `len` receives its byte length. Precondition: valid.
uint32_t decode_utf8(std::string_view s, size_t i, size_t* len);

// Byte offset of the first invalid UTF-8 byte, or npos when `s` is entirely valid.
size_t find_invalid_utf8(std::string_view s);

// Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Length of the prefix of `bytes` whose lossy conversion can never change when more bytes are
// appended: everything except a trailing sequence that is a valid-so-far but incomplete prefix
// of a multi-byte character.
size_t utf8_stable_prefix(std::string_view bytes);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
const std::array<uint32_t, 256>& byte_to_unicode();
// Inverse map; -1 for code points outside the alphabet. Indexed by code point < 512.
int unicode_to_byte(uint32_t cp);

}  // namespace deepinfer::tokenizer
