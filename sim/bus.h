// The interconnect: routes TLM transactions from the DMA engines to the target
// whose memory-map region (sim/machine/memory_map.h) holds the address, rebased to the
// target's own offsets. Unmapped addresses get TLM_ADDRESS_ERROR_RESPONSE.
#pragma once
#include <memory>
#include <systemc>
#include <tlm>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>
#include <vector>

#include "sim/machine/memory_map.h"

namespace gpnpu::sim {

class Bus : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<Bus> target;

  struct Route {
    Region region;
    uint64_t size;  // configured size, <= region.window
    std::unique_ptr<tlm_utils::simple_initiator_socket<Bus>> socket;
  };

  // One route (initiator socket) per region of the memory map.
  explicit Bus(sc_core::sc_module_name name) : sc_module(name), target("target") {
    target.register_b_transport(this, &Bus::b_transport);
    target.register_transport_dbg(this, &Bus::transport_dbg);
    for (const Region& r : kMemoryMap)
      routes_.push_back({r, 0, std::make_unique<tlm_utils::simple_initiator_socket<Bus>>(std::string(r.name).c_str())});
  }

  // The socket to bind to the target that serves region `r`.
  tlm_utils::simple_initiator_socket<Bus>& route(const Region& r) {
    for (Route& x : routes_)
      if (x.region.base == r.base) return *x.socket;
    throw std::logic_error("region not in the memory map");
  }

  void set_size(const Region& r, uint64_t size) {
    for (Route& x : routes_)
      if (x.region.base == r.base) x.size = size;
  }

  // The route holding [addr, addr + bytes), or nullptr.
  const Route* find(uint64_t addr, uint64_t bytes) const {
    for (const Route& r : routes_)
      if (addr >= r.region.base && addr + bytes <= r.region.base + r.size) return &r;
    return nullptr;
  }
  const std::vector<Route>& routes() const { return routes_; }

 private:
  void b_transport(tlm::tlm_generic_payload& trans, sc_core::sc_time& delay) {
    const Route* r = find(trans.get_address(), trans.get_data_length());
    if (!r) {
      trans.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
      return;
    }
    uint64_t addr = trans.get_address();
    trans.set_address(addr - r->region.base);
    (*r->socket)->b_transport(trans, delay);
    trans.set_address(addr);
  }
  unsigned int transport_dbg(tlm::tlm_generic_payload& trans) {
    const Route* r = find(trans.get_address(), trans.get_data_length());
    if (!r) return 0;
    uint64_t addr = trans.get_address();
    trans.set_address(addr - r->region.base);
    unsigned int n = (*r->socket)->transport_dbg(trans);
    trans.set_address(addr);
    return n;
  }

  std::vector<Route> routes_;
};

}  // namespace gpnpu::sim
