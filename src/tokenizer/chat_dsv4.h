// DeepSeek-V4 chat (prompt) encoding, byte for byte as DeepSeek's reference encoder
// (encoding/encoding_dsv4.py, encode_messages) builds it. V4 ships no Jinja template: this is
// its chat template.
//
//   ChatOptions opt;  opt.thinking = true;
//   DI_ASSIGN_OR_RETURN(std::string prompt, apply_chat_template(messages, opt));
//
// Messages are OpenAI-style objects: role (system | developer | user | assistant | tool |
// latest_reminder), content, reasoning_content, tool_calls [{id, type, function: {name,
// arguments}}], tool_call_id, tools (OpenAI tool list on a system/developer message),
// response_format, task, wo_eos. Key order matters for the JSON the encoder embeds (tool
// schemas), so the API takes nlohmann::ordered_json.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace deepinfer::tokenizer {

struct ChatOptions {
  bool thinking = false;            // thinking_mode "thinking" (true) or "chat" (false)
  bool drop_thinking = true;        // drop reasoning of turns before the last user message
  bool add_default_bos_token = true;
  std::optional<std::string> reasoning_effort;  // "max" | "high" | none
  // Earlier turns already encoded (the prompt continues them: no BOS, not re-rendered).
  nlohmann::ordered_json context = nlohmann::ordered_json::array();
  // OpenAI tool list; when non-empty it is attached to messages[0] (as the reference harness
  // does with a request-level tool list).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
};

StatusOr<std::string> apply_chat_template(const nlohmann::ordered_json& messages,
                                          const ChatOptions& options);
// Convenience for unordered JSON (object keys are then in alphabetical order).
StatusOr<std::string> apply_chat_template(const nlohmann::json& messages, const ChatOptions& options);

// Parses encode_messages keyword arguments as the reference takes them ({"thinking_mode":
// "thinking", "drop_thinking": false, "reasoning_effort": "max", "context": [...],
// "add_default_bos_token": false}) into options.
StatusOr<ChatOptions> chat_options_from_kwargs(const nlohmann::ordered_json& kwargs);

}  // namespace deepinfer::tokenizer
