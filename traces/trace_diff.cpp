#include "traces/trace_diff.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpnpu::traces {

namespace {
std::vector<std::string> split_writes(const std::string& w) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < w.size()) {
    size_t sep = w.find("; ", pos);
    out.push_back(w.substr(pos, sep == std::string::npos ? std::string::npos : sep - pos));
    pos = sep == std::string::npos ? w.size() : sep + 2;
  }
  return out;
}
}  // namespace

TraceDivergence diff_traces(const std::vector<TraceLine>& a, const std::vector<TraceLine>& b, const std::string& name_a,
                            const std::string& name_b) {
  TraceDivergence d;
  size_t n = std::min(a.size(), b.size());
  size_t k = 0;
  for (; k < n; ++k) {
    const TraceLine &x = a[k], &y = b[k];
    if (x.pc != y.pc || x.insn != y.insn) d.what = "instruction";
    else if (x.writes != y.writes) d.what = "write";
    else if (x.cycle != y.cycle) d.what = "cycle";
    else continue;
    break;
  }
  if (k == n && a.size() == b.size()) {
    d.report = fmt::format("traces are the same: {} lines\n", a.size());
    return d;
  }
  d.same = false;
  d.line = k;
  if (k == n) {
    d.what = "length";
    const TraceLine& longer = a.size() > b.size() ? a[k] : b[k];
    d.cycle = longer.cycle;
    d.pc = longer.pc;
    d.report = fmt::format("traces agree for {} lines, then {} ends; {} goes on ({} lines in all) with:\n  {}\n", k,
                           a.size() < b.size() ? name_a : name_b, a.size() < b.size() ? name_b : name_a,
                           std::max(a.size(), b.size()), longer.text);
    return d;
  }
  const TraceLine &x = a[k], &y = b[k];
  d.cycle = x.cycle;
  d.pc = x.pc;
  std::vector<std::string> wa = split_writes(x.writes), wb = split_writes(y.writes);
  for (size_t i = 0; i < std::max(wa.size(), wb.size()); ++i) {
    std::string p = i < wa.size() ? wa[i] : "", q = i < wb.size() ? wb[i] : "";
    if (p != q) {
      d.write_a = p;
      d.write_b = q;
      break;
    }
  }
  std::string head;
  if (d.what == "instruction")
    head = x.pc != y.pc ? fmt::format("control flow diverges: pc {} vs pc {}", x.pc, y.pc)
                        : fmt::format("the instruction at pc {} differs: `{}` vs `{}`", x.pc, x.insn, y.insn);
  else if (d.what == "write")
    head = fmt::format("pc {} `{}` wrote different values", x.pc, x.insn);
  else
    head = fmt::format("pc {} `{}` issued at cycle {} vs {} (timing)", x.pc, x.insn, x.cycle, y.cycle);
  d.report = fmt::format("first divergence at line {} (cycle {}, pc {}): {}\n  {}: {}\n  {}: {}\n", k + 1, x.cycle, x.pc,
                         head, name_a, x.text, name_b, y.text);
  if (!d.write_a.empty() || !d.write_b.empty())
    d.report += fmt::format("  differing write: {} vs {}\n", d.write_a.empty() ? "(none)" : d.write_a,
                            d.write_b.empty() ? "(none)" : d.write_b);
  return d;
}

TraceDivergence diff_trace_values(const std::vector<TraceLine>& a, const std::vector<TraceLine>& b,
                                  const std::string& name_a, const std::string& name_b) {
  std::vector<size_t> wa, wb;  // the lines that write something
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].writes.empty()) wa.push_back(i);
  for (size_t i = 0; i < b.size(); ++i)
    if (!b[i].writes.empty()) wb.push_back(i);
  TraceDivergence d;
  const size_t n = std::min(wa.size(), wb.size());
  size_t k = 0;
  while (k < n && a[wa[k]].writes == b[wb[k]].writes) ++k;
  if (k == n && wa.size() == wb.size()) {
    d.report = fmt::format("traces write the same values: {} writing lines ({} and {} lines in all; cycles, pcs and "
                           "instructions not compared)\n", wa.size(), a.size(), b.size());
    return d;
  }
  d.same = false;
  if (k == n) {
    const bool a_longer = wa.size() > wb.size();
    const TraceLine& l = a_longer ? a[wa[k]] : b[wb[k]];
    d.what = "length";
    d.line = a_longer ? wa[k] : a.size();
    d.cycle = l.cycle;
    d.pc = l.pc;
    d.report = fmt::format("the writes agree for {} writing lines, then {} writes no more; {} goes on with:\n  {}\n", k,
                           a_longer ? name_b : name_a, a_longer ? name_a : name_b, l.text);
    return d;
  }
  const TraceLine &x = a[wa[k]], &y = b[wb[k]];
  d.what = "write";
  d.line = wa[k];
  d.cycle = x.cycle;
  d.pc = x.pc;
  std::vector<std::string> pa = split_writes(x.writes), pb = split_writes(y.writes);
  for (size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {
    std::string p = i < pa.size() ? pa[i] : "", q = i < pb.size() ? pb[i] : "";
    if (p != q) {
      d.write_a = p;
      d.write_b = q;
      break;
    }
  }
  d.report = fmt::format("first different write: writing line {} ({} line {}, {} line {}):\n  {}: {}\n  {}: {}\n"
                         "  differing write: {} vs {}\n",
                         k + 1, name_a, wa[k] + 1, name_b, wb[k] + 1, name_a, x.text, name_b, y.text,
                         d.write_a.empty() ? "(none)" : d.write_a, d.write_b.empty() ? "(none)" : d.write_b);
  return d;
}

}  // namespace gpnpu::traces
