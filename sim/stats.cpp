#include "sim/stats.h"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "isa/atomic_file.h"
#include "isa/error.h"
#include "sim/machine/config.h"
#include "sim/energy.h"

namespace gpnpu::sim {

namespace {
const StatInfo kStats[] = {
#define GPNPU_STAT_INFO(n, unit, desc) {#n, unit, desc},
    GPNPU_STATS(GPNPU_STAT_INFO)
#undef GPNPU_STAT_INFO
};

nlohmann::ordered_json counters_json(const Counters& c, const Config& cfg) {
  nlohmann::ordered_json j;
  for (int s = 0; s < kNumStats; ++s) j[kStats[s].name] = c.v[s];
  double cycles = double(c[Stat::cycles]);
  double ddr = double(c[Stat::ddr_bytes_read] + c[Stat::ddr_bytes_written]);
  double bpc = cycles > 0 ? ddr / cycles : 0.0;
  j["ddr_bytes_per_cycle"] = bpc;
  j["ddr_roofline_fraction"] = bpc / cfg.ddr_bytes_per_cycle();
  if (cfg.dram_model()) {
    const double bursts = double(c[Stat::dram_reads] + c[Stat::dram_writes]);
    j["ddr_gbps_achieved"] = bpc * cfg.clock_ghz;
    j["dram_row_hit_rate"] = bursts > 0 ? double(c[Stat::dram_row_hits]) / bursts : 0.0;
  }
  j["macs_per_cycle"] = cycles > 0 ? double(c[Stat::macs]) / cycles : 0.0;
  j["time_ms"] = cycles / (cfg.clock_ghz * 1e6);
  j["f16_max_abs"] = c.f16_max_abs;
  nlohmann::ordered_json units;
  for (int u = 0; u < isa::kNumUnits; ++u)
    if (c.by_unit[u]) units[std::string(isa::unit_name(isa::Unit(u)))] = c.by_unit[u];
  j["instructions_by_unit"] = units;
  j["energy"] = energy_json(energy_of(c, cfg));
  return j;
}

nlohmann::ordered_json dram_json(const Config& cfg, const std::vector<DramCounts>& channels) {
  const DramSpec spec = DramSpec::from(cfg);
  nlohmann::ordered_json d;
  d["preset"] = spec.name;
  d["peak_gbps"] = spec.peak_gbps();
  d["peak_bytes_per_cycle"] = spec.peak_bytes_per_cycle();
  d["sustained_bytes_per_cycle"] = sustained_bytes_per_cycle(spec);
  nlohmann::ordered_json per = nlohmann::ordered_json::array();
  for (const DramCounts& c : channels) {
    nlohmann::ordered_json one;
    for (int k = 0; k < DramCounts::kKinds; ++k) one[kStats[int(Stat::dram_reads) + k].name] = c.v[k];
    per.push_back(one);
  }
  d["channels"] = per;
  return d;
}


nlohmann::ordered_json watts_json(double w) { return std::isnan(w) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(w); }
}  // namespace

void PowerTrace::add(Stat s, Cycles at, uint64_t n) {
  const size_t k = size_t(at / window);
  if (bins.size() <= k) bins.resize(k + 1);
  bins[k][int(s)] += n;
}

void PowerTrace::spread(Stat s, Cycles from, Cycles to, uint64_t n) {
  if (to <= from) return add(s, from, n);
  // Window k gets floor(n * (hi - from) / len) - floor(n * (lo - from) / len): the parts sum to n exactly.
  const unsigned __int128 len = to - from;
  auto upto = [&](Cycles x) { return uint64_t((unsigned __int128)n * (x - from) / len); };
  const size_t last = size_t((to - 1) / window);
  if (bins.size() <= last) bins.resize(last + 1);
  for (size_t k = size_t(from / window); k <= last; ++k) {
    const Cycles lo = std::max<Cycles>(from, k * window), hi = std::min<Cycles>(to, (k + 1) * window);
    bins[k][int(s)] += upto(hi) - upto(lo);
  }
}

std::vector<double> Stats::window_watts(const Config& cfg) const {
  const Cycles end = total[Stat::cycles], w = power.window;
  std::vector<double> out;
  if (!w) return out;
  std::array<uint64_t, kNumStats> zero{};
  for (size_t k = 0; k * w < end; ++k) {
    const Cycles len = std::min<Cycles>(w, end - k * w);
    out.push_back(energy_of(k < power.bins.size() ? power.bins[k] : zero, len, cfg).average_w());
  }
  return out;
}

double Stats::peak_watts(const Config&, const std::vector<double>& watts, Cycles begin, Cycles end) const {
  const Cycles w = power.window;
  double peak = std::numeric_limits<double>::quiet_NaN();
  if (!w) return peak;
  for (size_t k = size_t((begin + w - 1) / w); k < watts.size() && (k + 1) * w <= end; ++k)
    if (!(watts[k] <= peak)) peak = watts[k];
  return peak;
}

const StatInfo& stat_info(Stat s) { return kStats[int(s)]; }

void Counters::add_diff(const Counters& end, const Counters& begin) {
  for (int s = 0; s < kNumStats; ++s) v[s] += end.v[s] - begin.v[s];
  for (int u = 0; u < isa::kNumUnits; ++u) by_unit[u] += end.by_unit[u] - begin.by_unit[u];
}

void Stats::note_f16_max(float m) {
  total.f16_max_abs = std::max(total.f16_max_abs, m);
  for (Open& o : open_) o.f16_max_abs = std::max(o.f16_max_abs, m);
}

void Stats::begin(uint32_t name, Cycles now) { open_.push_back({name, now, total, 0.0f}); }

bool Stats::end(uint32_t name, Cycles now) {
  if (open_.empty() || open_.back().name != name) return false;
  Open o = open_.back();
  open_.pop_back();
  RegionCall call{name, uint32_t(open_.size()), o.begin, now, {}};
  call.counters.add_diff(total, o.at_begin);
  call.counters[Stat::cycles] = now - o.begin;
  call.counters.f16_max_abs = o.f16_max_abs;
  calls_.push_back(call);
  return true;
}

std::string Stats::current_region() const {
  return open_.empty() ? std::string() : names.at(open_.back().name);
}

std::vector<Stats::Region> Stats::regions() const {
  std::vector<Region> out;
  std::map<uint32_t, size_t> index;
  for (const RegionCall& c : calls_) {
    auto [it, fresh] = index.try_emplace(c.name, out.size());
    if (fresh) out.push_back({names.at(c.name), 0, {}});
    Region& r = out[it->second];
    r.calls++;
    for (int s = 0; s < kNumStats; ++s) r.counters.v[s] += c.counters.v[s];
    for (int u = 0; u < isa::kNumUnits; ++u) r.counters.by_unit[u] += c.counters.by_unit[u];
    r.counters.f16_max_abs = std::max(r.counters.f16_max_abs, c.counters.f16_max_abs);
  }
  return out;
}

std::string Stats::to_json(const Config& cfg, bool timing_only) const {
  nlohmann::ordered_json j = counters_json(total, cfg);
  j["timing_only"] = timing_only;
  const std::vector<double> watts = window_watts(cfg);
  j["energy"]["peak_w"] = watts_json(peak_watts(cfg, watts, 0, total[Stat::cycles]));
  j["power"] = {{"window_cycles", power.window}, {"windows_w", watts}};
  // A region's peak: the highest full window inside any one of its calls.
  std::map<std::string, double> peaks;
  for (const RegionCall& c : calls_) {
    double p = peak_watts(cfg, watts, c.begin, c.end);
    auto [it, fresh] = peaks.try_emplace(names.at(c.name), p);
    if (!std::isnan(p) && !(p <= it->second)) it->second = p;
  }
  nlohmann::ordered_json regs = nlohmann::ordered_json::object();
  for (const Region& r : regions()) {
    nlohmann::ordered_json rj = counters_json(r.counters, cfg);
    rj["energy"]["peak_w"] = watts_json(peaks.at(r.name));
    rj["calls"] = r.calls;
    regs[r.name] = rj;
  }
  j["regions"] = regs;
  if (cfg.dram_model()) j["dram"] = dram_json(cfg, dram_channels);
  j["stat_units"] = [] {
    nlohmann::ordered_json u;
    for (const StatInfo& s : kStats) u[s.name] = {{"unit", s.unit}, {"description", s.description}};
    return u;
  }();
  j["config"] = nlohmann::ordered_json::parse(cfg.to_json());
  return j.dump(2);
}

std::string Stats::to_text(const Config& cfg) const {
  auto line = [&](const std::string& name, const Counters& c, uint64_t calls) {
    double cycles = double(c[Stat::cycles]);
    double ddr = double(c[Stat::ddr_bytes_read] + c[Stat::ddr_bytes_written]);
    double bpc = cycles > 0 ? ddr / cycles : 0;
    return fmt::format("{:<28} {:>6} {:>14} {:>12} {:>14} {:>14} {:>8.2f} {:>6.1f}% {:>10.4f}\n", name, calls,
                       c[Stat::cycles], c[Stat::instructions], c[Stat::macs], uint64_t(ddr), bpc,
                       100.0 * bpc / cfg.ddr_bytes_per_cycle(), energy_of(c, cfg).total_mj());
  };
  std::string s = fmt::format("{:<28} {:>6} {:>14} {:>12} {:>14} {:>14} {:>8} {:>7} {:>10}\n", "region", "calls",
                              "cycles", "insns", "MACs", "DDR bytes", "B/cycle", "roofl.", "mJ");
  s += line("(total)", total, 1);
  for (const Region& r : regions()) s += line(r.name, r.counters, r.calls);
  s += fmt::format("{} cycles = {:.3f} ms at {} GHz; DDR roofline {:.2f} bytes/cycle ({:.4g} GB/s{})\n",
                   total[Stat::cycles], double(total[Stat::cycles]) / (cfg.clock_ghz * 1e6), cfg.clock_ghz,
                   cfg.ddr_bytes_per_cycle(), cfg.ddr_bytes_per_cycle() * cfg.clock_ghz,
                   cfg.dram_model() ? ", DRAM " + cfg.dram + " peak" : "");
  if (cfg.dram_model()) {
    const Counters& c = total;
    const uint64_t bursts = c[Stat::dram_reads] + c[Stat::dram_writes];
    s += fmt::format("DRAM: {} read + {} write bursts, row hits {:.1f}% (misses {}, conflicts {}), {} activates, "
                     "{} refreshes, {} turnarounds\n",
                     c[Stat::dram_reads], c[Stat::dram_writes],
                     bursts ? 100.0 * double(c[Stat::dram_row_hits]) / double(bursts) : 0.0, c[Stat::dram_row_misses],
                     c[Stat::dram_row_conflicts], c[Stat::dram_activates], c[Stat::dram_refreshes],
                     c[Stat::dram_turnarounds]);
  }
  const Energy e = energy_of(total, cfg);
  const double peak = peak_watts(cfg, window_watts(cfg), 0, total[Stat::cycles]);
  s += fmt::format("energy {:.4f} mJ (DDR {:.4f}, OCM {:.4f}, MAC {:.4f}, other {:.4f}, static {:.4f}); average {:.3f} W, "
                   "peak {} over {}-cycle windows\n",
                   e.total_mj(), e.group_pj(EnergyGroup::ddr) * 1e-9, e.group_pj(EnergyGroup::ocm) * 1e-9,
                   e.group_pj(EnergyGroup::mac) * 1e-9, e.group_pj(EnergyGroup::other) * 1e-9, e.static_pj() * 1e-9,
                   e.average_w(), std::isnan(peak) ? std::string("n/a (shorter than one window)") : fmt::format("{:.3f} W", peak),
                   cfg.power_window_cycles);
  return s;
}

void Stats::write_hdf5(const std::string& path, const Config& cfg) const {
  // Built in memory (HDF5's core driver, no backing store), then written under a
  // temporary name and renamed (isa/atomic_file.h): never half a file, and a full
  // disk is our checked write, not an HDF5 flush failure (HDF5 1.10 crashes at
  // exit after a failed H5Fclose). HDF5's error stack is silenced: a failure is
  // one gpnpu::Error line.
  H5E_auto2_t old_func = nullptr;
  void* old_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  struct Restore {
    H5E_auto2_t f;
    void* d;
    ~Restore() { H5Eset_auto2(H5E_DEFAULT, f, d); }
  } restore{old_func, old_data};
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 16, 0) < 0) fail("cannot write stats HDF5 file '{}': HDF5 core driver unavailable", path);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (f < 0) fail("cannot write stats HDF5 file '{}': HDF5 could not create it in memory", path);
  bool ok = true;
  auto column = [&](const char* name, const std::vector<uint64_t>& v) {
    hsize_t n = v.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, name, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || (n && H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)) ok = false;
    if (d >= 0) H5Dclose(d);
    H5Sclose(space);
  };
  std::vector<uint64_t> col(calls_.size());
  auto fill = [&](auto get) {
    for (size_t k = 0; k < calls_.size(); ++k) col[k] = get(calls_[k]);
    return col;
  };
  column("name_id", fill([](const RegionCall& c) { return uint64_t(c.name); }));
  column("depth", fill([](const RegionCall& c) { return uint64_t(c.depth); }));
  column("begin", fill([](const RegionCall& c) { return c.begin; }));
  column("end", fill([](const RegionCall& c) { return c.end; }));
  for (int s = 0; s < kNumStats; ++s)
    column(kStats[s].name, fill([s](const RegionCall& c) { return c.counters.v[s]; }));
  auto real_column = [&](const char* name, const std::vector<double>& v) {
    hsize_t n = v.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || (n && H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)) ok = false;
    if (d >= 0) H5Dclose(d);
    H5Sclose(space);
  };
  // Energy per call (mJ) and its split; power per window (W), window length in power_window_cycles.
  std::vector<double> mj(calls_.size());
  auto fill_mj = [&](auto get) {
    for (size_t k = 0; k < calls_.size(); ++k) mj[k] = get(energy_of(calls_[k].counters, cfg)) * 1e-9;
    return mj;
  };
  real_column("energy_mj", fill_mj([](const Energy& e) { return e.total_pj(); }));
  for (int g = 0; g < 4; ++g)
    real_column(fmt::format("energy_{}_mj", kEnergyGroupNames[g]).c_str(),
                fill_mj([g](const Energy& e) { return e.group_pj(EnergyGroup(g)); }));
  real_column("energy_static_mj", fill_mj([](const Energy& e) { return e.static_pj(); }));
  real_column("power_window_w", window_watts(cfg));
  {  // the one float column
    std::vector<float> m(calls_.size());
    for (size_t k = 0; k < calls_.size(); ++k) m[k] = calls_[k].counters.f16_max_abs;
    hsize_t n = m.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "f16_max_abs", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || (n && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.data()) < 0)) ok = false;
    if (d >= 0) H5Dclose(d);
    H5Sclose(space);
  }
  // names as a variable-length string dataset
  std::vector<const char*> ptrs;
  for (const std::string& n : names) ptrs.push_back(n.c_str());
  hsize_t nn = ptrs.size();
  hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, H5T_VARIABLE);
  hid_t space = H5Screate_simple(1, &nn, nullptr);
  hid_t d = H5Dcreate2(f, "names", st, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d < 0 || (nn && H5Dwrite(d, st, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)) ok = false;
  if (d >= 0) H5Dclose(d);
  H5Sclose(space);
  H5Tclose(st);
  std::string image;
  if (ok && H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0) {
    ssize_t n = H5Fget_file_image(f, nullptr, 0);
    if (n > 0) {
      image.resize(size_t(n));
      if (H5Fget_file_image(f, image.data(), image.size()) != n) image.clear();
    }
  }
  H5Fclose(f);
  if (!ok || image.empty()) fail("cannot write stats HDF5 file '{}': an HDF5 call failed", path);
  write_file_atomic(path, image);
}

}  // namespace gpnpu::sim
