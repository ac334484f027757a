// Helpers for the bad-input tests of tests/errors (docs/errors.md's catalogue):
// run the gpnpu CLI (GPNPU_BINARY) through bash, capture exit code, stdout and
// stderr, and check that an error is "clean": exit code 1, stderr exactly one
// line "error: ...", nothing from HDF5 or a sanitizer.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

namespace gpnpu::errors_test {

namespace fs = std::filesystem;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
inline std::string source_path(const std::string& rel) { return std::string(GPNPU_SOURCE_DIR) + "/" + rel; }

// A fresh, empty scratch directory per test and process.
inline std::string scratch_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("gpnpu_errors_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// Files in `dir` (names only, sorted).
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct CliResult {
  int exit_code;
  std::string out, err;
};

// Runs `prefix gpnpu args` under bash (args as written, shell quoting applies).
// `prefix` runs first in the same shell, e.g. "ulimit -f 1;".
inline CliResult run_cli(const std::string& args, const std::string& prefix = "") {
  static int counter = 0;
  std::string dir = (fs::temp_directory_path() / ("gpnpu_errors_cli_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  std::string n = std::to_string(counter++);
  std::string out = dir + "/out" + n, err = dir + "/err" + n, script = dir + "/cmd" + n + ".sh";
  write_file(script, prefix + " exec " + std::string(GPNPU_BINARY) + " " + args + " >" + out + " 2>" + err + "\n");
  int status = std::system(("bash " + script).c_str());
  CliResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
  return r;
}

// Exit code 1, one stderr line starting "error: " holding every `want`.
inline void expect_clean_error(const CliResult& r, std::initializer_list<std::string> want) {
  EXPECT_EQ(r.exit_code, 1) << "stderr: " << r.err;
  EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_EQ(r.err.find("HDF5-DIAG"), std::string::npos) << "HDF5 error stack: " << r.err;
  EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << r.err;
  for (const std::string& w : want) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

}  // namespace gpnpu::errors_test
