#include "kernels/schedule.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "isa/error.h"
#include "sim/machine/timing.h"

namespace gpnpu::kernels {

namespace {

struct Scheduled {
  std::vector<uint32_t> order;
  uint64_t cycles = 0;
};

Scheduled list_schedule(const std::vector<uint64_t>& words, uint32_t begin, const sim::Config& cfg, bool ocm_disjoint) {
  const size_t n = words.size();
  const sim::Timing timing(cfg);
  std::vector<isa::Insn> in(n);
  std::vector<sim::Cost> cost(n);
  std::vector<std::vector<uint32_t>> succ(n);
  std::vector<uint32_t> npred(n, 0);
  auto edge = [&](uint32_t from, uint32_t to) {
    succ[from].push_back(to);
    ++npred[to];
  };
  std::vector<int64_t> last_write(isa::kNumRegs, -1);
  std::vector<std::vector<uint32_t>> readers(isa::kNumRegs);
  struct Space {  // one memory (LRM or OCM): its last store and the loads since
    int64_t last_store = -1;
    std::vector<uint32_t> loads;
  } lrm, ocm;
  for (uint32_t i = 0; i < n; ++i) {
    in[i] = isa::decode(words[i], begin + i);
    const isa::Unit u = in[i].info->unit;
    if (u == isa::Unit::branch || u == isa::Unit::dma || u == isa::Unit::ctrl)
      fail("kernel scheduler: '{}' at pc {} cannot be reordered (branch, DMA or control)", in[i].info->mnemonic, begin + i);
    cost[i] = timing.cost_of(in[i], cfg.npe());
    for (uint8_t k = 0; k < in[i].nsrc; ++k) {
      const uint8_t r = in[i].src[k];
      if (last_write[r] >= 0) edge(uint32_t(last_write[r]), i);
      readers[r].push_back(i);
    }
    for (uint8_t k = 0; k < in[i].ndst; ++k) {
      const uint8_t r = in[i].dst[k];
      if (last_write[r] >= 0) edge(uint32_t(last_write[r]), i);
      for (uint32_t j : readers[r])
        if (j != i) edge(j, i);
      readers[r].clear();
      last_write[r] = i;
    }
    const bool is_lrm = u == isa::Unit::lrm;
    if (!is_lrm && !(isa::unit_info(u).port != isa::Port::none)) continue;  // (LRM, or the OCM <-> array port)
    Space& m = is_lrm ? lrm : ocm;
    const bool loads_free = !is_lrm && ocm_disjoint;
    const bool store = u == isa::Unit::ocm_wr || (is_lrm && in[i].info->ops[0].access == 0);
    if (store) {
      if (m.last_store >= 0) edge(uint32_t(m.last_store), i);
      if (!loads_free)
        for (uint32_t j : m.loads) edge(j, i);
      m.loads.clear();
      m.last_store = i;
    } else {
      if (m.last_store >= 0 && !loads_free) edge(uint32_t(m.last_store), i);
      m.loads.push_back(i);
    }
  }
  // Longest latency path to the end of the region (the priority).
  std::vector<uint64_t> height(n, 0);
  for (size_t i = n; i-- > 0;) {
    uint64_t h = 0;
    for (uint32_t s : succ[i]) h = std::max(h, height[s]);
    height[i] = h + cost[i].latency;
  }
  std::vector<uint64_t> ready(isa::kNumRegs, 0), free_at(isa::kNumUnits, 0);
  std::vector<uint32_t> cand;
  for (uint32_t i = 0; i < n; ++i)
    if (npred[i] == 0) cand.push_back(i);
  Scheduled out;
  uint64_t now = 0, end = 0;
  while (!cand.empty()) {
    size_t best = 0;
    uint64_t best_t = UINT64_MAX;
    for (size_t k = 0; k < cand.size(); ++k) {
      const uint32_t i = cand[k];
      uint64_t t = std::max(now, free_at[int(cost[i].resource)]);
      for (uint8_t r = 0; r < in[i].nsrc; ++r) t = std::max(t, ready[in[i].src[r]]);
      for (uint8_t r = 0; r < in[i].ndst; ++r) t = std::max(t, ready[in[i].dst[r]]);
      const uint32_t b = cand[best];
      if (t < best_t || (t == best_t && (height[i] > height[b] || (height[i] == height[b] && i < b)))) best = k, best_t = t;
    }
    const uint32_t i = cand[best];
    cand[best] = cand.back();
    cand.pop_back();
    out.order.push_back(i);
    for (uint8_t r = 0; r < in[i].ndst; ++r) ready[in[i].dst[r]] = best_t + cost[i].latency;
    free_at[int(cost[i].resource)] = best_t + cost[i].occupancy;
    now = best_t + 1;
    end = std::max({end, now, best_t + cost[i].latency});
    for (uint32_t s : succ[i])
      if (--npred[s] == 0) cand.push_back(s);
  }
  out.cycles = end;
  return out;
}

}  // namespace

uint64_t schedule_region(Builder& b, uint32_t begin, const sim::Config& cfg, bool ocm_disjoint) {
  std::span<uint64_t> span = b.words_from(begin);
  std::vector<uint64_t> words(span.begin(), span.end());
  // One kernel shape is emitted many times per program (every layer): the schedule of a
  // region depends only on its words (no branches inside) and the timing parameters.
  std::vector<uint64_t> key = words;
  for (int u = 0; u < isa::kNumUnits; ++u) key.push_back(uint64_t(cfg.lat(isa::Unit(u))) << 32 | cfg.occ(isa::Unit(u)));
  key.push_back(uint64_t(cfg.ocm_port_bytes) << 32 | cfg.npe());
  key.push_back(ocm_disjoint);
  static std::mutex mu;
  static std::map<std::vector<uint64_t>, Scheduled> cache;
  Scheduled s;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) s = it->second;
  }
  if (s.order.empty() && !words.empty()) {
    s = list_schedule(words, begin, cfg, ocm_disjoint);
    std::lock_guard<std::mutex> lock(mu);
    if (cache.size() > 256) cache.clear();
    cache.emplace(std::move(key), s);
  }
  for (size_t k = 0; k < s.order.size(); ++k) span[k] = words[s.order[k]];
  return s.cycles;
}

}  // namespace gpnpu::kernels
