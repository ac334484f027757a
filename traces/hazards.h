// The hazard checker (--check-hazards): races between the array and the DMA
// engines, and reads of memory nothing wrote. It shadows every OCM byte with the
// write that last set it (the host, a DMA descriptor or an array instruction) and
// the DMA that reads it, and every LRM byte of every PE with a written bit.
//
// A DMA descriptor is "in flight" from its dma.start until the program waits for
// it (dma.wait on its channel, dma.waitall, or halt); its destination counts as
// written by it from the dma.start on. Reported, each with pc, instruction, cycle
// and innermost mark, once per (kind, pc) with a count:
//   read-during-dma     an array instruction reads OCM bytes an in-flight DMA writes
//                       (the message says whether the DMA was still running at that
//                       cycle, or done but never waited for)
//   write-during-dma    an array instruction writes OCM bytes an in-flight DMA reads
//                       or writes
//   dma-during-dma      a DMA reads or writes OCM bytes another in-flight DMA writes,
//                       or writes bytes another in-flight DMA reads
//   dma-overwrite       a DMA overwrites OCM data that a DMA or an array store wrote
//                       and nothing has read yet (no byte of that write was read)
//   never-written       an array instruction reads (for one PE) or a DMA reads (one
//                       contiguous run) OCM or LRM bytes none of which was ever
//                       written; partly written ranges (masked row tails) are not
//                       reported
// The host's own writes (loading inputs before the run) are invisible to the
// simulator: declare them with host_wrote_ocm / host_wrote_lrm. DDR is not checked
// (the host loads weights there). Memory: about 9 bytes per OCM byte plus one per
// LRM byte. Cost: nothing unless attached.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/dma.h"
#include "sim/sequencer.h"

namespace gpnpu::traces {

struct Hazard {
  std::string kind;     // read-during-dma, write-during-dma, dma-during-dma, dma-overwrite, never-written
  uint32_t pc = 0;
  uint64_t cycle = 0;   // first occurrence
  std::string mark;     // innermost open mark at the first occurrence ("" if none)
  uint64_t count = 0;   // occurrences at this pc
  std::string message;  // one line: where, what, how to fix
};

class HazardChecker {
 public:
  HazardChecker(const sim::Config& cfg, const isa::Program& program);

  void host_wrote_ocm(uint64_t offset, uint64_t bytes);
  void host_wrote_lrm(uint64_t offset, uint64_t bytes);  // in every PE

  void on_issue(const sim::IssueEvent& e);
  void on_dma(const sim::DmaEvent& e, sim::Cycles base);

  // Found so far, in order of first occurrence (messages are final after the run).
  std::vector<Hazard> hazards() const;
  // "no hazards" or one line per hazard.
  std::string report() const;

 private:
  struct Writer {
    enum Who : uint8_t { by_none, by_host, by_dma, by_array } who = by_none;
    uint32_t pc = 0;
    uint64_t cycle = 0;
    uint32_t dma = 0;       // index into dmas_ (who == dma)
    bool consumed = false;  // some byte of it was read
    bool reported = false;  // dma-overwrite already said for it
  };
  struct Dma {
    uint32_t channel, pc, writer;
    uint64_t cycle;
    uint64_t complete = UINT64_MAX;  // relative cycle, known once it completed
    bool synced = false;
    std::string insn;
  };
  struct Pending {  // a hazard whose message needs a DMA's completion cycle
    size_t hazard;
    uint32_t dma;
    std::string before, after;
  };

  void add(const std::string& kind, uint32_t pc, uint64_t cycle, std::string message, uint32_t dma = UINT32_MAX,
           std::string after = {});
  std::string where(uint32_t pc, uint64_t cycle) const;
  std::string dma_name(uint32_t d) const;
  bool in_flight(uint32_t writer) const;
  void array_read(uint32_t pc, uint64_t cycle, uint64_t off, uint64_t bytes, uint32_t pe);
  void array_write(uint32_t pc, uint64_t cycle, uint64_t off, uint64_t bytes, uint32_t writer);
  void dma_started(uint32_t pc, uint64_t cycle, uint32_t channel, const isa::DmaDescriptor& d);
  void sync(int channel);  // -1: all

  sim::Config cfg_;
  const isa::Program& program_;
  std::vector<std::string> disasm_;
  uint64_t ocm_bytes_;
  uint32_t npe_, lrm_bytes_;
  std::vector<uint32_t> ocm_writer_;  // per OCM byte: index into writers_ (0: never written)
  std::vector<uint32_t> ocm_reader_;  // per OCM byte: 1 + index into dmas_ of the last DMA reading it
  std::vector<uint8_t> lrm_written_;  // per PE byte
  std::vector<Writer> writers_;
  std::vector<Dma> dmas_;
  std::vector<std::deque<uint32_t>> channel_q_;  // per channel: dmas not yet completed
  std::vector<uint32_t> marks_;
  std::vector<Hazard> hazards_;
  std::vector<Pending> pending_;
  std::map<std::pair<std::string, uint32_t>, size_t> seen_;  // (kind, pc) -> index into hazards_
  std::vector<std::vector<uint32_t>> unsynced_;              // per channel: dmas not yet waited for
  bool said_read_ = false, said_write_ = false, said_never_ = false;  // per instruction
};

}  // namespace gpnpu::traces
