// Helpers shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp).
// Contract: the readers under test take a path, so each target writes its input
// to one scratch file per process (under $TMPDIR, removed at exit) and hands the
// path on. A gpnpu::Error is the expected answer to bad input; anything else that
// escapes (another exception, a crash, a sanitizer report) is a bug, and so is a
// broken round-trip property, reported with check().
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace gpnpu::fuzz {

// A scratch file named after the target and the pid; removed at exit. Static, so
// each target (one per translation unit, also when linked into fuzz_replay) has its own.
[[maybe_unused]] static const std::string& scratch_path(const char* target, const char* suffix = "") {
  static std::string path;
  if (path.empty()) {
    path = (std::filesystem::temp_directory_path() /
            (std::string("gpnpu_fuzz_") + target + "_" + std::to_string(::getpid()) + suffix))
               .string();
    std::atexit([] { std::remove(path.c_str()); });
  }
  return path;
}

[[maybe_unused]] static void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  o.write(bytes.data(), std::streamsize(bytes.size()));
  if (!o.flush()) {
    std::fprintf(stderr, "fuzz: cannot write scratch file %s\n", path.c_str());
    std::abort();
  }
}

// A property that must hold for every input: abort (libFuzzer saves the input) if not.
[[maybe_unused]] static void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace gpnpu::fuzz
