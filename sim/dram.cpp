#include "sim/dram.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "isa/error.h"
#include "sim/config.h"
#include "sim/stats.h"

namespace gpnpu::sim {

static_assert(int(Stat::dram_writes) == int(Stat::dram_reads) + DramCounts::writes &&
                  int(Stat::dram_turnarounds) == int(Stat::dram_reads) + DramCounts::turnarounds,
              "the dram_* stats follow DramCounts::Kind");

namespace {

bool pow2(uint64_t v) { return v && (v & (v - 1)) == 0; }
uint32_t log2u(uint64_t v) { return uint32_t(std::bit_width(v) - 1); }

constexpr const char* kFieldNames[DramSpec::kFields] = {"Ch", "Ra", "Bg", "Ba", "Ro", "Co"};

}  // namespace

DramSpec DramSpec::from(const Config& cfg) {
  auto need = [](bool ok, const char* key, const std::string& why) {
    if (!ok) fail("config key '{}': {}", key, why);
  };
  DramSpec s;
  s.name = cfg.dram;
  s.clock = ClockRatio(cfg.clock_ghz, cfg.dram_clock_mhz);
  s.clock_mhz = cfg.dram_clock_mhz;
  need(cfg.dram_clock_mhz > 0, "dram.clock_mhz", "must be positive");
  need(cfg.dram_channels >= 1 && cfg.dram_channels <= 64 && pow2(cfg.dram_channels), "dram.channels",
       fmt::format("{} is not a power of two in 1..64", cfg.dram_channels));
  need(cfg.dram_bus_bits % cfg.dram_channels == 0 && (cfg.dram_bus_bits / cfg.dram_channels) % 8 == 0,
       "dram.channels",
       fmt::format("{} channels do not divide the {}-bit bus (dram.bus_bits) into whole bytes; use a channel count "
                   "that divides dram.bus_bits / 8",
                   cfg.dram_channels, cfg.dram_bus_bits));
  for (auto [key, v] : {std::pair{"dram.ranks", cfg.dram_ranks}, {"dram.bankgroups", cfg.dram_bankgroups},
                        {"dram.banks", cfg.dram_banks}, {"dram.rows", cfg.dram_rows}})
    need(pow2(v) && v <= (1u << 24), key, fmt::format("{} is not a power of two", v));
  need(cfg.dram_bankgroups * cfg.dram_banks <= 64, "dram.banks",
       fmt::format("{} bank groups x {} banks is more than 64 banks per rank", cfg.dram_bankgroups, cfg.dram_banks));
  need(cfg.dram_BL >= 1 && cfg.dram_beats_per_clock >= 1 && cfg.dram_BL % cfg.dram_beats_per_clock == 0, "dram.BL",
       fmt::format("BL = {} is not a multiple of dram.beats_per_clock = {}", cfg.dram_BL, cfg.dram_beats_per_clock));
  s.channels = uint32_t(cfg.dram_channels);
  s.ranks = uint32_t(cfg.dram_ranks);
  s.bankgroups = uint32_t(cfg.dram_bankgroups);
  s.banks = uint32_t(cfg.dram_banks);
  s.rows = cfg.dram_rows;
  s.row_bytes = cfg.dram_row_bytes;
  s.burst_bytes = cfg.dram_BL * (cfg.dram_bus_bits / cfg.dram_channels / 8);
  need(pow2(s.burst_bytes), "dram.BL",
       fmt::format("a burst of {} bytes (BL x channel width) is not a power of two", s.burst_bytes));
  need(pow2(s.row_bytes) && s.row_bytes >= s.burst_bytes, "dram.row_bytes",
       fmt::format("{} is not a power of two of at least one burst ({} bytes)", s.row_bytes, s.burst_bytes));
  s.capacity = uint64_t(s.channels) * s.ranks * s.bankgroups * s.banks * s.rows * s.row_bytes;

  // The mapping: two-letter fields, most significant first, each once.
  const std::string& m = cfg.dram_mapping;
  auto bad_map = [&](const std::string& why) {
    fail("config key 'dram.mapping': '{}' {}; give each of Ro Ba Bg Ra Co Ch once, most significant first "
         "(example: RoBaBgRaCoCh)",
         m, why);
  };
  if (m.size() != 2 * kFields) bad_map(fmt::format("has {} characters, not {} (six fields)", m.size(), 2 * kFields));
  const uint64_t widths[kFields] = {s.channels, s.ranks, s.bankgroups, s.banks, s.rows, s.row_bytes / s.burst_bytes};
  std::array<bool, kFields> seen{};
  uint32_t pos = 0;
  for (int i = kFields - 1; i >= 0; --i) {  // least significant field last in the string
    std::string tok = m.substr(size_t(i) * 2, 2);
    int f = int(std::find_if(std::begin(kFieldNames), std::end(kFieldNames), [&](const char* n) { return tok == n; }) -
                std::begin(kFieldNames));
    if (f == kFields) bad_map(fmt::format("has an unknown field '{}'", tok));
    if (seen[f]) bad_map(fmt::format("names {} twice", tok));
    seen[f] = true;
    s.bits[f] = log2u(widths[f]);
    s.shift[f] = pos;
    pos += s.bits[f];
  }
  need(s.capacity >= cfg.ddr_bytes, "dram.mapping",
       fmt::format("the mapping covers {} bytes ({} channels x {} ranks x {} bank groups x {} banks x {} rows x {} "
                   "bytes) but ddr_bytes is {}; add rows (dram.rows) or lower ddr_bytes",
                   s.capacity, s.channels, s.ranks, s.bankgroups, s.banks, s.rows, s.row_bytes, cfg.ddr_bytes));

  s.tBURST = uint32_t(cfg.dram_BL / cfg.dram_beats_per_clock);
  auto tm = [](uint64_t v) { return uint32_t(std::min<uint64_t>(v, 1u << 30)); };
  s.tCL = tm(cfg.dram_tCL), s.tCWL = tm(cfg.dram_tCWL), s.tRCD = tm(cfg.dram_tRCD), s.tRP = tm(cfg.dram_tRP);
  s.tRAS = tm(cfg.dram_tRAS), s.tRC = tm(cfg.dram_tRC), s.tCCD_S = tm(cfg.dram_tCCD_S), s.tCCD_L = tm(cfg.dram_tCCD_L);
  s.tRRD_S = tm(cfg.dram_tRRD_S), s.tRRD_L = tm(cfg.dram_tRRD_L), s.tFAW = tm(cfg.dram_tFAW), s.tWR = tm(cfg.dram_tWR);
  s.tWTR_S = tm(cfg.dram_tWTR_S), s.tWTR_L = tm(cfg.dram_tWTR_L), s.tRTW = tm(cfg.dram_tRTW), s.tRTP = tm(cfg.dram_tRTP);
  s.tRFC = tm(cfg.dram_tRFC), s.tRFCpb = tm(cfg.dram_tRFCpb), s.tREFI = tm(cfg.dram_tREFI);
  need(s.tRAS >= s.tRCD, "dram.tRAS",
       fmt::format("tRAS = {} is below tRCD = {}: a row must stay open until its first column command", s.tRAS, s.tRCD));
  need(s.tRC >= s.tRAS + s.tRP, "dram.tRC",
       fmt::format("tRC = {} is below tRAS + tRP = {} + {}: an activate cycle holds a row open and precharges it",
                   s.tRC, s.tRAS, s.tRP));

  const std::string& r = cfg.dram_refresh;
  need(r == "all" || r == "perbank" || r == "none", "dram.refresh", fmt::format("'{}' is not all, perbank or none", r));
  s.refresh = r == "all" ? Refresh::all : r == "perbank" ? Refresh::perbank : Refresh::none;
  if (s.refresh == Refresh::all)
    need(s.tREFI > s.tRFC, "dram.tREFI",
         fmt::format("tREFI = {} is not above tRFC = {}: the rank would never leave refresh", s.tREFI, s.tRFC));
  if (s.refresh == Refresh::perbank)
    need(s.tREFI / (s.bankgroups * s.banks) > s.tRFCpb, "dram.tREFI",
         fmt::format("tREFI / banks = {} / {} is not above tRFCpb = {}: per-bank refresh would never end", s.tREFI,
                     s.bankgroups * s.banks, s.tRFCpb));
  need(cfg.dram_page_policy == "open" || cfg.dram_page_policy == "close", "dram.page_policy",
       fmt::format("'{}' is not open or close", cfg.dram_page_policy));
  s.close_page = cfg.dram_page_policy == "close";
  s.fr_cap = uint32_t(std::min<uint64_t>(cfg.dram_fr_cap, 1u << 30));
  s.write_queue = uint32_t(std::min<uint64_t>(cfg.dram_write_queue, 1u << 20));
  s.ctrl_latency = cfg.dram_ctrl_latency_cycles;
  return s;
}

double DramSpec::peak_bytes_per_cycle() const {
  return double(channels) * double(burst_bytes) / double(tBURST) * clock.ratio();
}

double DramSpec::sustained_bytes_per_cycle() const {
  // 16 MiB read in 256 KiB requests, all issued at once: many refresh intervals of
  // every preset, every row switch of a sequential stream.
  DramModel m(*this, 0);
  constexpr uint64_t kChunk = 256 << 10, kBytes = 16 << 20;
  Cycles done = 0;
  for (uint64_t a = 0; a < kBytes; a += kChunk) done = std::max(done, m.request(0, a % capacity, kChunk, false));
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
  if (fits) {  // posted: buffered, done once accepted
    for (const Range& r : ranges) {
      for (uint64_t l = r.first; l <= r.last; ++l) ch_[r.ch].write_queue.push_back({l, arrival});
      if (ch_[r.ch].write_queue.size() == s_.write_queue) drain(r.ch);
    }
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
  return origin_ + s_.clock.to_core(uint64_t(done)) + s_.ctrl_latency;
}

}  // namespace gpnpu::sim
