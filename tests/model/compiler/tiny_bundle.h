// Shared by the compiler tests: a synthetic checkpoint quantised to a W4A16 bundle in a
// temporary directory (removed with the object), and the cosine of two vectors.
#pragma once
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"

namespace gpnpu::model::test {

inline double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return d / std::sqrt(na * nb);
}

struct TinyBundle {
  std::filesystem::path dir;
  std::unique_ptr<QuantBundle> bundle;
  // tag: the temporary directory's name (one per test binary and model). qo, outliers: a
  // mixed-precision bundle (QuantOptions::fp16_channels) of a checkpoint with planted outliers.
  explicit TinyBundle(const std::string& tag, const ModelConfig& cfg = config_tiny(), const QuantOptions& qo = {},
                      std::vector<Outlier> outliers = {}) {
    dir = std::filesystem::temp_directory_path() / ("gpnpu_test_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    SyntheticOptions so;
    so.seed = 1;
    so.outliers = std::move(outliers);
    make_synthetic_checkpoint(cfg, dir.string(), so);
    Checkpoint ck = load_checkpoint(dir.string());
    write_quant_bundle(ck, cfg, (dir / "w4a16.safetensors").string(), qo);
    bundle = std::make_unique<QuantBundle>((dir / "w4a16.safetensors").string());
  }
  ~TinyBundle() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace gpnpu::model::test
