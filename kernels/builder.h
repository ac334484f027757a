// The kernel builder: a small API to emit GPNPU programs from C++. Every emit is
// checked against the instruction table (isa/isa_table.def): operand kinds and
// ranges, so a kernel emitter fails at build time of the program, with the
// mnemonic and the operand, never at run time.
//
//   Builder b;
//   b.op("li", {X{1}, 64});
//   auto end = b.label();
//   b.op("loop", {X{1}, end});
//   b.op("vmac.f16", {V{0}, V{1}, V{2}});
//   b.bind(end);
//   b.op("halt");
//   isa::Program p = b.finish();
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "isa/program.h"

namespace gpnpu::kernels {

struct X { uint8_t n; };
struct V { uint8_t n; };
struct P { uint8_t n; };
struct Chan { uint8_t n; };
struct Dir { uint8_t n; };  // 0 n, 1 e, 2 s, 3 w
struct Label { uint32_t id; };
struct Name { std::string text; };
struct Mem { X base; int64_t offset = 0; };
struct F32 { float v; };

using Operand = std::variant<X, V, P, Chan, Dir, int64_t, F32, Label, Name, Mem>;

class Builder {
 public:
  Builder() = default;

  // Emits one instruction; `pred` applies to array rows (p0 = every PE).
  void op(std::string_view mnemonic, std::initializer_list<Operand> ops = {}, P pred = P{0});

  Label label();
  void bind(Label l);
  uint32_t pc() const { return uint32_t(prog_.words.size()); }

  // Conveniences built on op().
  void li(X rd, int64_t value) { op("li", {rd, value}); }
  // A hardware loop running `body` `count` times (count in a register).
  void loop(X count, const std::function<void()>& body);
  // pa = the PEs whose array column is h mod H (pset.cmod; clobbers xh and xH).
  void pset_cols_mod(P pa, uint32_t h, uint32_t H, X xh, X xH);
  // A stats region around `body`.
  void mark(const std::string& name, const std::function<void()>& body);
  // Writes a DMA descriptor (9 words) into scalar memory at `smem` (uses x31).
  void descriptor(uint32_t smem, uint32_t src, uint32_t dst, uint32_t row_bytes, uint32_t rows = 1,
                  uint32_t src_stride = 0, uint32_t dst_stride = 0, uint32_t planes = 1,
                  uint32_t src_plane_stride = 0, uint32_t dst_plane_stride = 0);

  // The words from `begin` to the end, for a pass that reorders them in place
  // (kernels/schedule.h): no label may be used or bound inside them.
  std::span<uint64_t> words_from(uint32_t begin);

  // Resolves labels and returns the program (the builder is empty afterwards).
  isa::Program finish();

 private:
  struct Fixup {
    uint32_t pc;
    uint32_t label;
  };
  isa::Program prog_;
  std::vector<int64_t> labels_;  // pc of each label, -1 until bound
  std::vector<Fixup> fixups_;     // in emission order: their pcs never decrease
  std::vector<int64_t> bound_;    // the pcs labels were bound at, in binding (pc) order
};

}  // namespace gpnpu::kernels
