#include "traces/insn_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "isa/error.h"
#include "isa/io_rules.h"
#include "sim/run.h"

namespace gpnpu::traces {

namespace {

// A trace is read whole (binary) or line by line (text): any size a disk holds, but a
// regular file (isa/io_rules.h).
constexpr uint64_t kMaxTraceBytes = uint64_t(1) << 40;

constexpr char kMagic[8] = {'G', 'P', 'N', 'P', 'U', 'T', 'R', 'C'};
constexpr uint32_t kVersion = 1;

uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x100000001b3ull;
  return h ^ (h >> 29);
}
uint64_t hash_words(const uint32_t* w, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = mix(h, w[i]);
  return h;
}
uint64_t hash_bytes(uint64_t h, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) h = mix(h, b[i]);
  return h;
}

uint8_t field(const isa::Insn& in, char f) {
  switch (f) {
    case 'a': return in.a;
    case 'b': return in.b;
    case 'c': return in.c;
    default: return in.d;
  }
}

// ---- varint coding of the binary form ----
void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(char(v | 0x80));
    v >>= 7;
  }
  s.push_back(char(v));
}
void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }

struct Reader {
  const std::string& data;
  size_t pos = 0;
  const std::string& path;
  void need(size_t n) {
    if (pos + n > data.size())
      fail("{}: binary trace is truncated at byte {} (needed {} more); was the run interrupted?", path, pos, n);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      uint8_t b = uint8_t(data[pos++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: bad varint at byte {}", path, pos);
  }
  uint32_t u32() {
    need(4);
    uint32_t v;
    std::memcpy(&v, &data[pos], 4);
    pos += 4;
    return v;
  }
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, &data[pos], 8);
    pos += 8;
    return v;
  }
  uint8_t u8() {
    need(1);
    return uint8_t(data[pos++]);
  }
  std::string str(size_t n) {
    need(n);
    std::string s = data.substr(pos, n);
    pos += n;
    return s;
  }
};

void encode(std::string& s, const TraceRecord& r, uint64_t last_cycle) {
  put_varint(s, r.cycle - last_cycle);
  put_varint(s, r.pc);
  put_varint(s, r.writes.size());
  for (const TraceWrite& w : r.writes) {
    s.push_back(char(w.kind));
    switch (w.kind) {
      case TraceWrite::xreg:
      case TraceWrite::preg:
        s.push_back(char(w.reg));
        put_varint(s, w.value);
        break;
      case TraceWrite::vreg:
        s.push_back(char(w.reg));
        put_varint(s, w.pe);
        for (uint32_t l : w.lanes) put_u32(s, l);
        put_u64(s, w.hash);
        break;
      case TraceWrite::smem:
        put_varint(s, w.addr);
        put_varint(s, w.value);
        break;
      case TraceWrite::lrm:
      case TraceWrite::ocm:
        put_varint(s, w.addr);
        put_varint(s, w.bytes);
        put_varint(s, w.count);
        put_varint(s, w.stride);
        put_u64(s, w.hash);
        break;
      case TraceWrite::dma:
        s.push_back(char(w.reg));
        put_varint(s, w.addr);
        put_varint(s, w.addr2);
        put_varint(s, w.bytes);
        break;
      case TraceWrite::mark_begin:
      case TraceWrite::mark_end: put_varint(s, w.value); break;
    }
  }
}

TraceRecord decode(Reader& rd, uint64_t last_cycle) {
  TraceRecord r;
  r.cycle = last_cycle + rd.varint();
  r.pc = uint32_t(rd.varint());
  uint64_t n = rd.varint();
  for (uint64_t k = 0; k < n; ++k) {
    TraceWrite w;
    uint8_t kind = rd.u8();
    if (kind > TraceWrite::mark_end) fail("{}: unknown write kind {} at byte {}", rd.path, kind, rd.pos - 1);
    w.kind = TraceWrite::Kind(kind);
    switch (w.kind) {
      case TraceWrite::xreg:
      case TraceWrite::preg:
        w.reg = rd.u8();
        w.value = uint32_t(rd.varint());
        break;
      case TraceWrite::vreg:
        w.reg = rd.u8();
        w.pe = uint32_t(rd.varint());
        for (uint32_t& l : w.lanes) l = rd.u32();
        w.hash = rd.u64();
        break;
      case TraceWrite::smem:
        w.addr = uint32_t(rd.varint());
        w.value = uint32_t(rd.varint());
        break;
      case TraceWrite::lrm:
      case TraceWrite::ocm:
        w.addr = uint32_t(rd.varint());
        w.bytes = uint32_t(rd.varint());
        w.count = uint32_t(rd.varint());
        w.stride = uint32_t(rd.varint());
        w.hash = rd.u64();
        break;
      case TraceWrite::dma:
        w.reg = rd.u8();
        w.addr = uint32_t(rd.varint());
        w.addr2 = uint32_t(rd.varint());
        w.bytes = uint32_t(rd.varint());
        break;
      case TraceWrite::mark_begin:
      case TraceWrite::mark_end: w.value = uint32_t(rd.varint()); break;
    }
    r.writes.push_back(w);
  }
  return r;
}

