// Energy = count x table value per event, plus static power x time (see energy.h).
#include "sim/energy.h"

#include "sim/machine/config.h"

namespace gpnpu::sim {

namespace {
// Each event's table value, read from the config field its row names.
#define GPNPU_ENERGY_FIELD(name, field, stat, group) &Config::field,
constexpr double Config::*kFields[] = {GPNPU_ENERGY_EVENTS(GPNPU_ENERGY_FIELD)};
#undef GPNPU_ENERGY_FIELD
}  // namespace

const std::array<EnergyEvent, kNumEnergyEvents>& energy_events() {
#define GPNPU_ENERGY_ROW(name, field, stat, group) EnergyEvent{#name, Stat::stat, EnergyGroup::group},
  static const std::array<EnergyEvent, kNumEnergyEvents> t = {GPNPU_ENERGY_EVENTS(GPNPU_ENERGY_ROW)};
#undef GPNPU_ENERGY_ROW
  return t;
}

StaticPower static_power(const Config& cfg) {
  return {double(cfg.npe()) * cfg.power_pe_mw, double(cfg.ocm_bytes) / double(1 << 20) * cfg.power_ocm_mw_per_mib,
          cfg.power_ddr_mw_per_gbps * cfg.ddr_gbps};
}

double Energy::dynamic_pj() const {
  double s = 0;
  for (double v : event_pj) s += v;
  return s;
}

double Energy::group_pj(EnergyGroup g) const {
  double s = 0;
  for (int i = 0; i < kNumEnergyEvents; ++i)
    if (energy_events()[i].group == g) s += event_pj[i];
  return s;
}

Energy& Energy::operator+=(const Energy& o) {
  for (int i = 0; i < kNumEnergyEvents; ++i) event_pj[i] += o.event_pj[i];
  static_pe_pj += o.static_pe_pj;
  static_ocm_pj += o.static_ocm_pj;
  static_ddr_pj += o.static_ddr_pj;
  seconds += o.seconds;
  return *this;
}

Energy Energy::scaled(double f) const {
  Energy e = *this;
  for (double& v : e.event_pj) v *= f;
  e.static_pe_pj *= f;
  e.static_ocm_pj *= f;
  e.static_ddr_pj *= f;
  e.seconds *= f;
  return e;
}

Energy energy_of(const std::array<uint64_t, kNumStats>& counts, uint64_t cycles, const Config& cfg) {
  Energy e;
  for (int i = 0; i < kNumEnergyEvents; ++i)
    e.event_pj[i] = double(counts[int(energy_events()[i].stat)]) * (cfg.*kFields[i]);
  // mW x cycles / GHz = 1e-3 W x 1e-9 s x 1e12 pJ/J per cycle: pJ.
  const StaticPower p = static_power(cfg);
  e.static_pe_pj = p.pe_mw * double(cycles) / cfg.clock_ghz;
  e.static_ocm_pj = p.ocm_mw * double(cycles) / cfg.clock_ghz;
  e.static_ddr_pj = p.ddr_mw * double(cycles) / cfg.clock_ghz;
  e.seconds = double(cycles) / (cfg.clock_ghz * 1e9);
  return e;
}

Energy energy_of(const Counters& c, const Config& cfg) { return energy_of(c.v, c[Stat::cycles], cfg); }

nlohmann::ordered_json energy_json(const Energy& e) {
  nlohmann::ordered_json j;
  j["total_mj"] = e.total_mj();
  j["dynamic_mj"] = e.dynamic_pj() * 1e-9;
  j["static_mj"] = e.static_pj() * 1e-9;
  j["average_w"] = e.average_w();
  nlohmann::ordered_json split;
  for (int g = 0; g < 4; ++g) split[kEnergyGroupNames[g]] = e.group_pj(EnergyGroup(g)) * 1e-9;
  split["static"] = e.static_pj() * 1e-9;
  j["split_mj"] = split;
  j["static_mj_by_part"] = {{"pe", e.static_pe_pj * 1e-9}, {"ocm", e.static_ocm_pj * 1e-9}, {"ddr", e.static_ddr_pj * 1e-9}};
  nlohmann::ordered_json ev;
  for (int i = 0; i < kNumEnergyEvents; ++i) ev[energy_events()[i].name] = e.event_pj[i];
  j["events_pj"] = ev;
  return j;
}

}  // namespace gpnpu::sim
