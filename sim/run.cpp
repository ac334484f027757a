#include "sim/run.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "isa/error.h"
#include "sim/platform.h"

namespace gpnpu::sim {

Stats run_program(const isa::Program& program, const Config& cfg, bool timing_only) {
  Platform& p = Platform::get();
  p.configure(cfg, timing_only);
  return p.run(program);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary);
    if (!o) fail("cannot write '{}': {}", path, std::strerror(errno));
    o << text;
    if (!o.flush()) fail("cannot write '{}': {}", path, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot write '{}': {}", path, std::strerror(errno));
}

}  // namespace gpnpu::sim
