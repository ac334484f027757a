#include "sim/run.h"

#include "isa/atomic_file.h"
#include "sim/platform.h"

namespace gpnpu::sim {

Stats run_program(const isa::Program& program, const Config& cfg, bool timing_only) {
  Platform& p = Platform::get();
  p.configure(cfg, timing_only);
  return p.run(program);
}

void write_file_atomic(const std::string& path, const std::string& text) { gpnpu::write_file_atomic(path, text); }

}  // namespace gpnpu::sim
