// Architect sweeps: the cartesian product of machine-config values, each point
// compiled and run in timing-only mode in its own process, the results kept as one
// row per point in an HDF5 table (plus a CSV beside it).
//
//   gpnpu sweep --set ocm_bytes=1MiB,2MiB --set ddr_gbps=16,32,64 --workload decode
//               [--model synthetic:2b|synthetic:tiny|DIR|config.json] [--preset NAME]
//               [-j N] [--shard i/n] --out results.h5
//   gpnpu sweep-merge A.h5 B.h5 ... --out all.h5
//   gpnpu sweep-point ...   (hidden: one point in this process, prints one result line)
//
// Contract:
//  - An axis is `--set key=v1,v2,...`; every value is checked by sim::Config::set
//    (same messages) and every point by sim::Config::make before anything runs.
//  - A point is identified by its swept keys' canonical values (Config::get: bytes
//    and counts as integers, reals as shortest decimal), so "1MiB" == "1048576".
//  - Points already in the output file are skipped (resumable). After each finished
//    point the whole file is rewritten to a temporary name and renamed, so a killed
//    sweep loses no finished point and the file is never half written.
//  - The file content depends only on the rows it holds: rows are sorted by their
//    key values (axis order, numerically), no wall time or host name is stored, and
//    HDF5 object times are off. An interrupted-then-resumed sweep, a merged set of
//    shards and an uninterrupted run give byte-identical files.
//  - A point whose child exits 1 (a gpnpu::Error: e.g. the kernels do not fit the
//    OCM) is a row with status "error: ..." (deterministic, kept); a child killed by
//    a signal is not recorded and makes the sweep exit 1 (rerun to retry).
//  - The decode workload is one decode step with 140 tokens cached (slot 139); its
//    attention floors are for those 140 tokens (KernelCall::at).
//  - File layout: dataset /points (compound, one field per column; strings are
//    fixed-length), dataset /sweep_json (uint8: the JSON text {"meta", "rows"} the
//    tool reads back), root attributes format, model, preset, workload, keys.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpnpu::model {

// One swept key and its values (as given and canonical, same order).
struct SweepAxis {
  std::string key;
  std::vector<std::string> given, canonical;
  bool real = false;  // the key's type is real (else an integer count or byte size)
  bool text = false;  // the key's type is text (a word: ddr_model, dram, ...)
};

// Parses `key=v1,v2,...` items; `preset` is applied before checking the values.
// Throws gpnpu::Error on an unknown key, an empty list or item, a duplicate key or
// value, or a value Config::set rejects.
std::vector<SweepAxis> parse_sweep_axes(const std::vector<std::string>& sets, const std::string& preset);

struct SweepSpec {
  std::string model = "synthetic:2b";  // synthetic:2b, synthetic:tiny, DIR (with config.json) or a config.json
  std::string workload = "decode";  // decode, image or both
};

// Checks the workload name: decode, image or both.
void check_sweep_workload(const std::string& workload);

// The product of the axes, first axis slowest: each point as "key=canonical" sets.
std::vector<std::vector<std::string>> sweep_points(const std::vector<SweepAxis>& axes);

// Runs one point in this process (timing-only) and returns its metric columns:
// machine peaks, then per workload (prefix decode_ / image_) cycles, rate, DDR bytes,
// achieved bytes/cycle, roofline share, compute/DDR/OCM floors and the bound.
nlohmann::ordered_json run_sweep_point(const std::string& model, const std::string& preset,
                                       const std::string& workload, const std::vector<std::string>& sets);

// The results file: meta (format, model, preset, workload, keys) and sorted rows.
struct SweepTable {
  nlohmann::ordered_json meta;
  std::vector<nlohmann::ordered_json> rows;  // each has "point", the keys, "status", metrics

  static SweepTable read(const std::string& h5_path);  // throws if not a sweep file
  // Sorts the rows, writes h5_path (HDF5) and csv_path, each atomically.
  void write(const std::string& h5_path, const std::string& csv_path);
  // Adds `other`'s rows; meta must match; a point in both must have equal rows.
  void merge(const SweepTable& other, const std::string& other_name);
};

// "results.h5" -> "results.csv" (other names get ".csv" appended).
std::string sweep_csv_path(const std::string& h5_path);

// Registers sweep, sweep-merge and the hidden sweep-point.
void add_sweep_commands(CLI::App& app);

}  // namespace gpnpu::model
