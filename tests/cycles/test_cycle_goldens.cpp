// Cycle regression: exact cycles and DDR bytes of the kernels at representative
// shapes and of the tiny and 2B image and decode programs (timing-only), against
// the checked-in table tests/cycles/cycle_goldens.txt. Any difference fails with a
// table (name, golden, now, delta, delta %); `scripts/bless-cycles` rewrites the
// table after an intended change and prints the same table.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "kernels/attention.h"
#include "kernels/builder.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/compiler/compiler.h"
#include "sim/machine/memory_map.h"
#include "sim/platform.h"
#include "sim/run.h"

namespace gpnpu {
namespace {

using namespace kernels;

struct Entry {
  uint64_t cycles = 0, ddr_bytes = 0;
};

Entry run_timing(const sim::Config& cfg, const isa::Program& p, const std::function<void()>& before = {}) {
  sim::Platform& pl = sim::Platform::get();
  pl.configure(cfg, true);
  if (before) before();
  const sim::Stats& st = pl.run(p);
  return {st.total[sim::Stat::cycles], st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written]};
}

Entry kernel(const char* preset, const std::function<void(Builder&, const sim::Config&)>& emit,
             const std::function<void()>& before = {}) {
  sim::Config cfg = sim::Config::make(preset, {"ocm_bytes=4MiB"});  // room for every shape's buffers
  Builder b;
  emit(b, cfg);
  b.op("halt");
  return run_timing(cfg, b.finish(), before);
}

std::map<std::string, Entry> measure() {
  std::map<std::string, Entry> m;
  const uint32_t scratch = 1u << 20;
  for (const char* preset : {"mini", "qc-u"}) {
    const std::string P = preset;
    for (auto [n, k] : {std::pair<uint32_t, uint32_t>{37, 384}, {2048, 2048}, {6144, 2048}}) {
      m[P + ".gemv." + std::to_string(k) + "x" + std::to_string(n)] = kernel(preset, [&](Builder& b, const sim::Config& c) {
        GemvArgs a{n, k, sim::ddr_addr(0), 0, 8192, 65536, scratch, 0};
        emit_gemv_w4(b, c, a);
      });
    }
    for (auto [mm, n, k] : {std::tuple<uint32_t, uint32_t, uint32_t>{20, 300, 384}, {128, 2048, 2048}}) {
      m[P + ".gemm." + std::to_string(mm) + "x" + std::to_string(k) + "x" + std::to_string(n)] =
          kernel(preset, [&](Builder& b, const sim::Config& c) {
            GemmArgs a;
            a.m = mm;
            a.n = n;
            a.k = k;
            a.w_ddr = sim::ddr_addr(0);
            a.x_ocm = 0;
            a.x_stride = k * 2;
            a.y_ocm = 1u << 20;
            a.y_stride = n * 2;
            a.scratch_ocm = 2u << 20;
            a.scratch_bytes = gemm_scratch_bytes(c, n, k);
            emit_gemm_w4(b, c, a);
          });
    }
    m[P + ".rmsnorm.40x2048"] = kernel(preset, [&](Builder& b, const sim::Config& c) {
      NormArgs a;
      a.rows = 40;
      a.dim = 2048;
      a.y_ocm = 1u << 18;
      a.w_ocm = 1u << 19;
      a.scratch_ocm = 600000;
      a.scratch_bytes = norm_scratch_bytes(c);
      emit_norm(b, c, a);
    });
    m[P + ".silu_mul.4x6144"] = kernel(preset, [&](Builder& b, const sim::Config& c) {
      EwArgs a;
      a.op = EwOp::silu_mul;
      a.rows = 4;
      a.cols = 6144;
      a.b_ocm = 1u << 17;
      a.out_ocm = 1u << 18;
      emit_elementwise(b, c, a);
    });
    m[P + ".rope.12x4x128"] = kernel(preset, [&](Builder& b, const sim::Config& c) {
      RopeArgs a;
      a.rows = 12;
      a.heads = 4;
      a.head_dim = 128;
      a.x_row_stride = a.out_row_stride = 4 * 128 * 2;
      a.cos_ocm = 1u << 16;
      a.sin_ocm = 1u << 17;
      a.tab_row_stride = 128 * 4;
      emit_rope(b, c, a);
    });
    m[P + ".embed.3x2048"] = kernel(
        preset,
        [&](Builder& b, const sim::Config& c) {
          EmbedArgs a;
          a.vocab = 5000;
          a.dim = 2048;
          a.rows = 3;
          a.ids_smem = 2048;
          a.out_ocm = 0;
          a.scratch_ocm = 1u << 16;
          emit_embed(b, c, a);
        },
        [] {
          uint32_t ids[3] = {7, 4000, 1};
          sim::Platform::get().write_smem(2048, ids, 12);
        });
  }
  // The model programs.
  for (auto [name, mc] : {std::pair<const char*, model::ModelConfig>{"tiny", model::config_tiny()},
                          {"2b", model::config_2b()}}) {
    sim::Config cfg = sim::Config::make("qc-u", {});
    model::CompileOptions opt;
    opt.max_seq = 512;
    model::Compiler c(mc, cfg, opt);
    model::ImageShape s{16, 16, 128, 4};
    // The image program, and its vision and prefill runs as describe and chat run them.
    model::ImageShape vision = s, prefill = s;
    vision.prefill = false;
    prefill.vision = false;
    for (auto [suffix, shape] : {std::pair{".image_program", s}, {".vision_program", vision}, {".prefill_program.128", prefill}})
      m[std::string(name) + suffix] = run_timing(cfg, c.image_program(shape).program, [&] {
        std::vector<int> ids(128, 1000);
        sim::Platform::get().write_smem(c.image_io().ids_smem, ids.data(), 512);
      });
    m[std::string(name) + ".decode_program.140"] = run_timing(cfg, c.decode_program().program, [&] {
      uint32_t args[3] = {0, 139, 140};
      sim::Platform::get().write_smem(c.decode_io().token_smem, args, 12);
    });
  }
  return m;
}

const std::string kFile = std::string(GPNPU_SOURCE_DIR) + "/tests/cycles/cycle_goldens.txt";

std::map<std::string, Entry> read_table() {
  std::map<std::string, Entry> m;
  std::ifstream in(kFile);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::string name;
    Entry e;
    if (is >> name >> e.cycles >> e.ddr_bytes) m[name] = e;
  }
  return m;
}

