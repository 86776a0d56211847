// DI_CHECK: programming errors (broken invariants), never user input. Aborts with file:line and
// the failed condition; an optional streamed message adds context:
//   DI_CHECK(n <= cap) << "n=" << n << " cap=" << cap;
// User input errors are Status values (common/status.h), not checks.
#pragma once

#include <sstream>

namespace deepinfer::detail {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  CheckFailure(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Lets `DI_CHECK(c) << x;` compile to nothing when c holds.
struct CheckVoidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace deepinfer::detail

#define DI_CHECK(cond)          \
  (cond) ? (void)0              \
         : ::deepinfer::detail::CheckVoidify() & \
               ::deepinfer::detail::CheckFailure(__FILE__, __LINE__, #cond)

#define DI_CHECK_EQ(a, b) DI_CHECK((a) == (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define DI_CHECK_LT(a, b) DI_CHECK((a) < (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define DI_CHECK_LE(a, b) DI_CHECK((a) <= (b)) << #a "=" << (a) << " " #b "=" << (b) << " "

#ifdef NDEBUG
#define DI_DCHECK(cond) \
  while (false) DI_CHECK(cond)
#else
#define DI_DCHECK(cond) DI_CHECK(cond)
#endif
