#include "sim/memory_target.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "isa/error.h"
#include "isa/state.h"

namespace gpnpu::sim {

MemoryTarget::MemoryTarget(sc_core::sc_module_name name, bool sparse, const Clock& clock)
    : sc_module(name), socket("socket"), sparse_(sparse), clock_(clock) {
  socket.register_b_transport(this, &MemoryTarget::b_transport);
  socket.register_transport_dbg(this, &MemoryTarget::transport_dbg);
}

void MemoryTarget::Unmap::operator()(uint8_t*) const { ::munmap(at, bytes); }

void MemoryTarget::configure(uint64_t size, std::unique_ptr<Port> port) {
  size_ = size;
  port_ = std::move(port);
  mapped_.reset();
  written_.clear();
  huge_.clear();
  dense_.clear();
  if (!sparse_) {
    dense_.assign(size_, 0);
    return;
  }
  // Fresh anonymous memory is zero: no page is cleared twice. Whole 2 MiB areas and one
  // more, so that the storage starts on a huge page.
  const uint64_t pages = (size_ + kPageBytes - 1) / kPageBytes, areas = (size_ + kHugeBytes - 1) / kHugeBytes,
                 bytes = (areas + 1) * kHugeBytes;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("{}: cannot reserve {} bytes of address space for the memory ({}): lower ddr_bytes", name(), bytes,
         std::strerror(errno));
  const uintptr_t base = (uintptr_t(p) + kHugeBytes - 1) & ~uintptr_t(kHugeBytes - 1);
  mapped_ = {reinterpret_cast<uint8_t*>(base), Unmap{p, bytes}};
  written_.assign(pages, false);
  huge_.assign(areas, false);
}

uint64_t MemoryTarget::digest() const {
  if (!sparse_) return isa::digest_bytes(dense_.data(), dense_.size(), 0);
  uint64_t h = 0;
  for (uint64_t i = 0; i < written_.size(); ++i)
    if (written_[i]) h = isa::digest_bytes(mapped_.get() + i * kPageBytes, kPageBytes, h ^ (i + 1) * 0x9e3779b97f4a7c15ull);
  return h;
}

void MemoryTarget::read(uint64_t addr, void* dst, uint64_t n) const {
  uint8_t* out = static_cast<uint8_t*>(dst);
  if (!sparse_) {
    std::memcpy(out, dense_.data() + addr, n);
    return;
  }
  while (n) {
    uint64_t idx = addr / kPageBytes, off = addr % kPageBytes, k = std::min(n, kPageBytes - off);
    if (written_[idx]) std::memcpy(out, mapped_.get() + addr, k);
    else std::memset(out, 0, k);  // untouched: not mapped in by reading it
    out += k; addr += k; n -= k;
  }
}

void MemoryTarget::write(uint64_t addr, const void* src, uint64_t n) {
  const uint8_t* in = static_cast<const uint8_t*>(src);
  if (!sparse_) {
    std::memcpy(dense_.data() + addr, in, n);
    return;
  }
  if (n == 0) return;
  // A write of 64 KiB or more (a weight tensor, a DMA piece of activations) asks for
  // huge pages in the 2 MiB areas it touches: 512 times fewer page faults when the
  // weights load, and at most 32 times its bytes backed. Small writes (a token's K and V
  // rows in every layer) keep 4 KiB pages, not 2 MiB each. Only a hint: without
  // transparent huge pages the kernel gives 4 KiB pages.
  if (n >= kHugeFill)
    for (uint64_t h = addr / kHugeBytes; h <= (addr + n - 1) / kHugeBytes; ++h)
      if (!huge_[h]) {
        huge_[h] = true;
        ::madvise(mapped_.get() + h * kHugeBytes, kHugeBytes, MADV_HUGEPAGE);
      }
  for (uint64_t i = addr / kPageBytes; i <= (addr + n - 1) / kPageBytes; ++i) written_[i] = true;
  std::memcpy(mapped_.get() + addr, in, n);
}

void MemoryTarget::b_transport(tlm::tlm_generic_payload& trans, sc_core::sc_time& delay) {
  uint64_t addr = trans.get_address(), n = trans.get_data_length();
  if (addr + n > size_) {
    trans.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  Cycles at = clock_.to_cycles(sc_core::sc_time_stamp() + delay);
  const AccessDirection* dir = trans.get_extension<AccessDirection>();
  Cycles done = port_->request(at, addr, n, dir ? dir->write : trans.is_write());
  if (PortSpan* span = trans.get_extension<PortSpan>()) {
    span->begin = port_->last_begin();
    span->end = port_->last_end();
  }
  delay = clock_.to_time(done) - sc_core::sc_time_stamp();
  if (trans.is_read()) read(addr, trans.get_data_ptr(), n);
  else if (trans.is_write()) write(addr, trans.get_data_ptr(), n);
  trans.set_response_status(tlm::TLM_OK_RESPONSE);
}

unsigned int MemoryTarget::transport_dbg(tlm::tlm_generic_payload& trans) {
  uint64_t addr = trans.get_address(), n = trans.get_data_length();
  if (addr >= size_) return 0;
  n = std::min(n, size_ - addr);
  if (trans.is_read()) read(addr, trans.get_data_ptr(), n);
  else if (trans.is_write()) write(addr, trans.get_data_ptr(), n);
  return unsigned(n);
}

}  // namespace gpnpu::sim
