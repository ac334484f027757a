// `gpnpu describe ARGS` through the shell, for the describe tests: exit status and
// stdout + stderr.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>

namespace gpnpu::model::test {

inline std::pair<int, std::string> run_describe(const std::string& args) {
  const std::string cmd = std::string(GPNPU_BINARY) + " describe " + args + " 2>&1";
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return {-1, out};
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), f)) out.append(buf.data(), n);
  const int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace gpnpu::model::test
