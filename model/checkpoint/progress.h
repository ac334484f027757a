// Progress lines for the long host steps (writing a synthetic checkpoint, quantising
// it, running the image program): what is done of how much, the rate and an
// estimate of the time left, at most one line per `every_s` seconds of wall time:
//
//   Progress p("quantising", total_bytes, Progress::bytes, log);
//   for (...) p.update(done);   // "  quantising: 1.23 of 4.26 GB (29%), 61 MB/s, about 50 s left"
//   p.finish();                 // "  quantising: 4.26 GB in 64.2 s (66 MB/s)"
//
// The unit says how `done` and `total` print: bytes (GB, MB/s) or a plain count
// with a name ("M cycles of kernel floors"). Lines go to `log` (nothing when empty).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gpnpu::model {

class Progress {
 public:
  enum Unit { bytes, count };
  using Log = std::function<void(const std::string&)>;
  Progress(std::string what, uint64_t total, Unit unit, Log log, double every_s = 5.0, std::string count_name = {});
  void update(uint64_t done);  // prints when every_s has passed since the last line
  void finish();               // the closing line (total, wall time, rate) if update() printed any
  double elapsed_s() const;

 private:
  std::string amount(uint64_t v) const;
  std::string rate(double per_s) const;
  std::string what_, count_name_;
  uint64_t total_;
  Unit unit_;
  Log log_;
  double every_s_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point t0_, last_;
};

// A (done, total) bytes callback, as SyntheticOptions::progress and QuantOptions::progress
// take, that prints through a Progress made on its first call and finishes it when
// done reaches total.
std::function<void(uint64_t, uint64_t)> progress_callback(std::string what, Progress::Log log);

// "1.23 GB", "456 MB", "12.3 kB": decimal units, 3 significant digits.
std::string human_bytes(double b);

}  // namespace gpnpu::model