std::string delta_table(const std::map<std::string, Entry>& gold, const std::map<std::string, Entry>& now, int& diffs) {
  std::string t = fmt::format("{:<34} {:>14} {:>14} {:>12} {:>9}\n", "name", "golden", "now", "delta", "delta %");
  diffs = 0;
  std::map<std::string, int> names;
  for (auto& [k, v] : gold) names[k];
  for (auto& [k, v] : now) names[k];
  for (auto& [k, unused] : names) {
    auto g = gold.find(k), n = now.find(k);
    for (int field = 0; field < 2; ++field) {
      int64_t gv = g == gold.end() ? -1 : int64_t(field ? g->second.ddr_bytes : g->second.cycles);
      int64_t nv = n == now.end() ? -1 : int64_t(field ? n->second.ddr_bytes : n->second.cycles);
      if (gv == nv) continue;
      ++diffs;
      std::string name = k + (field ? " (DDR bytes)" : " (cycles)");
      if (gv < 0 || nv < 0) {
        t += fmt::format("{:<34} {:>14} {:>14} {:>12} {:>9}\n", name, gv < 0 ? "-" : std::to_string(gv),
                         nv < 0 ? "-" : std::to_string(nv), gv < 0 ? "new" : "gone", "");
        continue;
      }
      double pct = gv > 0 ? 100.0 * double(nv - gv) / double(gv) : 0.0;
      t += fmt::format("{:<34} {:>14} {:>14} {:>+12} {:>+8.3f}%\n", name, gv, nv, nv - gv, pct);
    }
  }
  return t;
}

TEST(CycleGoldens, EveryFigureIsExactlyTheCheckedInOne) {
  std::map<std::string, Entry> now = measure(), gold = read_table();
  int diffs = 0;
  std::string table = delta_table(gold, now, diffs);
  if (std::getenv("GPNPU_BLESS")) {
    std::string text = "# Exact cycles and DDR bytes (timing-only, qc-u and mini). Rewritten by scripts/bless-cycles;\n"
                       "# tests/cycles/test_cycle_goldens.cpp compares. name cycles ddr_bytes\n";
    for (auto& [k, v] : now) text += fmt::format("{} {} {}\n", k, v.cycles, v.ddr_bytes);
    sim::write_file_atomic(kFile, text);
    std::printf("blessed %zu entries (%d figures changed):\n%s", now.size(), diffs, table.c_str());
    return;
  }
  EXPECT_EQ(diffs, 0) << "cycle counts changed (run scripts/bless-cycles if intended):\n" << table;
}

}  // namespace
}  // namespace gpnpu