std::string read_all(const std::string& path) { return io::read_input(path, "trace", kMaxTraceBytes); }

struct BinaryTrace {
  std::string header;
  isa::Program program;
  std::vector<TraceRecord> records;
};

BinaryTrace read_binary(const std::string& path) {
  std::string data = read_all(path);
  Reader rd{data, 0, path};
  if (data.size() < 8 || std::memcmp(data.data(), kMagic, 8) != 0)
    fail("{}: not a binary gpnpu trace (no GPNPUTRC magic)", path);
  rd.pos = 8;
  uint32_t version = rd.u32();
  if (version != kVersion) fail("{}: binary trace version {} (this build reads {})", path, version, kVersion);
  BinaryTrace t;
  t.header = rd.str(rd.u32());
  uint32_t nwords = rd.u32();
  for (uint32_t i = 0; i < nwords; ++i) t.program.words.push_back(rd.u64());
  uint32_t nnames = rd.u32();
  for (uint32_t i = 0; i < nnames; ++i) t.program.names.push_back(rd.str(rd.u32()));
  uint64_t last = 0;
  while (rd.pos < data.size()) {
    t.records.push_back(decode(rd, last));
    last = t.records.back().cycle;
  }
  return t;
}

}  // namespace

bool is_binary_trace_path(const std::string& path) { return path.ends_with(".gtrc"); }

TraceFilter TraceFilter::parse(const std::string& spec) {
  TraceFilter f;
  auto number = [&](const std::string& key, const std::string& v) -> uint64_t {
    try {
      size_t used = 0;
      uint64_t n = std::stoull(v, &used, 0);
      if (used != v.size()) throw std::invalid_argument(v);
      return n;
    } catch (const std::exception&) {
      fail("--trace-filter: {}={} is not a number (decimal or 0x hex)", key, v);
    }
  };
  auto range = [&](const std::string& key, const std::string& v, uint64_t& lo, uint64_t& hi) {
    size_t colon = v.find(':');
    if (colon == std::string::npos) fail("--trace-filter: {}={} must be LO:HI (LO inclusive, HI exclusive; either may be empty)", key, v);
    std::string a = v.substr(0, colon), b = v.substr(colon + 1);
    if (!a.empty()) lo = number(key, a);
    if (!b.empty()) hi = number(key, b);
    if (lo >= hi) fail("--trace-filter: {}={} is an empty range", key, v);
  };
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() : comma + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) fail("--trace-filter: '{}' is not KEY=VALUE (keys: mark, pc, cycle, every, pe)", item);
    std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    if (key == "mark") {
      f.mark = v;
    } else if (key == "pc") {
      uint64_t lo = 0, hi = std::numeric_limits<uint32_t>::max();
      range(key, v, lo, hi);
      f.pc_lo = uint32_t(lo);
      f.pc_hi = uint32_t(std::min<uint64_t>(hi, std::numeric_limits<uint32_t>::max()));
    } else if (key == "cycle") {
      range(key, v, f.cycle_lo, f.cycle_hi);
    } else if (key == "every") {
      f.every = number(key, v);
      if (f.every == 0) fail("--trace-filter: every=0; use every=1 for every line");
    } else if (key == "pe") {
      const uint64_t pe = number(key, v);
      if (pe > std::numeric_limits<uint32_t>::max()) fail("--trace-filter: pe={} does not exist (too large)", v);
      f.pe = uint32_t(pe);
    } else {
      fail("--trace-filter: unknown key '{}' (keys: mark, pc, cycle, every, pe)", key);
    }
  }
  return f;
}

