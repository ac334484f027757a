// Architect sweeps (see model/cli/driver_sweep.h for the contract).
#include "model/cli/driver_sweep.h"

#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "isa/atomic_file.h"
#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "kernels/cost.h"
#include "model/compiler/compiler.h"
#include "model/checkpoint/config.h"
#include "model/runtime/session.h"
#include "sim/machine/config.h"
#include "sim/machine/options.h"
#include "sim/energy.h"
#include "sim/run.h"

extern char** environ;

namespace gpnpu::model {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kFormat = "gpnpu-sweep/1";
constexpr const char* kResultPrefix = "GPNPU_SWEEP_RESULT ";
constexpr uint32_t kDecodeContext = 140;  // tokens attended at the decode step (its floors are for this context)

// The image workload: a 256x256 image (16x16 patches, 64 image tokens) in a
// 128-token prompt whose pads start at row 4, as in the seed run.
ImageShape sweep_image_shape() { return ImageShape{16, 16, 128, 4}; }

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}

const sim::ParamInfo* find_param(const std::string& key) {
  for (const sim::ParamInfo& p : sim::param_table())
    if (key == p.key) return &p;
  return nullptr;
}

// "key=value" sets of one point, as a label: "ocm_bytes=1048576 ddr_gbps=16".
std::string point_label(const std::vector<std::string>& sets) {
  std::string s;
  for (const std::string& x : sets) s += (s.empty() ? "" : " ") + x;
  return s;
}

json key_value(const SweepAxis& a, const std::string& canonical) {
  if (a.text) return canonical;
  if (a.real) return std::stod(canonical);
  return uint64_t(std::stoull(canonical));
}

// ---- one point -------------------------------------------------------------------

struct Floors {
  double compute = 0, ddr = 0, ocm = 0, kernel = 0;
  uint64_t macs = 0;
};

Floors sum_floors(const sim::Config& cfg, const std::vector<KernelCall>& calls, uint32_t context) {
  Floors f;
  for (const KernelCall& c : calls) {
    const kernels::KernelCost cost = c.at(context);
    f.macs += cost.macs;
    f.compute += double(cost.macs) / cfg.mac_peak(!c.int8);
    f.ddr += double(cost.ddr_bytes) / cfg.ddr_bytes_per_cycle();
    f.ocm += double(cost.ocm_bytes) / double(cfg.ocm_port_bytes);
    f.kernel += kernels::floor_cycles(cfg, cost, !c.int8);
  }
  return f;
}

// Adds `prefix`-named columns for one workload's run.
void add_metrics(json& j, const std::string& prefix, const sim::Config& cfg, const sim::Stats& st,
                 const std::vector<KernelCall>& calls, bool stages) {
  const uint64_t cycles = st.total[sim::Stat::cycles];
  const uint64_t bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
  const double secs = double(cycles) / (cfg.clock_ghz * 1e9);
  j[prefix + "cycles"] = cycles;
  if (prefix == "decode_")
    j["decode_tokens_per_s"] = 1.0 / secs;
  else
    j[prefix + "ms"] = secs * 1e3;
  if (stages)
    for (const sim::RegionCall& c : st.calls())
      if (c.depth == 0) j[prefix + st.names.at(c.name) + "_cycles"] = uint64_t(c.end - c.begin);
  j[prefix + "ddr_bytes"] = bytes;
  const double bpc = cycles ? double(bytes) / double(cycles) : 0.0;
  j[prefix + "bytes_per_cycle"] = bpc;
  j[prefix + "roofline_share"] = bpc / cfg.ddr_bytes_per_cycle();
  if (cfg.dram_model()) {  // the DRAM's own figures (docs/dram.md)
    const uint64_t bursts = st.total[sim::Stat::dram_reads] + st.total[sim::Stat::dram_writes];
    j[prefix + "dram_row_hit_rate"] = bursts ? double(st.total[sim::Stat::dram_row_hits]) / double(bursts) : 0.0;
    j[prefix + "dram_activates"] = st.total[sim::Stat::dram_activates];
    j[prefix + "dram_refreshes"] = st.total[sim::Stat::dram_refreshes];
  }
  Floors f = sum_floors(cfg, calls, prefix == "decode_" ? kDecodeContext : 0);
  j[prefix + "macs"] = f.macs;  // the model's MACs (kernel calls' work), for the roofline's intensity
  j[prefix + "compute_floor"] = f.compute;
  j[prefix + "ddr_floor"] = f.ddr;
  j[prefix + "ocm_floor"] = f.ocm;
  j[prefix + "kernel_floor"] = f.kernel;
  const double top = std::max({f.compute, f.ddr, f.ocm});
  j[prefix + "floor_ratio"] = top > 0 ? double(cycles) / top : 0.0;
  j[prefix + "bound"] = f.ddr >= f.compute && f.ddr >= f.ocm ? "ddr" : f.compute >= f.ocm ? "compute" : "ocm";
  // Energy (sim/energy.h): the run's total, its split, average and peak power.
  const sim::Energy e = sim::energy_of(st.total, cfg);
  j[prefix + "energy_mj"] = e.total_mj();
  for (int g = 0; g < 4; ++g) j[prefix + sim::kEnergyGroupNames[g] + "_mj"] = e.group_pj(sim::EnergyGroup(g)) * 1e-9;
  j[prefix + "static_mj"] = e.static_pj() * 1e-9;
  j[prefix + "average_w"] = e.average_w();
  j[prefix + "peak_w"] = st.peak_watts(cfg, st.window_watts(cfg), 0, cycles);  // NaN (null) if shorter than a window
  if (prefix == "decode_") j["decode_tokens_per_j"] = 1.0 / (e.total_pj() * 1e-12);
}

}  // namespace

