// Helpers shared by the ISA tests: a small architectural state, running one
// instruction from its assembly text or from raw fields, and matching error text.
// Contract: nothing here computes an expected value; the tests write those by hand.
#pragma once
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "isa/error.h"
#include "isa/isa.h"
#include "isa/program.h"
#include "isa/semantics.h"
#include "isa/state.h"

namespace gpnpu::isa::test {

inline uint32_t fbits(float f) { return std::bit_cast<uint32_t>(f); }
inline float bitsf(uint32_t b) { return std::bit_cast<float>(b); }

// Runs `fn` and returns the gpnpu::Error message it throws ("" if it does not throw).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const gpnpu::Error& e) {
    return e.what();
  }
  return "";
}

// A small machine: `rows` x `cols` PEs, 256-byte LRM and scalar memory, 1 KiB OCM.
struct Machine {
  std::vector<uint8_t> ocm;
  ArchState s;
  explicit Machine(uint32_t rows = 2, uint32_t cols = 3, uint32_t ocm_bytes = 1024)
      : ocm(ocm_bytes, 0), s(ArrayShape{rows, cols}, 256, 256, std::span<uint8_t>(ocm)) {}

  uint32_t& V(int r, uint32_t pe, int lane) { return s.vreg(r)[size_t(pe) * kLanes + lane]; }
  float VF(int r, uint32_t pe, int lane) { return bitsf(V(r, pe, lane)); }
  void fill(int r, const std::function<uint32_t(uint32_t pe, int lane)>& f) {
    for (uint32_t e = 0; e < s.npe; ++e)
      for (int l = 0; l < kLanes; ++l) V(r, e, l) = f(e, l);
  }
  void fillf(int r, const std::function<float(uint32_t pe, int lane)>& f) {
    fill(r, [&](uint32_t e, int l) { return fbits(f(e, l)); });
  }
  // Sets predicate p to exactly the listed PEs (without running an instruction).
  void set_pred(int p, std::initializer_list<uint32_t> pes) {
    uint8_t* pr = &s.pred[size_t(p) * s.npe];
    std::fill(pr, pr + s.npe, 0);
    for (uint32_t e : pes) pr[e] = 1;
    s.summarise_predicate(p);
  }
  void put32(std::vector<uint8_t>& mem, size_t addr, uint32_t v) { std::memcpy(&mem[addr], &v, 4); }
  uint32_t get32(const std::vector<uint8_t>& mem, size_t addr) {
    uint32_t v;
    std::memcpy(&v, &mem[addr], 4);
    return v;
  }
};

// Decodes one word at `pc` and executes it the way the sequencer does.
inline Insn exec_word(ArchState& s, uint64_t word, uint32_t pc = 0) {
  Insn in = decode(word, pc);
  s.pc = pc;
  s.next_pc = pc + 1;
  s.effect = Effect::none;
  in.exec(s, in);
  return in;
}

// Assembles one line (labels not allowed) and executes it at `pc`. `prog` receives
// the assembled program so that a test can look up interned mark names.
inline Insn exec_text(ArchState& s, std::string_view line, uint32_t pc = 0, Program* prog = nullptr) {
  Program p = assemble(line, "<golden>");
  EXPECT_EQ(p.words.size(), 1u) << line;
  Insn in = exec_word(s, p.words.at(0), pc);
  if (prog) *prog = std::move(p);
  return in;
}

// Word of `mnemonic` with the given raw fields.
inline uint64_t word_of(std::string_view mnemonic, Fields f) {
  const OpInfo* info = find_mnemonic(mnemonic);
  EXPECT_NE(info, nullptr) << mnemonic;
  f.opcode = info ? info->opcode : 0;
  return pack(f);
}

}  // namespace gpnpu::isa::test
