#include "tokenizer/chat_dsv4.h"

#include <algorithm>
#include <map>

#include "tokenizer/py_json.h"

namespace deepinfer::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kThinkStart = "<think>";
const std::string kThinkEnd = "</think>";
const std::string kDsml = "｜DSML｜";
const std::string kUser = "<｜User｜>";
const std::string kAssistant = "<｜Assistant｜>";
const std::string kLatestReminder = "<｜latest_reminder｜>";

const std::map<std::string, std::string>& task_tokens() {
  static const std::map<std::string, std::string> m = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"},   {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
  return m;
}

const char* kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

std::string tools_section(const std::string& schemas) {
  const std::string d = kDsml;
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
         "can invoke tools by writing a \"<" + d + "tool_calls>\" block like the following:\n\n<" +
         d + "tool_calls>\n<" + d + "invoke name=\"$TOOL_NAME\">\n<" + d +
         "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d +
         "parameter>\n...\n</" + d + "invoke>\n<" + d + "invoke name=\"$TOOL_NAME2\">\n...\n</" + d +
         "invoke>\n</" + d +
         "tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. "
         "For all other types (numbers, booleans, arrays, objects), pass the value in JSON format "
         "and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by " + kThinkStart +
         "), you MUST output your complete reasoning inside " + kThinkStart + "..." + kThinkEnd +
         " BEFORE any tool calls or final response.\n\nOtherwise, output directly after " +
         kThinkEnd + " with tool calls or final response.\n\n### Available Tool Schemas\n\n" +
         schemas +
         "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to "
         "invoke tool calls.\n";
}

// Python truthiness of an optional field.
bool truthy(const ojson& m, const char* key) {
  if (!m.is_object() || !m.contains(key)) return false;
  const ojson& v = m[key];
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  if (v.is_number()) return v.get<double>() != 0.0;
  return true;
}

std::string role_of(const ojson& m) {
  if (m.contains("role") && m["role"].is_string()) return m["role"].get<std::string>();
  return "";
}

// `content or ""` for a field that must be text.
StatusOr<std::string> text_or_empty(const ojson& m, const char* key) {
  if (!m.contains(key) || m[key].is_null()) return std::string();
  if (!m[key].is_string()) {
    return InvalidArgument(std::string("message field \"") + key + "\" must be a string");
  }
  return m[key].get<std::string>();
}

// Python's str(x) for a value formatted into a template.
std::string py_str(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return python_json_dumps(v);
}

int find_last_user_index(const std::vector<ojson>& msgs) {
  for (int i = static_cast<int>(msgs.size()) - 1; i >= 0; --i) {
    const std::string r = role_of(msgs[i]);
    if (r == "user" || r == "developer") return i;
  }
  return -1;
}

StatusOr<std::vector<ojson>> merge_tool_messages(const ojson& messages) {
  std::vector<ojson> merged;
  for (const ojson& msg : messages) {
    if (!msg.is_object()) return InvalidArgument("each message must be a JSON object");
    const std::string role = role_of(msg);
    if (role == "tool") {
      ojson block = ojson::object();
      block["type"] = "tool_result";
      block["tool_use_id"] = msg.contains("tool_call_id") ? msg["tool_call_id"] : ojson("");
      block["content"] = msg.contains("content") ? msg["content"] : ojson("");
      if (!merged.empty() && role_of(merged.back()) == "user" && merged.back().contains("content_blocks")) {
        merged.back()["content_blocks"].push_back(block);
      } else {
        ojson m = ojson::object();
        m["role"] = "user";
        m["content_blocks"] = ojson::array({block});
        merged.push_back(std::move(m));
      }
    } else if (role == "user") {
      ojson text_block = ojson::object();
      text_block["type"] = "text";
      text_block["text"] = msg.contains("content") ? msg["content"] : ojson("");
      const bool no_task = !merged.empty() &&
                           (!merged.back().contains("task") || merged.back()["task"].is_null());
      if (!merged.empty() && role_of(merged.back()) == "user" &&
          merged.back().contains("content_blocks") && no_task) {
        merged.back()["content_blocks"].push_back(text_block);
      } else {
        ojson m = ojson::object();
        m["role"] = "user";
        m["content"] = msg.contains("content") ? msg["content"] : ojson("");
        m["content_blocks"] = ojson::array({text_block});
        for (const char* key : {"task", "wo_eos", "mask"}) {
          if (msg.contains(key)) m[key] = msg[key];
        }
        merged.push_back(std::move(m));
      }
    } else {
      merged.push_back(msg);
    }
  }
  return merged;
}