// ---- input -----------------------------------------------------------------------

std::vector<SweepAxis> parse_sweep_axes(const std::vector<std::string>& sets, const std::string& preset) {
  if (sets.empty()) fail("sweep: no axis; give at least one --set key=v1,v2,... (example: --set ddr_gbps=16,32,64)");
  sim::Config base = sim::Config::make(preset, {});
  std::vector<SweepAxis> axes;
  for (const std::string& item : sets) {
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail("--set '{}': expected key=v1,v2,... (example: --set ocm_bytes=1MiB,2MiB,4MiB)", item);
    SweepAxis a;
    a.key = trim(item.substr(0, eq));
    sim::Config probe = base;
    const sim::ParamInfo* info = find_param(a.key);
    if (!info) {
      probe.set(a.key, "0", "--set");  // throws Config::set's unknown-key message (with a hint)
      fail("--set '{}': unknown config key '{}'", item, a.key);
    }
    a.real = info->type == sim::ParamType::real;
    a.text = info->type == sim::ParamType::text;
    for (const SweepAxis& other : axes)
      if (other.key == a.key) fail("--set '{}': key '{}' is swept twice; give all its values in one list", item, a.key);
    std::string list = item.substr(eq + 1);
    if (trim(list).empty())
      fail("--set '{}': empty value list for '{}'; give key=v1,v2,... (example: --set {}={})", item, a.key, a.key,
           info->default_text);
    for (const std::string& raw : split(list, ',')) {
      std::string v = trim(raw);
      if (v.empty()) fail("--set '{}': empty value in the list for '{}' (a stray comma?)", item, a.key);
      probe.set(a.key, v, "--set");  // Config::set's message names the key, the value and the accepted form
      std::string canon = probe.get(a.key);
      for (size_t i = 0; i < a.canonical.size(); ++i)
        if (a.canonical[i] == canon)
          fail("--set '{}': '{}' and '{}' are the same value of '{}'", item, a.given[i], v, a.key);
      a.given.push_back(v);
      a.canonical.push_back(canon);
    }
    axes.push_back(std::move(a));
  }
  return axes;
}

void check_sweep_workload(const std::string& workload) {
  if (workload != "decode" && workload != "image" && workload != "both")
    fail("--workload '{}': expected decode, image or both", workload);
}

std::vector<std::vector<std::string>> sweep_points(const std::vector<SweepAxis>& axes) {
  std::vector<std::vector<std::string>> pts{{}};
  for (const SweepAxis& a : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : pts)
      for (const std::string& v : a.canonical) {
        auto q = p;
        q.push_back(a.key + "=" + v);
        next.push_back(std::move(q));
      }
    pts = std::move(next);
  }
  return pts;
}

