// Progress lines for long host steps (contract in progress.h).
#include "model/checkpoint/progress.h"

#include <fmt/format.h>

#include <algorithm>

namespace gpnpu::model {

using Clock = std::chrono::steady_clock;

std::string human_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.3g} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.3g} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.3g} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

Progress::Progress(std::string what, uint64_t total, Unit unit, Log log, double every_s, std::string count_name)
    : what_(std::move(what)),
      count_name_(std::move(count_name)),
      total_(total),
      unit_(unit),
      log_(std::move(log)),
      every_s_(every_s),
      t0_(Clock::now()),
      last_(t0_) {}

double Progress::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

std::string Progress::amount(uint64_t v) const {
  if (unit_ == bytes) return human_bytes(double(v));
  return fmt::format("{:.4g}{}", double(v), count_name_.empty() ? "" : " " + count_name_);
}

std::string Progress::rate(double per_s) const {
  if (unit_ == bytes) return human_bytes(per_s) + "/s";
  return fmt::format("{:.3g}{}/s", per_s, count_name_.empty() ? "" : " " + count_name_);
}

void Progress::update(uint64_t done) {
  if (!log_) return;
  const auto now = Clock::now();
  if (std::chrono::duration<double>(now - last_).count() < every_s_) return;
  last_ = now;
  const double t = elapsed_s();
  done = std::min(done, total_);
  std::string line = fmt::format("  {}: {} of {} ({:.0f}%)", what_, amount(done), amount(total_),
                                 total_ ? 100.0 * double(done) / double(total_) : 100.0);
  if (done > 0 && t > 0) {
    const double per_s = double(done) / t;
    line += fmt::format(", {}, about {:.0f} s left", rate(per_s), double(total_ - done) / per_s);
  }
  log_(line);
  printed_ = true;
}

void Progress::finish() {
  if (!log_ || !printed_) return;  // a step too short for a progress line needs no closing line
  const double t = elapsed_s();
  log_(fmt::format("  {}: {} in {:.1f} s{}", what_, amount(total_), t,
                   t > 0 ? fmt::format(" ({})", rate(double(total_) / t)) : ""));
}

std::function<void(uint64_t, uint64_t)> progress_callback(std::string what, Progress::Log log) {
  auto p = std::make_shared<std::unique_ptr<Progress>>();
  return [p, what = std::move(what), log = std::move(log)](uint64_t done, uint64_t total) {
    if (!*p) *p = std::make_unique<Progress>(what, total, Progress::bytes, log);
    if (done >= total) (*p)->finish();
    else (*p)->update(done);
  };
}

}  // namespace gpnpu::model
