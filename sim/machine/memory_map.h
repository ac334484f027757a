// The bus memory map of the GPNPU: one table, used by the platform to wire the
// bus and by kernels and the compiler to form DMA addresses. No other file names
// an address. DMA descriptors hold 32-bit bus addresses.
#pragma once
#include <cstdint>
#include <string_view>

namespace gpnpu::sim {

struct Region {
  std::string_view name;
  uint32_t base;
  uint64_t window;  // largest size the region may be configured to
};

inline constexpr Region kDdrRegion{"DDR", 0x00000000u, 0xC0000000ull};  // ddr_bytes <= 3 GiB
inline constexpr Region kOcmRegion{"OCM", 0xE0000000u, 0x10000000ull};  // ocm_bytes <= 256 MiB
inline constexpr Region kMemoryMap[] = {kDdrRegion, kOcmRegion};

inline constexpr bool in_region(const Region& r, uint64_t addr) { return addr >= r.base && addr - r.base < r.window; }

inline constexpr uint32_t ddr_addr(uint64_t offset) { return uint32_t(kDdrRegion.base + offset); }
inline constexpr uint32_t ocm_addr(uint64_t offset) { return uint32_t(kOcmRegion.base + offset); }

}  // namespace gpnpu::sim