json run_sweep_point(const std::string& model, const std::string& preset, const std::string& workload,
                     const std::vector<std::string>& sets) {
  check_sweep_workload(workload);
  const ModelConfig mc = model_config_from_spec(model);
  const sim::Config cfg = sim::Config::make(preset, sets);
  json j;
  j["mac_peak"] = cfg.mac_peak();
  j["ddr_peak_bytes_per_cycle"] = cfg.ddr_bytes_per_cycle();
  // Each workload compiles on its own (the decode layout without the image weights,
  // so decode figures do not depend on --workload); a workload that does not fit this
  // machine is an error in its own status column and the others still run.
  std::vector<std::string> errors;
  auto attempt = [&](const std::string& w, const std::function<void()>& body) {
    j[w + "_status"] = "ok";  // first, so the column comes before the workload's metrics
    try {
      body();
    } catch (const Error& e) {
      j[w + "_status"] = std::string("error: ") + e.what();
      errors.push_back(fmt::format("{}: {}", w, e.what()));
    }
  };
  if (workload == "image" || workload == "both")
    attempt("image", [&] {
      const ImageShape s = sweep_image_shape();
      Compiler c(mc, cfg);
      CompiledProgram ip = c.image_program(s);
      Session dev(c, true);
      std::vector<int> ids;
      for (int i = 0; i < s.seq_len; ++i)
        ids.push_back(i >= s.image_start && i < s.image_start + s.n_image_tokens() ? mc.image_token_id : 0);
      dev.write_prompt(ids);
      const sim::Stats& st = dev.run(ip);
      add_metrics(j, "image_", cfg, st, ip.calls, true);
      j["image_weight_bytes"] = c.weight_bytes(true);  // read once: the weights-once DDR floor
      j["image_weights_floor"] = double(c.weight_bytes(true)) / cfg.ddr_bytes_per_cycle();
      j["image_plan"] = ip.plan;
    });
  if (workload == "decode" || workload == "both")
    attempt("decode", [&] {
      CompileOptions opt;
      opt.image = false;
      Compiler c(mc, cfg, opt);
      CompiledProgram dp = c.decode_program();
      Session dev(c, true);
      dev.write_decode_args(0, kDecodeContext - 1);
      const sim::Stats& st = dev.run(dp);
      add_metrics(j, "decode_", cfg, st, dp.calls, false);
    });
  if (errors.size() == (workload == "both" ? 2u : 1u)) fail("{}", errors.front() + (errors.size() > 1 ? "; " + errors[1] : ""));
  j["status"] = errors.empty() ? std::string("ok") : "error: " + errors.front();
  return j;
}

// ---- the results file ------------------------------------------------------------

std::string sweep_csv_path(const std::string& h5_path) {
  // The results file is read back to resume, and the CSV is made beside it: a regular file.
  if (const std::string kind = io::file_kind(h5_path); kind != "missing" && kind != "a regular file")
    fail("--out '{}' is {}: a sweep results file is read back to resume the sweep; give a regular file", h5_path, kind);
  if (h5_path.ends_with(".csv"))
    fail("--out '{}': the results file is HDF5 and the CSV goes beside it; name it '{}.h5'", h5_path,
         h5_path.substr(0, h5_path.size() - 4));
  if (h5_path.size() > 3 && h5_path.ends_with(".h5")) return h5_path.substr(0, h5_path.size() - 3) + ".csv";
  return h5_path + ".csv";
}

namespace {

enum class ColKind { i64, f64, str };
struct Column {
  std::string name;
  ColKind kind;
  size_t str_size = 1;  // bytes of a fixed-length string, with its terminating NUL
};

std::vector<Column> table_columns(const json& meta, const std::vector<json>& rows) {
  std::vector<Column> cols;
  std::map<std::string, size_t> index;
  auto add = [&](const std::string& name, ColKind k) {
    auto it = index.find(name);
    if (it == index.end()) {
      index[name] = cols.size();
      cols.push_back({name, k});
    } else if (cols[it->second].kind == ColKind::i64 && k == ColKind::f64) {
      cols[it->second].kind = ColKind::f64;
    }
  };
  add("point", ColKind::str);
  for (const auto& k : meta.at("keys")) add(k.get<std::string>(), ColKind::i64);
  add("status", ColKind::str);
  for (const json& r : rows)
    for (auto it = r.begin(); it != r.end(); ++it) {
      const json& v = it.value();
      if (v.is_string()) add(it.key(), ColKind::str);
      else if (v.is_number_float()) add(it.key(), ColKind::f64);
      else if (v.is_number() || v.is_boolean()) add(it.key(), ColKind::i64);
    }
  // Groups in a fixed order (whatever row comes first): point, keys and status;
  // machine columns; image_*; decode_*.
  const size_t fixed = 2 + meta.at("keys").size();
  auto group = [&](size_t i) {
    if (i < fixed) return 0;
    if (cols[i].name.starts_with("image_")) return 2;
    if (cols[i].name.starts_with("decode_")) return 3;
    return 1;
  };
  std::vector<size_t> order(cols.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return group(a) < group(b); });
  std::vector<Column> sorted;
  for (size_t i : order) sorted.push_back(cols[i]);
  cols = std::move(sorted);
  for (Column& c : cols)
    if (c.kind == ColKind::str)
      for (const json& r : rows)
        if (r.contains(c.name) && r[c.name].is_string()) c.str_size = std::max(c.str_size, r[c.name].get<std::string>().size() + 1);
  return cols;
}

