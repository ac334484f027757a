// A temporary directory for one test (removed with the object); `d / "file"` is a path in it.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace gpnpu::model::test {

struct TempDir {
  std::filesystem::path p;
  explicit TempDir(const std::string& name) {
    p = std::filesystem::temp_directory_path() / ("gpnpu_model_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
  std::string operator/(const std::string& f) const { return (p / f).string(); }
};

}  // namespace gpnpu::model::test