std::string format_writes(const std::vector<TraceWrite>& ws, const std::vector<std::string>& names) {
  std::string s;
  for (const TraceWrite& w : ws) {
    if (!s.empty()) s += "; ";
    switch (w.kind) {
      case TraceWrite::xreg: s += fmt::format("x{}=0x{:08x}", w.reg, w.value); break;
      case TraceWrite::preg: s += fmt::format("p{}={}pe", w.reg, w.value); break;
      case TraceWrite::vreg:
        s += fmt::format("v{}[pe{}]=", w.reg, w.pe);
        for (int l = 0; l < isa::kLanes; ++l) s += fmt::format("{}{:08x}", l ? " " : "", w.lanes[l]);
        s += fmt::format(" #{:016x}", w.hash);
        break;
      case TraceWrite::smem: s += fmt::format("smem[0x{:x}]=0x{:08x}", w.addr, w.value); break;
      case TraceWrite::lrm: s += fmt::format("lrm[0x{:x},+{})x{}pe #{:016x}", w.addr, w.bytes, w.count, w.hash); break;
      case TraceWrite::ocm:
        s += fmt::format("ocm[0x{:x},+{})x{}pe/{} #{:016x}", w.addr, w.bytes, w.count, w.stride, w.hash);
        break;
      case TraceWrite::dma: s += fmt::format("dma c{} 0x{:08x}->0x{:08x} {}B", w.reg, w.addr, w.addr2, w.bytes); break;
      case TraceWrite::mark_begin:
      case TraceWrite::mark_end:
        s += fmt::format("{} {}", w.kind == TraceWrite::mark_begin ? "mark.begin" : "mark.end",
                         w.value < names.size() ? names[w.value] : fmt::format("#{}", w.value));
        break;
    }
  }
  return s;
}

std::string format_line(uint64_t cycle, std::string_view unit, uint32_t pc, std::string_view insn,
                        std::string_view writes) {
  if (writes.empty()) return fmt::format("{:>10} {:<6} pc={:<5} {}", cycle, unit, pc, insn);
  return fmt::format("{:>10} {:<6} pc={:<5} {:<36} => {}", cycle, unit, pc, insn, writes);
}

std::vector<std::string> disassemble_all(const isa::Program& p) {
  std::vector<isa::Insn> insns = p.decode();
  isa::DisasmContext ctx;
  ctx.name_of = [&](uint32_t id) { return id < p.names.size() ? p.names[id] : std::string("?"); };
  std::vector<std::string> out;
  for (uint32_t pc = 0; pc < insns.size(); ++pc) out.push_back(isa::disassemble(insns[pc], pc, ctx));
  return out;
}

void InsnTracer::writes_of(const sim::IssueEvent& e, uint32_t pe, std::vector<TraceWrite>& out) {
  out.clear();
  const isa::Insn& in = *e.insn;
  const isa::OpInfo& op = *in.info;
  const isa::ArchState& s = *e.state;
  const size_t lanes = size_t(s.npe) * isa::kLanes;
  if (pe >= s.npe) pe = 0;
  bool writes_operand = false;
  for (int k = 0; k < op.nops; ++k) {
    const isa::OperandSpec& spec = op.ops[k];
    if (!spec.access) continue;
    writes_operand = true;
    uint8_t r = field(in, spec.field);
    TraceWrite w;
    w.reg = r;
    if (spec.kind == 'X') {
      if (r == 0) continue;
      w.kind = TraceWrite::xreg;
      w.value = s.x[r];
    } else if (spec.kind == 'V') {
      w.kind = TraceWrite::vreg;
      w.pe = pe;
      const uint32_t* v = &s.v[size_t(r) * lanes];
      std::copy_n(v + size_t(pe) * isa::kLanes, isa::kLanes, w.lanes.begin());
      w.hash = hash_words(v, lanes);
    } else if (spec.kind == 'P') {
      w.kind = TraceWrite::preg;
      w.value = s.pred_count[r];
    } else {
      continue;
    }
    out.push_back(w);
  }
  const isa::Unit u = op.unit;
  if (!writes_operand && (u == isa::Unit::smem || u == isa::Unit::lrm || u == isa::Unit::ocm_wr)) {
    TraceWrite w;
    uint32_t addr = s.x[in.b] + uint32_t(in.imm);
    w.addr = addr;
    if (u == isa::Unit::smem) {
      w.kind = TraceWrite::smem;
      w.value = s.x[in.c];
    } else {
      w.kind = u == isa::Unit::lrm ? TraceWrite::lrm : TraceWrite::ocm;
      w.bytes = op.mem_bytes;
      w.count = s.pred_count[in.p];
      w.stride = u == isa::Unit::ocm_wr ? s.x[in.c] : 0;
      uint64_t h = 0xcbf29ce484222325ull;
      const uint8_t* pr = s.predicate(in.p);
      for (uint32_t pe_i = 0; pe_i < s.npe; ++pe_i) {
        if (!pr[pe_i]) continue;
        if (u == isa::Unit::lrm) {
          if (uint64_t(addr) + w.bytes <= s.lrm_bytes)
            h = hash_bytes(h, s.lrm_of(pe_i) + addr, w.bytes);
        } else {
          uint64_t a = uint64_t(addr) + uint64_t(pe_i) * w.stride;
          if (a + w.bytes <= s.ocm.size()) h = hash_bytes(h, &s.ocm[a], w.bytes);
        }
      }
      w.hash = h;
    }
    out.push_back(w);
  }
  switch (s.effect) {
    case isa::Effect::dma_start: {
      TraceWrite w;
      w.kind = TraceWrite::dma;
      w.reg = uint8_t(s.effect_arg);
      w.addr = s.dma.src;
      w.addr2 = s.dma.dst;
      w.bytes = uint32_t(std::min<uint64_t>(s.dma.bytes(), UINT32_MAX));
      out.push_back(w);
      break;
    }
    case isa::Effect::mark_begin:
    case isa::Effect::mark_end: {
      TraceWrite w;
      w.kind = s.effect == isa::Effect::mark_begin ? TraceWrite::mark_begin : TraceWrite::mark_end;
      w.value = s.effect_arg;
      out.push_back(w);
      break;
    }
    default: break;
  }
}