void sort_tool_results_by_call_order(std::vector<ojson>& messages) {
  std::map<std::string, int> order;
  for (ojson& msg : messages) {
    const std::string role = role_of(msg);
    if (role == "assistant" && truthy(msg, "tool_calls")) {
      order.clear();
      int idx = 0;
      for (const ojson& tc : msg["tool_calls"]) {
        std::string id;
        if (tc.contains("id") && tc["id"].is_string()) id = tc["id"].get<std::string>();
        if (id.empty() && tc.contains("function") && tc["function"].contains("id") &&
            tc["function"]["id"].is_string()) {
          id = tc["function"]["id"].get<std::string>();
        }
        if (!id.empty()) order[id] = idx;
        ++idx;
      }
    } else if (role == "user" && truthy(msg, "content_blocks")) {
      std::vector<ojson> tool_blocks;
      for (const ojson& b : msg["content_blocks"]) {
        if (b.value("type", "") == "tool_result") tool_blocks.push_back(b);
      }
      if (tool_blocks.size() > 1 && !order.empty()) {
        auto key = [&](const ojson& b) {
          std::string id = b.contains("tool_use_id") && b["tool_use_id"].is_string()
                               ? b["tool_use_id"].get<std::string>() : "";
          auto it = order.find(id);
          return it == order.end() ? 0 : it->second;
        };
        std::stable_sort(tool_blocks.begin(), tool_blocks.end(),
                         [&](const ojson& a, const ojson& b) { return key(a) < key(b); });
        size_t k = 0;
        for (ojson& b : msg["content_blocks"]) {
          if (b.value("type", "") == "tool_result") b = tool_blocks[k++];
        }
      }
    }
  }
}

std::vector<ojson> drop_thinking_messages(const std::vector<ojson>& messages) {
  const int last_user = find_last_user_index(messages);
  std::vector<ojson> result;
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    const std::string role = role_of(messages[i]);
    if (role == "user" || role == "system" || role == "tool" || role == "latest_reminder" ||
        role == "direct_search_results" || i >= last_user) {
      result.push_back(messages[i]);
    } else if (role == "assistant") {
      ojson m = messages[i];
      m.erase("reasoning_content");
      result.push_back(std::move(m));
    }
  }
  return result;
}

StatusOr<std::string> render_tools(const ojson& tools) {
  std::string schemas;
  bool first = true;
  for (const ojson& t : tools) {
    if (!t.contains("function")) return InvalidArgument("tools: each tool needs a \"function\" object");
    if (!first) schemas += "\n";
    first = false;
    schemas += python_json_dumps(t["function"]);
  }
  return tools_section(schemas);
}

// The tool definitions and response-format schema a system or developer message may carry.
Status append_tools_and_response_format(const ojson& msg, std::string& prompt) {
  if (truthy(msg, "tools")) {
    DI_ASSIGN_OR_RETURN(std::string t, render_tools(msg["tools"]));
    prompt += "\n\n" + t;
  }
  if (truthy(msg, "response_format")) {
    prompt += "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
              python_json_dumps(msg["response_format"]);
  }
  return OkStatus();
}

StatusOr<std::string> encode_arguments_to_dsml(const ojson& arguments_field) {
  ojson args;
  bool parsed = false;
  if (arguments_field.is_string()) {
    args = ojson::parse(arguments_field.get<std::string>(), nullptr, false);
    parsed = !args.is_discarded();
  }
  if (!parsed) {
    args = ojson::object();
    args["arguments"] = arguments_field;
  }
  if (!args.is_object()) return InvalidArgument("tool call arguments must be a JSON object");
  std::string out;
  bool first = true;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!first) out += "\n";
    first = false;
    const bool is_str = it.value().is_string();
    out += "<" + kDsml + "parameter name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") +
           "\">" + (is_str ? it.value().get<std::string>() : python_json_dumps(it.value())) + "</" +
           kDsml + "parameter>";
  }
  return out;
}

