#include "sim/dram.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "isa/error.h"
#include "sim/machine/config.h"
#include "sim/stats.h"

namespace gpnpu::sim {

static_assert(int(Stat::dram_writes) == int(Stat::dram_reads) + DramCounts::writes &&
                  int(Stat::dram_turnarounds) == int(Stat::dram_reads) + DramCounts::turnarounds,
              "the dram_* stats follow DramCounts::Kind");

double sustained_bytes_per_cycle(const DramSpec& spec) {
  // 16 MiB read in 256 KiB requests, all issued at once: many refresh intervals of
  // every preset, every row switch of a sequential stream.
  DramModel m(spec, 0);
  constexpr uint64_t kChunk = 256 << 10, kBytes = 16 << 20;
  Cycles done = 0;
  for (uint64_t a = 0; a < kBytes; a += kChunk) done = std::max(done, m.request(0, a % spec.capacity, kChunk, false));
  return double(kBytes) / double(done);
}

// ---- the model -------------------------------------------------------------------

DramModel::DramModel(const DramSpec& spec, Cycles origin) : s_(spec), origin_(origin) {
  banks_per_channel_ = s_.ranks * s_.bankgroups * s_.banks;
  bank_base_ = rank_idx(s_.ranks);
  // Channel-local burst index: the burst index with the Ch field taken out.
  for (int f = 0; f < DramSpec::kFields; ++f) {
    if (f == DramSpec::Ch) continue;
    lshift_[f] = s_.shift[f] > s_.shift[DramSpec::Ch] ? s_.shift[f] - s_.bits[DramSpec::Ch] : s_.shift[f];
  }
  inner_ = 1u << lshift_[DramSpec::Co];
  cols_ = uint64_t(1) << s_.bits[DramSpec::Co];
  ch_.resize(s_.channels);
  for (Channel& c : ch_) {
    c.t.assign(bank_base_ + 4 * banks_per_channel_, kNever);
    c.open_row.assign(banks_per_channel_, -1);
    const Tick first = s_.refresh == DramSpec::Refresh::perbank ? s_.tREFI / (s_.bankgroups * s_.banks) : s_.tREFI;
    c.next_ref.assign(s_.ranks, first);
    c.refreshed.assign(s_.ranks, 0);
  }
  counts_.resize(s_.channels);
}

void DramModel::clear_counts() {
  for (DramCounts& c : counts_) c = DramCounts{};
}

void DramModel::count(uint32_t ch, DramCounts::Kind k, uint64_t n) {
  counts_[ch].v[k] += n;
  if (sink_) (*sink_)[Stat(int(Stat::dram_reads) + k)] += n;
}

DramModel::Target DramModel::decode(uint64_t local) const {
  auto field = [&](int f) { return (local >> lshift_[f]) & ((uint64_t(1) << s_.bits[f]) - 1); };
  Target x;
  x.rank = uint32_t(field(DramSpec::Ra));
  x.group = uint32_t(field(DramSpec::Bg));
  x.bank = (x.rank * s_.bankgroups + x.group) * s_.banks + uint32_t(field(DramSpec::Ba));
  x.row = int64_t(field(DramSpec::Ro));
  return x;
}

DramModel::Tick DramModel::min_deadline(const Channel& c) const {
  if (s_.refresh == DramSpec::Refresh::none) return INT64_MAX;
  return *std::min_element(c.next_ref.begin(), c.next_ref.end());
}

void DramModel::close_bank(Channel& c, uint32_t ch, uint32_t bank, Tick after) {
  std::vector<Tick>& t = c.t;
  const uint32_t B = bank_idx(bank);
  Tick pre = std::max({after, t[B] + s_.tRAS, t[B + 2] + s_.tRTP, t[B + 3] + s_.tWR});
  t[B + 1] = std::max(t[B + 1], pre + s_.tRP);
  c.open_row[bank] = -1;
  count(ch, DramCounts::precharges);
}

void DramModel::refresh_due(uint32_t ch, uint32_t rank, Tick by) {
  Channel& c = ch_[ch];
  std::vector<Tick>& t = c.t;
  const uint32_t nb = s_.bankgroups * s_.banks, first = rank * nb;
  if (s_.refresh == DramSpec::Refresh::all) {
    while (c.next_ref[rank] <= by) {
      const Tick due = c.next_ref[rank];
      Tick ref = due;
      bool any_open = false;
      for (uint32_t b = first; b < first + nb; ++b) {
        if (c.open_row[b] >= 0) close_bank(c, ch, b, due), any_open = true;
        ref = std::max({ref, t[bank_idx(b) + 1], t[bank_idx(b)] + s_.tRC});
      }
      for (uint32_t b = first; b < first + nb; ++b) t[bank_idx(b) + 1] = ref + s_.tRFC;
      count(ch, DramCounts::refreshes);
      c.next_ref[rank] = due + s_.tREFI;
      // Idle intervals: every later refresh finds the rank closed and idle, so it
      // takes place at its deadline (tRFC < tREFI); count them in one step.
      if (!any_open && c.next_ref[rank] <= by && ref + s_.tRFC <= c.next_ref[rank]) {
        const uint64_t k = uint64_t(by - c.next_ref[rank]) / s_.tREFI + 1;
        const Tick last = c.next_ref[rank] + Tick(k - 1) * s_.tREFI;
        for (uint32_t b = first; b < first + nb; ++b) t[bank_idx(b) + 1] = last + s_.tRFC;
        count(ch, DramCounts::refreshes, k);
        c.next_ref[rank] = last + s_.tREFI;
      }
    }
  } else if (s_.refresh == DramSpec::Refresh::perbank) {
    const Tick every = s_.tREFI / nb;
    if (c.next_ref[rank] > by) return;
    // Refreshes older than the last nb of those due are superseded by a later one of
    // the same bank: count them, then do the last nb (at most) one by one.
    const uint64_t due = uint64_t(by - c.next_ref[rank]) / every + 1;
    if (due > nb) {
      const uint64_t skip = due - nb;
      count(ch, DramCounts::refreshes, skip);
      c.next_ref[rank] += Tick(skip) * every;
      c.refreshed[rank] = 0;
    }
    while (c.next_ref[rank] <= by) {
      const Tick at = c.next_ref[rank];
      // Each bank once per round of nb refreshes, in any order (JESD209-5 REFpb): an
      // idle bank (no column command within tRC), the one used last (in a stream
      // the one least likely to be needed soon); else the one used longest ago.
      uint32_t b = nb, lru = nb;
      Tick idle_last = kNever - 1, lru_last = INT64_MAX;
      for (uint32_t k = 0; k < nb; ++k) {
        if (c.refreshed[rank] >> k & 1) continue;
        const uint32_t B = bank_idx(first + k);
        const Tick used = std::max(t[B + 2], t[B + 3]);
        if (used < at - Tick(s_.tRC) && used > idle_last) idle_last = used, b = k;
        if (used < lru_last) lru_last = used, lru = k;
      }
      b = first + (b < nb ? b : lru);
      c.refreshed[rank] |= uint64_t(1) << (b - first);
      if (c.refreshed[rank] == (nb == 64 ? ~uint64_t(0) : (uint64_t(1) << nb) - 1)) c.refreshed[rank] = 0;
      if (c.open_row[b] >= 0) close_bank(c, ch, b, at);
      const uint32_t B = bank_idx(b);
      const Tick ref = std::max({at, t[B + 1], t[B] + s_.tRC});
      t[B + 1] = ref + s_.tRFCpb;
      count(ch, DramCounts::refreshes);
      c.next_ref[rank] = at + every;
    }
  }
}

DramModel::Tick DramModel::schedule(uint32_t ch, const Target& x, bool write, Tick arrival) {
  Channel& c = ch_[ch];
  std::vector<Tick>& t = c.t;
  // A refresh is due when this burst could not go before its deadline.
  if (c.next_ref[x.rank] <= std::max(arrival, t[kLastCol] + s_.tCCD_S) && s_.refresh != DramSpec::Refresh::none)
    refresh_due(ch, x.rank, std::max(arrival, t[kLastCol] + s_.tCCD_S));
  const uint32_t B = bank_idx(x.bank), R = rank_idx(x.rank), G = group_idx(x.rank, x.group);
  int64_t& open = c.open_row[x.bank];
  if (open == x.row) {
    count(ch, DramCounts::row_hits);
  } else {
    Tick ready = t[B + 1];
    if (open >= 0) {
      const Tick pre = std::max({arrival, t[B] + s_.tRAS, t[B + 2] + s_.tRTP, t[B + 3] + s_.tWR});
      ready = std::max(ready, pre + s_.tRP);
      count(ch, DramCounts::row_conflicts);
      count(ch, DramCounts::precharges);
    } else {
      count(ch, DramCounts::row_misses);
    }
    const Tick act =
        std::max({arrival, ready, t[B] + s_.tRC, t[R] + s_.tRRD_S, t[G + 1] + s_.tRRD_L, t[R + 1] + s_.tFAW});
    t[B] = act;
    t[R + 1] = t[R + 2], t[R + 2] = t[R + 3], t[R + 3] = t[R + 4], t[R + 4] = act;  // the last four ACTs
    t[R] = act;
    t[G + 1] = act;
    open = x.row;
    count(ch, DramCounts::activates);
  }
  Tick col = std::max({arrival, t[B] + s_.tRCD, t[kLastCol] + s_.tCCD_S, t[G] + s_.tCCD_L});
  if (write)
    col = std::max({col, t[kBusFree] - s_.tCWL, t[kLastRd] + s_.tRTW});
  else
    col = std::max({col, t[kBusFree] - s_.tCL, t[kLastWrEnd] + s_.tWTR_S, t[G + 2] + s_.tWTR_L});
  if (c.last_dir >= 0 && c.last_dir != int8_t(write)) count(ch, DramCounts::turnarounds);
  c.last_dir = int8_t(write);
  t[kLastCol] = t[G] = col;
  if (write) {
    const Tick end = col + s_.tCWL + s_.tBURST;
    t[kLastWrEnd] = t[G + 2] = t[B + 3] = t[kBusFree] = end;
    count(ch, DramCounts::writes);
  } else {
    t[kLastRd] = t[B + 2] = col;
    t[kBusFree] = col + s_.tCL + s_.tBURST;
    count(ch, DramCounts::reads);
  }
  return col;
}

// Bursts [first, last] (channel-local indices) of one span: the same rows of the
// inner_ targets that a period visits, column after column.
void DramModel::run_segment(uint32_t ch, uint64_t first, uint64_t last, bool write, Tick arrival) {
  Channel& c = ch_[ch];
  uint64_t l = first;
  for (; l <= last && l % inner_; ++l) schedule(ch, decode(l), write, arrival);
  // Whole periods. A period is steady when it is all row hits in the same direction
  // and every burst is the previous period's shifted by one P; from then on the
  // pattern repeats exactly (docs/dram.md, "Speed"), so the remaining periods, up
  // to the next refresh deadline, are that shift applied to every time the period
  // writes.
  std::vector<Tick>& prev = times_[0];
  std::vector<Tick>& cur = times_[1];
  prev.assign(inner_, 0);
  cur.assign(inner_, 0);
  bool prev_clean = false;  // the previous period was all hits, no turnaround
  const DramCounts& n = counts_[ch];
  while (l + inner_ - 1 <= last) {
    if (prev_clean) snap_[0] = c.t;
    const uint64_t acts = n.v[DramCounts::activates], turns = n.v[DramCounts::turnarounds],
                   refs = n.v[DramCounts::refreshes];
    for (uint32_t i = 0; i < inner_; ++i) cur[i] = schedule(ch, decode(l + i), write, arrival);
    l += inner_;
    const bool clean = n.v[DramCounts::activates] == acts && n.v[DramCounts::turnarounds] == turns &&
                       n.v[DramCounts::refreshes] == refs;
    if (clean && prev_clean) {
      const Tick P = cur[0] - prev[0];
      bool steady = P > 0;
      for (uint32_t i = 1; steady && i < inner_; ++i) steady = cur[i] - prev[i] == P;
      for (size_t f = 0; steady && f < c.t.size(); ++f) steady = c.t[f] == snap_[0][f] || c.t[f] - snap_[0][f] == P;
      const Tick deadline = min_deadline(c), tmax = *std::max_element(cur.begin(), cur.end());
      if (steady && deadline > tmax) {
        const uint64_t periods = (last + 1 - l) / inner_;
        const uint64_t k = std::min<uint64_t>(periods, uint64_t(deadline - 1 - tmax) / uint64_t(P));
        if (k) {
          const Tick shift = Tick(k) * P;
          for (size_t f = 0; f < c.t.size(); ++f)
            if (c.t[f] != snap_[0][f]) c.t[f] += shift;
          for (Tick& x : cur) x += shift;
          count(ch, DramCounts::row_hits, k * inner_);
          count(ch, write ? DramCounts::writes : DramCounts::reads, k * inner_);
          l += k * inner_;
        }
      }
    }
    std::swap(prev, cur);
    prev_clean = clean;
  }
  for (; l <= last; ++l) schedule(ch, decode(l), write, arrival);
}

// One channel's bursts of a request: the request queue holds one entry per span (a
// row of each inner target), served FR-FCFS: the oldest entry, unless a younger one
// hits an open row and the oldest has not yet been passed fr_cap times.
void DramModel::serve(uint32_t ch, uint64_t first, uint64_t last, bool write, Tick arrival) {
  struct Entry {
    uint64_t first, last;
  };
  const uint64_t span = uint64_t(inner_) * cols_;
  std::vector<Entry> queue;
  for (uint64_t a = first; a <= last; a = (a / span + 1) * span) queue.push_back({a, std::min(last, (a / span + 1) * span - 1)});
  uint32_t passed = 0;
  while (!queue.empty()) {
    size_t pick = 0;
    if (passed < s_.fr_cap && queue.size() > 1) {
      const Target oldest = decode(queue[0].first);
      if (ch_[ch].open_row[oldest.bank] != oldest.row)
        for (size_t q = 1; q < queue.size(); ++q) {
          const Target x = decode(queue[q].first);
          if (ch_[ch].open_row[x.bank] == x.row) {
            pick = q;
            break;
          }
        }
    }
    passed = pick ? passed + 1 : 0;
    run_segment(ch, queue[pick].first, queue[pick].last, write, arrival);
    queue.erase(queue.begin() + long(pick));
  }
}

// The posted writes of a channel, grouped by bank and row (arrival order within a
// row), so a batch pays one turnaround and few activates.
void DramModel::drain(uint32_t ch) {
  std::vector<Channel::Posted>& q = ch_[ch].write_queue;
  std::stable_sort(q.begin(), q.end(), [&](const Channel::Posted& a, const Channel::Posted& b) {
    const Target x = decode(a.local), y = decode(b.local);
    return std::pair(x.bank, x.row) < std::pair(y.bank, y.row);
  });
  for (const Channel::Posted& w : q) schedule(ch, decode(w.local), true, w.arrival);
  q.clear();
}

void DramModel::advance(Cycles now) {
  for (uint32_t ch = 0; ch < s_.channels; ++ch) drain(ch);
  if (s_.refresh == DramSpec::Refresh::none || now < origin_) return;
  const Tick by = Tick(s_.clock.to_other(now - origin_));
  for (uint32_t ch = 0; ch < s_.channels; ++ch)
    for (uint32_t r = 0; r < s_.ranks; ++r) refresh_due(ch, r, by);
}

Cycles DramModel::request(Cycles at, uint64_t addr, uint64_t bytes, bool write) {
  if (bytes == 0) return at;
  const Tick arrival = Tick(s_.clock.to_other(at > origin_ ? at - origin_ : 0));
  // Each channel's bursts of [g0, g1] are one range of its local indices.
  const uint64_t g0 = addr / s_.burst_bytes, g1 = (addr + bytes - 1) / s_.burst_bytes;
  const uint32_t k = s_.shift[DramSpec::Ch], cb = s_.bits[DramSpec::Ch];
  const uint64_t low = (uint64_t(1) << k) - 1;
  auto split = [&](uint64_t g) {
    return std::tuple{g >> (k + cb), uint32_t((g >> k) & ((uint64_t(1) << cb) - 1)), g & low};
  };
  const auto [hi0, c0, lo0] = split(g0);
  const auto [hi1, c1, lo1] = split(g1);
  struct Range {
    uint32_t ch;
    uint64_t first, last;
  };
  std::vector<Range> ranges;
  bool fits = write && s_.write_queue > 0;
  for (uint32_t ch = 0; ch < s_.channels; ++ch) {
    if (ch > c1 && hi1 == 0) continue;
    const uint64_t first = ch == c0 ? (hi0 << k) | lo0 : ch > c0 ? hi0 << k : (hi0 + 1) << k;
    const uint64_t last = ch == c1 ? (hi1 << k) | lo1 : ch < c1 ? (hi1 << k) | low : (hi1 << k) - 1;
    if (first > last) continue;
    ranges.push_back({ch, first, last});
    fits = fits && last - first + 1 + ch_[ch].write_queue.size() <= s_.write_queue;
  }
  last_begin_ = at;
  if (fits) {  // posted: buffered, done once accepted
    for (const Range& r : ranges) {
      for (uint64_t l = r.first; l <= r.last; ++l) ch_[r.ch].write_queue.push_back({l, arrival});
      if (ch_[r.ch].write_queue.size() == s_.write_queue) drain(r.ch);
    }
    last_end_ = at;
    return at + s_.ctrl_latency;
  }
  Tick done = arrival;
  for (const Range& r : ranges) {
    Channel& c = ch_[r.ch];
    if (write) drain(r.ch);  // writes stay in order
    serve(r.ch, r.first, r.last, write, arrival);
    done = std::max(done, c.t[kBusFree]);
    if (s_.close_page)
      for (uint32_t b = 0; b < banks_per_channel_; ++b)
        if (c.open_row[b] >= 0) close_bank(c, r.ch, b, arrival);
  }
  last_end_ = origin_ + s_.clock.to_core(uint64_t(done));
  return last_end_ + s_.ctrl_latency;
}

}  // namespace gpnpu::sim
