#include "kernels/builder.h"

#include <bit>

#include "isa/error.h"

namespace gpnpu::kernels {

namespace {
const char* kind_text(char k) {
  switch (k) {
    case 'X': return "a scalar register X{}";
    case 'V': return "a vector register V{}";
    case 'P': return "a predicate register P{}";
    case 'C': return "a DMA channel Chan{}";
    case 'D': return "a direction Dir{}";
    case 'N': return "a small integer 0..31";
    case 'I': return "an integer immediate";
    case 'F': return "an F32{} immediate";
    case 'L': return "a Label";
    case 'S': return "a Name{}";
    default: return "a memory operand Mem{}";
  }
}
}  // namespace

void Builder::op(std::string_view mnemonic, std::initializer_list<Operand> ops, P pred) {
  const isa::OpInfo* info = isa::find_mnemonic(mnemonic);
  if (!info) fail("kernel builder: unknown instruction '{}'", mnemonic);
  if (ops.size() != info->nops)
    fail("kernel builder: '{}' takes {} operands ({}), got {}", mnemonic, info->nops, info->operands, ops.size());
  if (pred.n && !info->predicated) fail("kernel builder: '{}' takes no predicate", mnemonic);
  if (pred.n > 7) fail("kernel builder: predicate p{} does not exist", pred.n);
  isa::Fields f;
  f.opcode = info->opcode;
  f.p = pred.n;
  auto set = [&](char field, int v) {
    switch (field) {
      case 'a': f.a = uint8_t(v); break;
      case 'b': f.b = uint8_t(v); break;
      case 'c': f.c = uint8_t(v); break;
      default: f.d = uint8_t(v); break;
    }
  };
  int k = 0;
  for (const Operand& o : ops) {
    const isa::OperandSpec& spec = info->ops[k];
    auto bad = [&]() {
      fail("kernel builder: operand {} of '{}' must be {}", k + 1, mnemonic, kind_text(spec.kind));
    };
    auto reg = [&](int n, int count) {
      if (n >= count) fail("kernel builder: operand {} of '{}': register {} out of range", k + 1, mnemonic, n);
      set(spec.field, n);
    };
    auto imm = [&](int64_t v) {
      if (v < INT32_MIN || v > int64_t(UINT32_MAX))
        fail("kernel builder: operand {} of '{}': {} does not fit in 32 bits", k + 1, mnemonic, v);
      f.imm = int32_t(uint32_t(v));
    };
    switch (spec.kind) {
      case 'X': if (auto* x = std::get_if<X>(&o)) reg(x->n, 32); else bad(); break;
      case 'V': if (auto* v = std::get_if<V>(&o)) reg(v->n, 32); else bad(); break;
      case 'P': if (auto* p = std::get_if<P>(&o)) reg(p->n, 8); else bad(); break;
      case 'C': if (auto* c = std::get_if<Chan>(&o)) reg(c->n, 32); else bad(); break;
      case 'D': if (auto* d = std::get_if<Dir>(&o)) reg(d->n, 4); else bad(); break;
      case 'N': if (auto* n = std::get_if<int64_t>(&o)) { if (*n < 0 || *n > 31) bad(); set(spec.field, int(*n)); } else bad(); break;
      case 'I': if (auto* i = std::get_if<int64_t>(&o)) imm(*i); else bad(); break;
      case 'F': if (auto* x = std::get_if<F32>(&o)) f.imm = int32_t(std::bit_cast<uint32_t>(x->v)); else bad(); break;
      case 'L':
        if (auto* l = std::get_if<Label>(&o)) fixups_.push_back({pc(), l->id});
        else bad();
        break;
      case 'S': if (auto* s = std::get_if<Name>(&o)) f.imm = int32_t(prog_.intern(s->text)); else bad(); break;
      case 'M':
        if (auto* m = std::get_if<Mem>(&o)) { reg(m->base.n, 32); imm(m->offset); } else bad();
        break;
    }
    ++k;
  }
  prog_.words.push_back(isa::pack(f));
}

Label Builder::label() {
  labels_.push_back(-1);
  return Label{uint32_t(labels_.size() - 1)};
}

void Builder::bind(Label l) {
  if (labels_.at(l.id) >= 0) fail("kernel builder: label {} bound twice", l.id);
  labels_[l.id] = pc();
  bound_.push_back(pc());
}

void Builder::loop(X count, const std::function<void()>& body) {
  Label end = label();
  op("loop", {count, end});
  uint32_t start = pc();
  body();
  if (pc() == start) fail("kernel builder: empty hardware loop body");
  bind(end);
}

void Builder::mark(const std::string& name, const std::function<void()>& body) {
  op("mark.begin", {Name{name}});
  body();
  op("mark.end", {Name{name}});
}

void Builder::pset_cols_mod(P pa, uint32_t h, uint32_t H, X xh, X xH) {
  li(xh, h);
  li(xH, H);
  op("pset.cmod", {pa, xh, xH});
}

void Builder::descriptor(uint32_t smem, uint32_t src, uint32_t dst, uint32_t row_bytes, uint32_t rows,
                         uint32_t src_stride, uint32_t dst_stride, uint32_t planes, uint32_t src_plane_stride,
                         uint32_t dst_plane_stride) {
  const uint32_t w[] = {src, dst, row_bytes, rows, src_stride, dst_stride, planes, src_plane_stride, dst_plane_stride};
  for (int k = 0; k < 9; ++k) {
    li(X{31}, w[k]);
    op("sw", {X{31}, Mem{X{0}, int64_t(smem + 4 * k)}});
  }
}

std::span<uint64_t> Builder::words_from(uint32_t begin) {
  // (fixups and bindings come in pc order: the latest of each is the one to check)
  if (!fixups_.empty() && fixups_.back().pc >= begin)
    fail("kernel builder: a label is used at pc {} inside a region to reorder (from pc {})", fixups_.back().pc, begin);
  auto at = bound_.rbegin();
  while (at != bound_.rend() && *at >= int64_t(pc())) ++at;
  if (at != bound_.rend() && *at > int64_t(begin))
    fail("kernel builder: a label is bound at pc {} inside a region to reorder", *at);
  return std::span<uint64_t>(prog_.words).subspan(begin);
}

isa::Program Builder::finish() {
  for (const Fixup& fx : fixups_) {
    int64_t target = labels_.at(fx.label);
    if (target < 0) fail("kernel builder: label {} used at pc {} but never bound", fx.label, fx.pc);
    isa::Fields f = isa::unpack(prog_.words[fx.pc]);
    f.imm = int32_t(target - int64_t(fx.pc));
    prog_.words[fx.pc] = isa::pack(f);
  }
  isa::Program out = std::move(prog_);
  prog_ = {};
  labels_.clear();
  fixups_.clear();
  bound_.clear();
  return out;
}

}  // namespace gpnpu::kernels