StatusOr<std::string> render_message(int index, const std::vector<ojson>& messages, bool thinking,
                                     bool drop_thinking, const std::optional<std::string>& effort) {
  std::string prompt;
  const ojson& msg = messages[index];
  const int last_user = find_last_user_index(messages);
  const std::string role = role_of(msg);

  if (index == 0 && thinking && effort && *effort == "max") prompt += kReasoningEffortMax;

  if (role == "system") {
    DI_ASSIGN_OR_RETURN(std::string content, text_or_empty(msg, "content"));
    prompt += content;
    DI_RETURN_IF_ERROR(append_tools_and_response_format(msg, prompt));
  } else if (role == "developer") {
    DI_ASSIGN_OR_RETURN(std::string content, text_or_empty(msg, "content"));
    if (content.empty()) return InvalidArgument("developer message " + std::to_string(index) + " has no content");
    prompt += kUser + content;
    DI_RETURN_IF_ERROR(append_tools_and_response_format(msg, prompt));
  } else if (role == "user") {
    prompt += kUser;
    if (truthy(msg, "content_blocks")) {
      bool first = true;
      for (const ojson& block : msg["content_blocks"]) {
        if (!first) prompt += "\n\n";
        first = false;
        const std::string type = block.value("type", "");
        if (type == "text") {
          const ojson text = block.contains("text") ? block["text"] : ojson("");
          if (!text.is_string() && !text.is_null()) {
            return InvalidArgument("user message " + std::to_string(index) + ": content must be a string");
          }
          prompt += text.is_null() ? "" : text.get<std::string>();
        } else if (type == "tool_result") {
          const ojson c = block.contains("content") ? block["content"] : ojson("");
          std::string tool_content;
          if (c.is_array()) {
            bool f2 = true;
            for (const ojson& b : c) {
              if (!f2) tool_content += "\n\n";
              f2 = false;
              if (b.value("type", "") == "text") {
                tool_content += b.contains("text") ? py_str(b["text"]) : "";
              } else {
                tool_content += "[Unsupported " + py_str(b.contains("type") ? b["type"] : ojson()) + "]";
              }
            }
          } else {
            tool_content = py_str(c);
          }
          prompt += "<tool_result>" + tool_content + "</tool_result>";
        } else {
          prompt += "[Unsupported " + py_str(block.contains("type") ? block["type"] : ojson()) + "]";
        }
      }
    } else {
      DI_ASSIGN_OR_RETURN(std::string content, text_or_empty(msg, "content"));
      prompt += content;
    }
  } else if (role == "latest_reminder") {
    prompt += kLatestReminder + py_str(msg.contains("content") ? msg["content"] : ojson());
  } else if (role == "assistant") {
    std::string tc_content;
    if (truthy(msg, "tool_calls")) {
      std::string calls;
      bool first = true;
      for (const ojson& tc : msg["tool_calls"]) {
        if (!tc.contains("function") || !tc["function"].contains("name")) {
          return InvalidArgument("assistant message " + std::to_string(index) +
                                 ": each tool call needs function.name and function.arguments");
        }
        const ojson& fn = tc["function"];
        DI_ASSIGN_OR_RETURN(std::string args,
                            encode_arguments_to_dsml(fn.contains("arguments") ? fn["arguments"] : ojson()));
        if (!first) calls += "\n";
        first = false;
        calls += "<" + kDsml + "invoke name=\"" + py_str(fn["name"]) + "\">\n" + args + "\n</" + kDsml + "invoke>";
      }
      tc_content = "\n\n<" + kDsml + "tool_calls>\n" + calls + "\n</" + kDsml + "tool_calls>";
    }
    DI_ASSIGN_OR_RETURN(std::string summary, text_or_empty(msg, "content"));
    DI_ASSIGN_OR_RETURN(std::string rc, text_or_empty(msg, "reasoning_content"));
    const bool prev_has_task = index >= 1 && messages[index - 1].contains("task") &&
                               !messages[index - 1]["task"].is_null();
    std::string thinking_part;
    if (thinking && !prev_has_task && (!drop_thinking || index > last_user)) {
      thinking_part = rc + kThinkEnd;
    }
    const bool wo_eos = truthy(msg, "wo_eos");
    prompt += thinking_part + summary + tc_content + (wo_eos ? "" : kEos);
  } else if (role == "tool") {
    return Internal("tool messages must have been merged into user messages");
  } else {
    return InvalidArgument("message " + std::to_string(index) + ": unknown role \"" + role + "\"");
  }

  if (index + 1 < static_cast<int>(messages.size())) {
    const std::string next = role_of(messages[index + 1]);
    if (next != "assistant" && next != "latest_reminder") return prompt;
  }
  if (msg.contains("task") && !msg["task"].is_null()) {
    const std::string task = msg["task"].is_string() ? msg["task"].get<std::string>() : "";
    auto it = task_tokens().find(task);
    if (it == task_tokens().end()) {
      return InvalidArgument("message " + std::to_string(index) + ": invalid task \"" + task +
                             "\" (valid: action, query, authority, domain, title, read_url)");
    }
    if (task != "action") {
      prompt += it->second;
    } else {
      prompt += kAssistant + (thinking ? kThinkStart : kThinkEnd) + it->second;
    }
  } else if (role == "user" || role == "developer") {
    prompt += kAssistant;
    if ((!drop_thinking && thinking) || (drop_thinking && thinking && index >= last_user)) {
      prompt += kThinkStart;
    } else {
      prompt += kThinkEnd;
    }
  }
  return prompt;
}

}  // namespace

