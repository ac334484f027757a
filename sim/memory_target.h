// A TLM-2.0 target memory with a timing port (sim/port_model.h): the DDR port
// (sparse pages allocated on first write; the ideal port or the DRAM model,
// sim/dram.h) and the OCM (dense, shared with the PE array's functional model).
// b_transport annotates timing and moves data unless the command is
// TLM_IGNORE_COMMAND (timing only: the initiator says the direction with an
// AccessDirection extension); transport_dbg moves data, no time.
#pragma once
#include <memory>
#include <string>
#include <systemc>
#include <tlm>
#include <tlm_utils/simple_target_socket.h>
#include <vector>

#include "sim/clock.h"
#include "sim/port_model.h"

namespace gpnpu::sim {

// Attached to a transaction by an initiator that wants to know when the target's port
// served it (the DMA engine, for its trace sinks); b_transport fills it in.
struct PortSpan : tlm::tlm_extension<PortSpan> {
  Cycles begin = 0, end = 0;  // the port's busy interval for this request (PortModel::last_*)
  tlm::tlm_extension_base* clone() const override { return new PortSpan(*this); }
  void copy_from(const tlm::tlm_extension_base& e) override { *this = static_cast<const PortSpan&>(e); }
};

// On a TLM_IGNORE_COMMAND (timing-only) transaction: whether it stands for a write.
struct AccessDirection : tlm::tlm_extension<AccessDirection> {
  bool write = false;
  tlm::tlm_extension_base* clone() const override { return new AccessDirection(*this); }
  void copy_from(const tlm::tlm_extension_base& e) override { write = static_cast<const AccessDirection&>(e).write; }
};

class MemoryTarget : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<MemoryTarget> socket;

  // sparse = true: the whole size reserved as one anonymous mapping that the kernel
  // backs on first touch (see write() for huge pages); a page of kPageBytes counts as
  // allocated from its first write, and reads of untouched pages return zeros.
  MemoryTarget(sc_core::sc_module_name name, bool sparse, const Clock& clock);
  // Sets the size and the port, and clears the contents.
  void configure(uint64_t size, std::unique_ptr<Port> port);

  uint64_t size() const { return size_; }
  void read(uint64_t addr, void* dst, uint64_t n) const;
  void write(uint64_t addr, const void* src, uint64_t n);
  // Dense storage (OCM only): the PE array's functional model reads it directly.
  uint8_t* dense() { return dense_.data(); }
  Port& port() { return *port_; }
  // A 64-bit digest of the contents (sparse: of the allocated pages and their offsets),
  // for bit-identity checks of whole runs (sim/platform.h).
  uint64_t digest() const;

  static constexpr uint64_t kPageBytes = 1ull << 16;

 private:
  void b_transport(tlm::tlm_generic_payload& trans, sc_core::sc_time& delay);
  unsigned int transport_dbg(tlm::tlm_generic_payload& trans);

  uint64_t size_ = 0;
  bool sparse_;
  const Clock& clock_;
  std::unique_ptr<Port> port_;
  std::vector<uint8_t> dense_;
  struct Unmap {  // the reservation as mmap returned it (mapped_ is its 2 MiB-aligned part)
    void* at;
    uint64_t bytes;
    void operator()(uint8_t*) const;
  };
  std::unique_ptr<uint8_t, Unmap> mapped_{nullptr, Unmap{nullptr, 0}};  // sparse: the storage
  std::vector<bool> written_;  // sparse: per page, whether it was written
  std::vector<bool> huge_;     // sparse: per 2 MiB, whether huge pages were asked for
  static constexpr uint64_t kHugeBytes = 1ull << 21, kHugeFill = 1ull << 16;
};

}  // namespace gpnpu::sim
