// Minimal leveled logging to stderr. The level comes from DEEPINFER_LOG_LEVEL (via common/env)
// or set_log_level(). Thread-safe: one line is written atomically.
#pragma once

#include <string>

namespace deepinfer {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "debug|info|warning|warn|error|off"; nullopt-like false on an unknown name.
bool parse_log_level(const std::string& name, LogLevel* out);

void log_message(LogLevel level, const std::string& message);
inline void log_debug(const std::string& m) { log_message(LogLevel::kDebug, m); }
inline void log_info(const std::string& m) { log_message(LogLevel::kInfo, m); }
inline void log_warning(const std::string& m) { log_message(LogLevel::kWarning, m); }
inline void log_error(const std::string& m) { log_message(LogLevel::kError, m); }

}  // namespace deepinfer