InsnTracer::InsnTracer(const std::string& path, const isa::Program& program, const TraceFilter& filter,
                       const std::string& header)
    : path_(path),
      out_(path),
      binary_(is_binary_trace_path(path)),
      program_(program),
      filter_(filter),
      match_(filter, program) {
  disasm_ = disassemble_all(program);
  for (uint64_t w : program.words) units_.push_back(isa::unit_name(isa::decode(w, 0).info->unit));
  f_ = std::fopen(out_.temp().c_str(), "wb");
  if (!f_)
    fail("cannot write trace '{}': {} (check that the directory exists and is writable)", path, std::strerror(errno));
  if (binary_) {
    std::string h(kMagic, 8);
    put_u32(h, kVersion);
    put_u32(h, uint32_t(header.size()));
    h += header;
    put_u32(h, uint32_t(program.words.size()));
    for (uint64_t w : program.words) put_u64(h, w);
    put_u32(h, uint32_t(program.names.size()));
    for (const std::string& n : program.names) {
      put_u32(h, uint32_t(n.size()));
      h += n;
    }
    write(h);
  } else {
    std::string h;
    size_t pos = 0;
    while (pos < header.size()) {
      size_t nl = header.find('\n', pos);
      h += "# " + header.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos) + "\n";
      pos = nl == std::string::npos ? header.size() : nl + 1;
    }
    h += "#      cycle unit   pc       instruction                          => writes\n";
    write(h);
  }
}

void InsnTracer::write(const std::string& bytes) {
  // The first failure's errno is the reason reported at close(); later writes are
  // skipped (a full disk stays full).
  if (write_errno_) return;
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) write_errno_ = errno ? errno : EIO;
}

InsnTracer::~InsnTracer() {
  if (f_) std::fclose(f_);  // out_ removes the temporary
}

FilterMatch::FilterMatch(const TraceFilter& filter, const isa::Program& program) : f_(filter) {
  if (f_.mark.empty()) return;
  auto it = std::find(program.names.begin(), program.names.end(), f_.mark);
  if (it == program.names.end()) {
    std::string all;
    for (const std::string& n : program.names) all += (all.empty() ? "" : ", ") + n;
    fail("--trace-filter: mark \"{}\" is not in the program (its marks: {})", f_.mark, all.empty() ? "none" : all);
  }
  mark_id_ = uint32_t(it - program.names.begin());
}

