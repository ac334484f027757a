#include "sim/memory_target.h"

#include <cstring>

#include "isa/state.h"

namespace gpnpu::sim {

MemoryTarget::MemoryTarget(sc_core::sc_module_name name, bool sparse, const Clock& clock)
    : sc_module(name), socket("socket"), sparse_(sparse), clock_(clock) {
  socket.register_b_transport(this, &MemoryTarget::b_transport);
  socket.register_transport_dbg(this, &MemoryTarget::transport_dbg);
}

void MemoryTarget::configure(uint64_t size, std::unique_ptr<Port> port) {
  size_ = size;
  port_ = std::move(port);
  pages_.clear();
  dense_.clear();
  if (sparse_) pages_.resize((size_ + kPageBytes - 1) / kPageBytes);
  else dense_.assign(size_, 0);
}

uint8_t* MemoryTarget::page(uint64_t index) {
  auto& p = pages_[index];
  if (!p) {
    p = std::make_unique<uint8_t[]>(kPageBytes);
    std::memset(p.get(), 0, kPageBytes);
  }
  return p.get();
}

uint64_t MemoryTarget::pages_touched() const {
  uint64_t n = 0;
  for (const auto& p : pages_) n += p != nullptr;
  return n;
}

uint64_t MemoryTarget::digest() const {
  if (!sparse_) return isa::digest_bytes(dense_.data(), dense_.size(), 0);
  uint64_t h = 0;
  for (uint64_t i = 0; i < pages_.size(); ++i)
    if (pages_[i]) h = isa::digest_bytes(pages_[i].get(), kPageBytes, h ^ (i + 1) * 0x9e3779b97f4a7c15ull);
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
    if (pages_[idx]) std::memcpy(out, pages_[idx].get() + off, k);
    else std::memset(out, 0, k);
    out += k; addr += k; n -= k;
  }
}

void MemoryTarget::write(uint64_t addr, const void* src, uint64_t n) {
  const uint8_t* in = static_cast<const uint8_t*>(src);
  if (!sparse_) {
    std::memcpy(dense_.data() + addr, in, n);
    return;
  }
  while (n) {
    uint64_t idx = addr / kPageBytes, off = addr % kPageBytes, k = std::min(n, kPageBytes - off);
    std::memcpy(page(idx) + off, in, k);
    in += k; addr += k; n -= k;
  }
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