// Sort key: the swept keys' values in axis order, numerically (text keys by name).
std::vector<std::pair<double, std::string>> sort_key(const json& meta, const json& row) {
  std::vector<std::pair<double, std::string>> k;
  for (const auto& key : meta.at("keys")) {
    const json& v = row.at(key.get<std::string>());
    k.push_back(v.is_string() ? std::pair(0.0, v.get<std::string>()) : std::pair(v.get<double>(), std::string()));
  }
  return k;
}

void sort_rows(const json& meta, std::vector<json>& rows) {
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const json& a, const json& b) { return sort_key(meta, a) < sort_key(meta, b); });
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_text(const std::vector<Column>& cols, const std::vector<json>& rows) {
  std::string s;
  for (size_t i = 0; i < cols.size(); ++i) s += (i ? "," : "") + cols[i].name;
  s += "\n";
  for (const json& r : rows) {
    for (size_t i = 0; i < cols.size(); ++i) {
      if (i) s += ",";
      if (!r.contains(cols[i].name)) continue;
      const json& v = r[cols[i].name];
      if (v.is_string()) s += csv_field(v.get<std::string>());
      else if (v.is_number_float()) s += fmt::format("{}", v.get<double>());
      else if (v.is_number_unsigned()) s += fmt::format("{}", v.get<uint64_t>());
      else if (v.is_number_integer()) s += fmt::format("{}", v.get<int64_t>());
      else if (v.is_boolean()) s += v.get<bool>() ? "1" : "0";
    }
    s += "\n";
  }
  return s;
}