bool FilterMatch::on_issue(const sim::IssueEvent& e) {
  const isa::ArchState& s = *e.state;
  if (s.effect == isa::Effect::mark_begin) marks_.push_back(s.effect_arg);
  bool pass = e.pc >= f_.pc_lo && e.pc < f_.pc_hi && e.cycle >= f_.cycle_lo && e.cycle < f_.cycle_hi;
  if (pass && mark_id_ != UINT32_MAX) pass = std::find(marks_.begin(), marks_.end(), mark_id_) != marks_.end();
  if (s.effect == isa::Effect::mark_end && !marks_.empty()) marks_.pop_back();
  return pass;
}

void InsnTracer::on_issue(const sim::IssueEvent& e) {
  if (!match_.on_issue(e)) return;
  if (passed_++ % filter_.every != 0) return;
  rec_.cycle = e.cycle;
  rec_.pc = e.pc;
  writes_of(e, filter_.pe, rec_.writes);
  emit(rec_);
}

void InsnTracer::emit(const TraceRecord& r) {
  buf_.clear();
  if (binary_) {
    encode(buf_, r, last_cycle_);
    last_cycle_ = r.cycle;
  } else {
    buf_ = format_line(r.cycle, r.pc < units_.size() ? units_[r.pc] : "?", r.pc,
                       r.pc < disasm_.size() ? disasm_[r.pc] : "?", format_writes(r.writes, program_.names));
    buf_ += '\n';
  }
  write(buf_);
  ++lines_;
}

void InsnTracer::close() {
  if (!f_) return;
  int err = write_errno_;
  if (!err && (std::fflush(f_) != 0 || std::ferror(f_))) err = errno ? errno : EIO;
  if (std::fclose(f_) != 0 && !err) err = errno ? errno : EIO;
  f_ = nullptr;
  if (err)
    fail("cannot write trace '{}': {} (disk full or file too large? a narrower --trace-filter or a .gtrc name "
         "writes less)", path_, std::strerror(err));
  out_.commit();
}

std::string trace_header(const std::string& path) {
  if (is_binary_trace_path(path)) return read_binary(path).header;
  io::check_input(path, "trace", kMaxTraceBytes);
  std::ifstream in(path);
  if (!in) fail("cannot read trace '{}': {}", path, std::strerror(errno));
  std::string line, h;
  while (std::getline(in, line) && line.starts_with("#")) h += line + "\n";
  return h;
}

std::vector<TraceLine> read_trace(const std::string& path) {
  std::vector<TraceLine> out;
  if (is_binary_trace_path(path)) {
    BinaryTrace t = read_binary(path);
    std::vector<isa::Insn> insns = t.program.decode();
    std::vector<std::string> dis = disassemble_all(t.program);
    for (const TraceRecord& r : t.records) {
      if (r.pc >= insns.size()) fail("{}: record at cycle {} has pc {} past the program's {} instructions", path, r.cycle, r.pc, insns.size());
      TraceLine l;
      l.cycle = r.cycle;
      l.pc = r.pc;
      l.unit = isa::unit_name(insns[r.pc].info->unit);
      l.insn = dis[r.pc];
      l.writes = format_writes(r.writes, t.program.names);
      l.text = format_line(l.cycle, l.unit, l.pc, l.insn, l.writes);
      out.push_back(std::move(l));
    }
    return out;
  }
  io::check_input(path, "trace", kMaxTraceBytes);
  std::ifstream in(path);
  if (!in) fail("cannot read trace '{}': {}", path, std::strerror(errno));
  std::string line;
  for (size_t no = 1; std::getline(in, line); ++no) {
    if (line.empty() || line[0] == '#') continue;
    TraceLine l;
    l.text = line;
    char unit[32] = {};
    unsigned long long cycle = 0;
    unsigned pc = 0;
    int used = 0;
    if (std::sscanf(line.c_str(), "%llu %31s pc=%u%n", &cycle, unit, &pc, &used) != 3)
      fail("{}:{}: not a trace line (want 'CYCLE UNIT pc=N INSN [=> WRITES]'): {}", path, no, line);
    l.cycle = cycle;
    l.pc = pc;
    l.unit = unit;
    std::string rest = line.substr(size_t(used));
    size_t arrow = rest.find(" => ");
    std::string insn = arrow == std::string::npos ? rest : rest.substr(0, arrow);
    if (arrow != std::string::npos) l.writes = rest.substr(arrow + 4);
    size_t a = insn.find_first_not_of(' '), b = insn.find_last_not_of(' ');
    l.insn = a == std::string::npos ? "" : insn.substr(a, b - a + 1);
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace gpnpu::traces
