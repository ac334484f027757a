// Progress of the long host steps (issue 20): the lines Progress prints (done of
// total, rate, time left; a closing line only after a progress line), and the
// synthetic checkpoint writer and the quantiser reporting their bytes up to exactly
// their totals; the bundle size said before the first run is the size written.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "model/checkpoint/config.h"
#include "model/checkpoint/progress.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"

namespace gpnpu::model {
namespace {

namespace fs = std::filesystem;

TEST(Progress, LinesSayDoneTotalRateAndTimeLeft) {
  std::vector<std::string> lines;
  Progress p("writing", 4000000000, Progress::bytes, [&](const std::string& l) { lines.push_back(l); }, 0.0);
  p.update(1000000000);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].starts_with("  writing: 1 GB of 4 GB (25%), ")) << lines[0];
  EXPECT_NE(lines[0].find("/s, about "), std::string::npos) << lines[0];
  EXPECT_TRUE(lines[0].ends_with(" s left")) << lines[0];
  p.finish();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[1].starts_with("  writing: 4 GB in ")) << lines[1];
  // A step shorter than the interval prints nothing at all (no lone closing line).
  lines.clear();
  Progress quiet("short", 10, Progress::bytes, [&](const std::string& l) { lines.push_back(l); }, 3600.0);
  quiet.update(5);
  quiet.finish();
  EXPECT_TRUE(lines.empty());
  EXPECT_EQ(human_bytes(4.26e9), "4.26 GB");
  EXPECT_EQ(human_bytes(11.9e6), "11.9 MB");
}

TEST(Progress, CheckpointAndQuantiserReportUpToTheirTotals) {
  fs::path dir = fs::temp_directory_path() / ("gpnpu_progress_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const ModelConfig cfg = config_tiny();
  std::vector<std::pair<uint64_t, uint64_t>> ck_calls, q_calls;
  SyntheticOptions so{.seed = 1, .threads = 2, .no_data = false};
  so.progress = [&](uint64_t d, uint64_t t) { ck_calls.emplace_back(d, t); };
  SyntheticStats st = make_synthetic_checkpoint(cfg, (dir / "ck").string(), so);
  ASSERT_FALSE(ck_calls.empty());
  for (size_t i = 1; i < ck_calls.size(); ++i) EXPECT_GT(ck_calls[i].first, ck_calls[i - 1].first);
  EXPECT_EQ(ck_calls.back().first, uint64_t(st.params) * 2);
  EXPECT_EQ(ck_calls.back().second, uint64_t(st.params) * 2);

  Checkpoint ck = load_checkpoint((dir / "ck").string());
  QuantOptions qo{.clip_search = true, .threads = 2};
  qo.progress = [&](uint64_t d, uint64_t t) { q_calls.emplace_back(d, t); };
  const std::string out = (dir / "b.safetensors").string();
  BundleStats bs = write_quant_bundle(ck, cfg, out, qo);
  ASSERT_EQ(q_calls.size(), expected_tensors(cfg).size());  // one call per tensor
  EXPECT_EQ(q_calls.back().first, q_calls.back().second);
  EXPECT_EQ(q_calls.back().second, uint64_t(st.params) * 2);  // the bf16 source bytes
  // The size said up front is the bundle's data; the file adds only its header.
  const uint64_t data = quant_bundle_data_bytes(cfg);
  EXPECT_LT(data, bs.bytes);
  EXPECT_LT(bs.bytes - data, 1u << 20);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpnpu::model