// RAII for HDF5 ids.
struct H5Id {
  hid_t id;
  herr_t (*close)(hid_t);
  H5Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H5Id() {
    if (id >= 0) close(id);
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  operator hid_t() const { return id; }
};

void h5_check(herr_t r, const std::string& what, const std::string& path) {
  if (r < 0) fail("cannot write sweep file '{}': HDF5 failed to {}", path, what);
}

void h5_string_attr(hid_t obj, const char* name, const std::string& value, const std::string& path) {
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  h5_check(H5Tset_size(type, std::max<size_t>(value.size(), 1)), "size a string", path);
  h5_check(H5Tset_strpad(type, H5T_STR_NULLPAD), "pad a string", path);
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  h5_check(a.id, fmt::format("create attribute {}", name), path);
  std::string buf = value.empty() ? std::string(1, '\0') : value;
  h5_check(H5Awrite(a, type, buf.data()), fmt::format("write attribute {}", name), path);
}

void write_h5(const std::string& path, const json& meta, const std::vector<Column>& cols,
              const std::vector<json>& rows, const std::string& doc) {
  // Built in memory (HDF5's core driver, no backing store) and written by
  // write_file_atomic (a temporary name, renamed): a missing directory or a full
  // disk is one checked write naming the file, never a half-written file, and
  // HDF5 never sees a failed write (1.10 can crash at exit after a failed close).
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  std::string image;
  {
    // No object modification times anywhere: the bytes depend on the rows only.
    H5Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    h5_check(H5Pset_obj_track_times(fcpl, 0), "set file properties", path);
    H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    h5_check(fapl.id < 0 ? -1 : H5Pset_fapl_core(fapl, 1 << 16, 0), "set up its in-memory file", path);
    H5Id f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose);
    h5_check(f.id, "create the file in memory", path);
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    h5_check(H5Pset_obj_track_times(dcpl, 0), "set dataset properties", path);

    // /points: one compound record per row.
    std::vector<size_t> offset(cols.size());
    size_t rec = 0;
    for (size_t i = 0; i < cols.size(); ++i) {
      offset[i] = rec;
      rec += cols[i].kind == ColKind::str ? cols[i].str_size : 8;
    }
    H5Id ctype(H5Tcreate(H5T_COMPOUND, rec), H5Tclose);
    std::vector<std::unique_ptr<H5Id>> str_types;
    for (size_t i = 0; i < cols.size(); ++i) {
      hid_t t = cols[i].kind == ColKind::i64 ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
      if (cols[i].kind == ColKind::str) {
        str_types.push_back(std::make_unique<H5Id>(H5Tcopy(H5T_C_S1), H5Tclose));
        h5_check(H5Tset_size(*str_types.back(), cols[i].str_size), "size a string column", path);
        t = *str_types.back();
      }
      h5_check(H5Tinsert(ctype, cols[i].name.c_str(), offset[i], t), "build the row type", path);
    }
    std::vector<char> buf(rec * rows.size(), 0);
    for (size_t r = 0; r < rows.size(); ++r) {
      char* p = buf.data() + r * rec;
      for (size_t i = 0; i < cols.size(); ++i) {
        const json* v = rows[r].contains(cols[i].name) ? &rows[r][cols[i].name] : nullptr;
        if (cols[i].kind == ColKind::str) {
          if (v && v->is_string()) {
            std::string s = v->get<std::string>();
            std::memcpy(p + offset[i], s.data(), s.size());
          }
        } else if (cols[i].kind == ColKind::f64) {
          double d = v && v->is_number() ? v->get<double>() : std::nan("");
          std::memcpy(p + offset[i], &d, 8);
        } else {
          int64_t x = v && v->is_number() ? v->get<int64_t>() : (v && v->is_boolean() ? int64_t(v->get<bool>()) : -1);
          std::memcpy(p + offset[i], &x, 8);
        }
      }
    }
    hsize_t n = rows.size();
    H5Id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    H5Id ds(H5Dcreate2(f, "points", ctype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
    h5_check(ds.id, "create /points", path);
    if (n) h5_check(H5Dwrite(ds, ctype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "write /points", path);

    // /sweep_json: what the tool reads back (exact values, any columns).
    hsize_t nb = doc.size();
    H5Id jspace(H5Screate_simple(1, &nb, nullptr), H5Sclose);
    H5Id jds(H5Dcreate2(f, "sweep_json", H5T_NATIVE_UINT8, jspace, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
    h5_check(jds.id, "create /sweep_json", path);
    h5_check(H5Dwrite(jds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, doc.data()), "write /sweep_json", path);

    std::string keys;
    for (const auto& k : meta.at("keys")) keys += (keys.empty() ? "" : ",") + k.get<std::string>();
    h5_string_attr(f, "format", meta.at("format").get<std::string>(), path);
    h5_string_attr(f, "model", meta.at("model").get<std::string>(), path);
    h5_string_attr(f, "preset", meta.at("preset").get<std::string>(), path);
    h5_string_attr(f, "workload", meta.at("workload").get<std::string>(), path);
    h5_string_attr(f, "keys", keys, path);
    h5_check(H5Fflush(f, H5F_SCOPE_LOCAL), "flush", path);
    ssize_t bytes = H5Fget_file_image(f, nullptr, 0);
    h5_check(bytes > 0 ? 0 : -1, "size the file image", path);
    image.resize(size_t(bytes));
    h5_check(H5Fget_file_image(f, image.data(), image.size()) == bytes ? 0 : -1, "copy the file image", path);
  }
  sim::write_file_atomic(path, image);
}

}  // namespace

SweepTable SweepTable::read(const std::string& path) {
  io::check_input(path, "sweep results file", uint64_t(1) << 40);  // a FIFO would block HDF5's open
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (H5Fis_hdf5(path.c_str()) <= 0) fail("'{}' is not an HDF5 file (a sweep results file is written by gpnpu sweep)", path);
  H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (f.id < 0) fail("cannot open sweep file '{}'", path);
  H5Id ds(H5Dopen2(f, "sweep_json", H5P_DEFAULT), H5Dclose);
  if (ds.id < 0) fail("'{}' is an HDF5 file but not a gpnpu sweep file (no /sweep_json dataset)", path);
  H5Id space(H5Dget_space(ds), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  std::string doc(size_t(std::max<hssize_t>(n, 0)), '\0');
  if (n < 0 || H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, doc.data()) < 0)
    fail("cannot read /sweep_json of '{}'", path);
  SweepTable t;
  try {
    json j = json::parse(doc);
    t.meta = j.at("meta");
    for (const json& r : j.at("rows")) t.rows.push_back(r);
    if (t.meta.at("format") != kFormat)
      fail("'{}': sweep format '{}', this build reads '{}'", path, t.meta.at("format").dump(), kFormat);
  } catch (const json::exception& e) {
    fail("'{}': /sweep_json is not a valid sweep document ({})", path, e.what());
  }
  return t;
}

void SweepTable::write(const std::string& h5_path, const std::string& csv_path) {
  sort_rows(meta, rows);
  json doc;
  doc["meta"] = meta;
  doc["rows"] = rows;
  std::vector<Column> cols = table_columns(meta, rows);
  write_h5(h5_path, meta, cols, rows, doc.dump());
  sim::write_file_atomic(csv_path, csv_text(cols, rows));
}

namespace {

std::string describe(const json& meta) {
  std::string keys;
  for (const auto& k : meta.at("keys")) keys += (keys.empty() ? "" : ", ") + k.get<std::string>();
  return fmt::format("model {}, preset {}, workload {}, keys ({}), gpnpu build {}", meta.at("model").get<std::string>(),
                     meta.at("preset").get<std::string>(), meta.at("workload").get<std::string>(), keys,
                     meta.value("build", std::string("unknown")));
}

// The running gpnpu executable's bytes, hashed (FNV-1a, 64 bits): a sweep resumed or
// merged with rows of another build would mix two compilers' or timing models' figures.
std::string build_stamp() {
  const std::string exe = io::read_input("/proc/self/exe", "the gpnpu executable", uint64_t(1) << 32);
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : exe) h = (h ^ c) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

}  // namespace

void SweepTable::merge(const SweepTable& other, const std::string& other_name) {
  if (other.meta != meta)
    fail("sweep-merge: '{}' is a different sweep ({}) from the first file ({}); only shards of one sweep merge",
         other_name, describe(other.meta), describe(meta));
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < rows.size(); ++i) index[rows[i].at("point").get<std::string>()] = i;
  for (const json& r : other.rows) {
    std::string id = r.at("point").get<std::string>();
    auto it = index.find(id);
    if (it == index.end()) {
      index[id] = rows.size();
      rows.push_back(r);
    } else if (rows[it->second] != r) {
      fail("sweep-merge: point '{}' is in '{}' with different results than in an earlier file; the machines "
           "disagree (different gpnpu builds?)",
           id, other_name);
    }
  }
}

// ---- running points in child processes -----------------------------------------

namespace {

struct ChildResult {
  bool exited = false;
  int code = 0, signal = 0;
  std::string output;
};

// Runs `exe args...` with stdout and stderr into one pipe; returns everything it printed.
ChildResult run_child(const std::string& exe, const std::vector<std::string>& args) {
  int fd[2];
  if (::pipe2(fd, O_CLOEXEC) != 0) fail("sweep: cannot create a pipe: {}", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fd[1]);
  if (rc != 0) {
    ::close(fd[0]);
    fail("sweep: cannot start '{}': {}", exe, std::strerror(rc));
  }
  ChildResult r;
  char buf[4096];
  for (;;) {
    ssize_t k = ::read(fd[0], buf, sizeof buf);
    if (k > 0) r.output.append(buf, size_t(k));
    else if (k == 0 || errno != EINTR) break;
  }
  ::close(fd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    r.exited = true;
    r.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

std::string last_line_starting(const std::string& text, const std::string& prefix) {
  std::string found;
  for (const std::string& line : split(text, '\n'))
    if (line.starts_with(prefix)) found = line;
  return found;
}

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) fail("sweep: cannot find the gpnpu binary through /proc/self/exe: {}", ec.message());
  return p.string();
}

struct SweepOptions {
  SweepSpec spec;
  sim::MachineOptions machine;  // --preset, and --set as the axes
  std::string out, shard;
  int jobs = 1;
  bool dry_run = false;
};

std::pair<uint64_t, uint64_t> parse_shard(const std::string& s) {
  size_t slash = s.find('/');
  auto num = [&](const std::string& t) -> uint64_t {
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
      fail("--shard '{}': expected i/n with 0 <= i < n (example: --shard 0/4)", s);
    return std::stoull(t);
  };
  if (slash == std::string::npos) fail("--shard '{}': expected i/n with 0 <= i < n (example: --shard 0/4)", s);
  uint64_t i = num(s.substr(0, slash)), n = num(s.substr(slash + 1));
  if (n == 0 || i >= n) fail("--shard '{}': expected i/n with 0 <= i < n (example: --shard 0/4)", s);
  return {i, n};
}

void run_sweep(const SweepOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string csv = sweep_csv_path(o.out);
  io::Outputs().input("--model", o.spec.model).output("--out", o.out).output("the CSV beside --out", csv).check();
  const std::vector<SweepAxis> axes = parse_sweep_axes(o.machine.sets, o.machine.preset);
  check_sweep_workload(o.spec.workload);
  model_config_from_spec(o.spec.model);  // fail now on a bad model, not once per point
  std::vector<std::vector<std::string>> points = sweep_points(axes);
  for (const auto& p : points) {
    try {
      sim::Config::make(o.machine.preset, p);
    } catch (const Error& e) {
      fail("sweep point '{}' is not a valid machine: {}", point_label(p), e.what());
    }
  }
  uint64_t shard_i = 0, shard_n = 1;
  if (!o.shard.empty()) std::tie(shard_i, shard_n) = parse_shard(o.shard);

  SweepTable table;
  table.meta["format"] = kFormat;
  table.meta["model"] = o.spec.model;
  table.meta["preset"] = o.machine.preset;
  table.meta["workload"] = o.spec.workload;
  table.meta["keys"] = json::array();
  for (const SweepAxis& a : axes) table.meta["keys"].push_back(a.key);
  table.meta["decode_context"] = kDecodeContext;
  table.meta["build"] = build_stamp();
  if (o.spec.workload != "decode") {
    const ImageShape s = sweep_image_shape();
    table.meta["image_grid"] = {s.grid_h, s.grid_w};
    table.meta["prompt_tokens"] = s.seq_len;
  }
  // Two sweeps into one file would each rewrite it from their own rows: one holds it.
  std::unique_ptr<io::FileLock> lock;
  if (!o.dry_run) lock = std::make_unique<io::FileLock>(o.out, "sweep results file", io::FileLock::try_lock);
  std::error_code ec;
  if (fs::exists(o.out, ec)) {
    SweepTable old = SweepTable::read(o.out);
    if (old.meta != table.meta)
      fail("'{}' holds a different sweep ({}) than this one ({}); use another --out or remove it", o.out,
           describe(old.meta), describe(table.meta));
    table.rows = std::move(old.rows);
  }
  std::set<std::string> done;
  for (const json& r : table.rows) done.insert(r.at("point").get<std::string>());

  std::vector<size_t> todo;
  size_t in_shard = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (i % shard_n != shard_i) continue;
    ++in_shard;
    if (!done.count(point_label(points[i]))) todo.push_back(i);
  }
  std::fprintf(stderr, "sweep: %zu points%s, %zu already in %s, %zu to run, %d at a time\n", points.size(),
               shard_n > 1 ? fmt::format(" ({} in shard {}/{})", in_shard, shard_i, shard_n).c_str() : "",
               in_shard - todo.size(), o.out.c_str(), todo.size(), o.jobs);
  if (o.dry_run) {
    for (size_t i : todo) std::printf("%s\n", point_label(points[i]).c_str());
    return;
  }
  if (todo.empty()) {
    if (!fs::exists(csv, ec) || !fs::exists(o.out, ec)) table.write(o.out, csv);
    return;
  }

  const std::string exe = self_exe();
  std::mutex mu;
  std::atomic<size_t> next{0};
  size_t finished = 0;
  std::vector<std::string> lost;  // points whose process died (not recorded)
  std::string write_error;
  auto worker = [&] {
    for (;;) {
      size_t t = next++;
      if (t >= todo.size()) return;
      const auto& p = points[todo[t]];
      std::vector<std::string> args = {"sweep-point", "--model", o.spec.model, "--preset", o.machine.preset,
                                       "--workload", o.spec.workload};
      for (const std::string& s : p) {
        args.push_back("--set");
        args.push_back(s);
      }
      const auto p0 = std::chrono::steady_clock::now();
      ChildResult cr;
      std::string spawn_error;
      try {
        cr = run_child(exe, args);
      } catch (const Error& e) {
        spawn_error = e.what();
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
      json row;
      row["point"] = point_label(p);
      for (size_t k = 0; k < axes.size(); ++k) row[axes[k].key] = key_value(axes[k], p[k].substr(p[k].find('=') + 1));
      std::string note;
      bool record = false;
      if (spawn_error.empty() && cr.exited && cr.code == 0) {
        std::string line = last_line_starting(cr.output, kResultPrefix);
        try {
          json m = json::parse(line.substr(std::strlen(kResultPrefix)));
          row["status"] = "ok";
          for (auto it = m.begin(); it != m.end(); ++it) row[it.key()] = it.value();
          record = true;
          if (row.contains("image_cycles"))
            note = fmt::format("image {} cycles, {:.1f} ms, {:.3f}x floor", row["image_cycles"].get<uint64_t>(),
                               row["image_ms"].get<double>(), row["image_floor_ratio"].get<double>());
          if (row.contains("decode_cycles"))
            note += fmt::format("{}decode {} cycles, {:.2f} tokens/s, {:.4f}x floor", note.empty() ? "" : "; ",
                                row["decode_cycles"].get<uint64_t>(), row["decode_tokens_per_s"].get<double>(),
                                row["decode_floor_ratio"].get<double>());
        } catch (const std::exception&) {
          note = "no result line in its output:\n" + cr.output;
        }
      } else if (spawn_error.empty() && cr.exited && cr.code == 1) {
        std::string err = last_line_starting(cr.output, "error: ");
        row["status"] = err.empty() ? std::string("error: exit 1") : err;
        record = true;
        note = row["status"].get<std::string>();
      } else {
        note = !spawn_error.empty() ? spawn_error
               : cr.exited          ? fmt::format("exit {}:\n{}", cr.code, cr.output)
                                    : fmt::format("killed by signal {}:\n{}", cr.signal, cr.output);
      }
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      if (record) {
        table.rows.push_back(row);
        try {
          table.write(o.out, csv);
        } catch (const Error& e) {
          if (write_error.empty()) write_error = e.what();
          next = todo.size();  // stop starting points: they could not be saved
        }
      } else {
        lost.push_back(point_label(p));
      }
      std::fprintf(stderr, "[%zu/%zu] %s: %s (%.1f s)%s\n", finished, todo.size(), point_label(p).c_str(),
                   note.c_str(), wall, record ? "" : " -- not recorded");
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < std::min<int>(o.jobs, int(todo.size())); ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (!write_error.empty()) fail("{}", write_error);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "sweep: %zu points run in %.1f s wall; %zu rows in %s and %s\n", todo.size() - lost.size(),
               wall, table.rows.size(), o.out.c_str(), csv.c_str());
  if (!lost.empty())
    fail("{} point(s) did not finish (their process died: killed or crashed), first '{}'; rerun the same command "
         "to retry them",
         lost.size(), lost.front());
}

}  // namespace

void add_sweep_commands(CLI::App& app) {
  {
    auto o = std::make_shared<SweepOptions>();
    CLI::App* c = app.add_subcommand(
        "sweep", "run the cartesian product of machine-config values (timing-only, one process per point) into HDF5 + CSV");
    o->machine.add(c, "an axis: key=v1,v2,... (repeatable; any key of `gpnpu config --list`)",
                   "machine preset the axes override");
    c->get_option("--set")->required();
    c->add_option("--workload", o->spec.workload, "decode, image or both")->capture_default_str();
    c->add_option("--model", o->spec.model, "synthetic:2b, synthetic:tiny, or a checkpoint DIR / config.json")
        ->capture_default_str();
    c->add_option("-j,--jobs", o->jobs, "points run at a time (one process each)")
        ->capture_default_str()
        ->check(cli::integer(1, 1024));
    c->add_option("--shard", o->shard, "run only points i, i+n, i+2n, ... of the product (i/n, 0-based)");
    c->add_option("--out", o->out, "results file (HDF5); the CSV goes beside it (.csv)")->required();
    c->add_flag("--dry-run", o->dry_run, "check the input and print the points that would run, run nothing");
    c->callback([o] { run_sweep(*o); });
  }
  {
    struct MergeOptions {
      std::vector<std::string> inputs;
      std::string out;
    };
    auto o = std::make_shared<MergeOptions>();
    CLI::App* c = app.add_subcommand("sweep-merge", "join sweep shard files: gpnpu sweep-merge A.h5 B.h5 ... --out all.h5");
    c->add_option("inputs", o->inputs, "shard files of one sweep")->required();
    c->add_option("--out", o->out, "merged results file (HDF5); the CSV goes beside it")->required();
    c->callback([o] {
      io::Outputs paths;
      for (const std::string& in : o->inputs) paths.input("shard", in);
      paths.output("--out", o->out).output("the CSV beside --out", sweep_csv_path(o->out)).check();
      SweepTable t = SweepTable::read(o->inputs.at(0));
      for (size_t i = 1; i < o->inputs.size(); ++i) t.merge(SweepTable::read(o->inputs[i]), o->inputs[i]);
      t.write(o->out, sweep_csv_path(o->out));
      std::fprintf(stderr, "sweep-merge: %zu files, %zu rows -> %s and %s\n", o->inputs.size(), t.rows.size(),
                   o->out.c_str(), sweep_csv_path(o->out).c_str());
    });
  }
  {
    struct PointOptions {
      std::string model = "synthetic:2b", workload = "decode";
      sim::MachineOptions machine;
    };
    auto o = std::make_shared<PointOptions>();
    CLI::App* c = app.add_subcommand("sweep-point", "");  // hidden: run by `gpnpu sweep`, one point per process
    c->group("");
    c->add_option("--model", o->model);
    c->add_option("--workload", o->workload);
    o->machine.add(c);
    c->callback([o] {
      json j = run_sweep_point(o->model, o->machine.preset, o->workload, o->machine.sets);
      std::printf("%s%s\n", kResultPrefix, j.dump().c_str());
      std::fflush(stdout);
    });
  }
}

}  // namespace gpnpu::model
