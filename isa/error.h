// gpnpu::Error: the one exception type for every user-facing error.
// Contract: what() is a complete, single-line message that says what went wrong,
// where (file:line:col, pc, address, tensor name, config key) and how to fix it.
// The CLI prints it after "error: " and exits non-zero; nothing else catches it.
#pragma once
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace gpnpu {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace gpnpu