StatusOr<std::string> apply_chat_template(const ojson& messages_in, const ChatOptions& options) {
  if (!messages_in.is_array()) return InvalidArgument("messages must be a JSON array");
  if (options.reasoning_effort && *options.reasoning_effort != "max" && *options.reasoning_effort != "high") {
    return InvalidArgument("reasoning_effort must be \"max\" or \"high\" (got \"" +
                           *options.reasoning_effort + "\")");
  }
  ojson messages = messages_in;
  if (options.tools.is_array() && !options.tools.empty()) {
    if (messages.empty()) return InvalidArgument("tools given but there are no messages");
    messages[0]["tools"] = options.tools;
  }
  const ojson context_in = options.context.is_null() ? ojson::array() : options.context;
  if (!context_in.is_array()) return InvalidArgument("context must be a JSON array");

  DI_ASSIGN_OR_RETURN(std::vector<ojson> ctx, merge_tool_messages(context_in));
  DI_ASSIGN_OR_RETURN(std::vector<ojson> msgs, merge_tool_messages(messages));
  std::vector<ojson> full = ctx;
  full.insert(full.end(), msgs.begin(), msgs.end());
  sort_tool_results_by_call_order(full);

  std::string prompt = (options.add_default_bos_token && context_in.empty()) ? kBos : "";
  bool drop = options.drop_thinking;
  for (const ojson& m : full) {
    if (truthy(m, "tools")) drop = false;
  }
  size_t num_to_render, context_len;
  if (options.thinking && drop) {
    std::vector<ojson> ctx_sorted(full.begin(), full.begin() + static_cast<long>(ctx.size()));
    full = drop_thinking_messages(full);
    num_to_render = full.size() - drop_thinking_messages(ctx_sorted).size();
    context_len = full.size() - num_to_render;
  } else {
    num_to_render = msgs.size();
    context_len = ctx.size();
  }
  for (size_t i = 0; i < num_to_render; ++i) {
    DI_ASSIGN_OR_RETURN(std::string part, render_message(static_cast<int>(i + context_len), full,
                                                         options.thinking, drop,
                                                         options.reasoning_effort));
    prompt += part;
  }
  return prompt;
}

StatusOr<std::string> apply_chat_template(const nlohmann::json& messages, const ChatOptions& options) {
  return apply_chat_template(ojson::parse(messages.dump()), options);
}

StatusOr<ChatOptions> chat_options_from_kwargs(const ojson& kw) {
  ChatOptions o;
  if (kw.is_null()) return o;
  if (!kw.is_object()) return InvalidArgument("chat options must be a JSON object");
  if (kw.contains("thinking_mode")) {
    const std::string m = kw["thinking_mode"].is_string() ? kw["thinking_mode"].get<std::string>() : "";
    if (m != "thinking" && m != "chat") {
      return InvalidArgument("thinking_mode must be \"thinking\" or \"chat\" (got " + kw["thinking_mode"].dump() + ")");
    }
    o.thinking = m == "thinking";
  }
  if (kw.contains("drop_thinking")) o.drop_thinking = kw["drop_thinking"].get<bool>();
  if (kw.contains("add_default_bos_token")) o.add_default_bos_token = kw["add_default_bos_token"].get<bool>();
  if (kw.contains("reasoning_effort") && !kw["reasoning_effort"].is_null()) {
    o.reasoning_effort = kw["reasoning_effort"].get<std::string>();
  }
  if (kw.contains("context") && !kw["context"].is_null()) o.context = kw["context"];
  if (kw.contains("tools") && !kw["tools"].is_null()) o.tools = kw["tools"];
  return o;
}

}  // namespace deepinfer::tokenizer
