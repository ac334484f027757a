// The host driver of `gpnpu describe`: one photograph and one question through the
// whole model on the simulated chip (a device session, model/runtime/session.h),
// gated step by step against the chain.
//
// Contract:
//  - Inputs: the image is preprocessed (model/inputs/image.h, fixed size), the question is put
//    in the chat template and tokenised (model/inputs/prompt.h, model/inputs/tokenizer.h), M-RoPE
//    positions come from get_rope_index (mrope_positions). The compiler builds the image
//    program for exactly that prompt and grid, as two programs (a conversation's first
//    turn, docs/chat.md): vision (the tower: pixels -> image and DeepStack rows in DDR)
//    and prefill (the whole prompt in one run, the image rows spliced in, the LM head);
//    and the decode program once. "The image program" below is those two runs, one after
//    the other: its step record, stages and calls are theirs together.
//  - Functional runs: the host writes the weights, the folded image constants, the
//    pixel patches, the token ids and the rotary tables, runs the image program, takes
//    the argmax of its logits, then runs the decode program once per token with the
//    KV cache carried in DDR between runs, until a stop token (<|im_end|>,
//    <|endoftext|>) or `tokens` answer tokens (the first comes from the image program).
//    The chain (model/reference/chain.h, W4A16 mode on the bundle's very codes) runs alongside,
//    fed the DEVICE's tokens, and every step is gated:
//      logits cosine >= kLogitsGate and the same top-1 token unless the chain's top-2
//      are within kMarginTie; the device KV cache holds exactly the expected slots
//      (layer 0, head 0 rows that are not all zero); every cached (layer, slot) K and V
//      row has cosine >= kCacheGate against the chain's cache (the first bad row, in
//      layer, K/V, slot order, is named). A NaN cosine stays NaN (never shown as 0).
//  - Numerics: every kernel call's fp16 range is kept (NumericsRecord). The first
//    non-finite fp16 value written in a run (an overflow to inf with fp16_overflow = inf,
//    or a NaN) stops the gates: that step fails with one message naming it, and no
//    further step runs.
//  - Negative controls corrupt the device side after a run, before the host reads it:
//    zero (every run's logits), one_word (one fp16 word of the cache after the image
//    program), stale_cache (the slot written by the first decode step is erased, as if
//    the host had carried the cache from before that step), nan_cache (fp16 NaN over two
//    cache rows after the image program: the cache gate names the first, and the next
//    decode step's first NaN stops the gates). Each must fail a gate.
//  - Timing-only runs need no weights: the tokens fed back are placeholders (0), there
//    is no chain and no gate, and exactly tokens - 1 decode steps run; the cycle counts
//    equal the functional run's for the same steps (the programs do not depend on data).
//  - Deterministic: the same options give the same tokens, logits and cycles.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cost.h"
#include "sim/machine/options.h"
#include "sim/stats.h"
#include "sim/energy.h"

namespace gpnpu::model {

inline constexpr double kLogitsGate = 0.9999;  // logits cosine, device vs chain
inline constexpr double kCacheGate = 0.999;    // per (layer, slot) K/V row cosine
inline constexpr float kMarginTie = 0.1f;      // chain top-2 closer than this: either token passes

enum class NegativeControl { none, zero, one_word, stale_cache, nan_cache, drop_fp16 };
NegativeControl parse_negative_control(const std::string& s);  // gpnpu::Error on an unknown name
const char* to_string(NegativeControl c);

struct DescribeOptions {
  std::string image;                   // PNG or JPEG
  std::string prompt;                  // the user's question
  int tokens = 20;                     // answer tokens at most (>= 1)
  std::string model = "synthetic:2b";  // synthetic:2b | synthetic:tiny | checkpoint dir | bundle .safetensors
  std::string cache_dir;               // where quantised bundles are kept ("" = default_cache_dir())
  sim::MachineOptions machine;         // --preset, --set
  int width = 256, height = 256;       // the image is resized to this (multiples of 32); 0 x 0: auto (smart resize)
  bool timing_only = false;
  NegativeControl negative = NegativeControl::none;
  std::string golden;                  // optional PyTorch golden (.h5) of the same inputs
  int threads = 0;                     // chain threads (0: all cores)
  std::string command;                 // argv, for the report
  // Progress lines (stage done, steps); default: none.
  std::function<void(const std::string&)> log;
  // Called after every step (image program = step -1) with its record, for live output.
  std::function<void(const struct StepRecord&)> on_step;
};

struct StepRecord {
  int step = -1;             // -1: the image program; 0..: decode steps
  int pos = 0;               // position of the (last) row this run computed
  int device_token = 0;
  std::optional<int> chain_token;
  std::optional<double> cosine, margin, slot_cosine;
  std::optional<double> golden_cosine;  // against the PyTorch golden row, with --golden
  int cache_slots = 0, cache_expected = 0;
  bool ok = true;
  std::vector<std::string> failures;
  uint64_t cycles = 0, ddr_bytes = 0;
  sim::Counters counters;  // the run's stats (dram_* among them, for describe's DRAM line)
  sim::Energy energy;        // of the whole run, from its event counts (sim/energy.h)
  double peak_w = 0;         // highest power_window_cycles window of the run (NaN: shorter than one)
  double wall_s = 0;
};

struct StageRecord {
  std::string name, program;
  uint64_t cycles = 0, calls = 0;
  double macs = 0, ddr_bytes = 0, mac_floor = 0, ddr_floor = 0;
  int steps = 0;  // decode: steps summed
  double energy_mj = 0;
};

struct CallRecord {
  std::string program, stage, mark, kernel;
  uint64_t cycles = 0;
  double floor = 0;
  kernels::KernelCost cost;
  bool int8 = false;
  double energy_mj = 0;
};

// fp16 numerics of one kernel call in a functional run (sim stats f16_*): the image
// program's calls as they ran, the decode program's aggregated over its steps (largest
// max_abs, summed counts).
struct NumericsRecord {
  std::string program, mark, kernel;
  float max_abs = 0;  // largest finite |x| the call converted to fp16, before rounding
  uint64_t overflow = 0, underflow = 0, nan = 0;
};

struct Answer {
  std::vector<int> ids;
  std::string text;
};

// One of the image program's runs (vision, then prefill: docs/chat.md).
struct ImageRunRecord {
  std::string kind, plan;  // vision | prefill; the compiler's OCM plan
  uint64_t instructions = 0, cycles = 0, ddr_bytes = 0;
};

struct DescribeResult {
  std::string model_name, bundle_path;
  int prompt_tokens = 0, image_tokens = 0, image_start = 0, grid_h = 0, grid_w = 0;
  int width = 0, height = 0;  // the size the image was resized to (from --size, or chosen by --size auto)
  std::string png;  // the image as the model saw it
  // The image program: its two runs' sums, and each run.
  uint64_t image_instructions = 0, decode_instructions = 0, image_cycles = 0, image_ddr_bytes = 0;
  std::vector<ImageRunRecord> image_runs;
  std::vector<StepRecord> steps;
  std::vector<StageRecord> stages;
  std::vector<CallRecord> calls;  // the image program's and the first decode step's
  Answer device, chain;
  std::optional<Answer> reference_w4a16, reference_fp32;
  std::vector<NumericsRecord> numerics;  // functional runs: every kernel call that converts to fp16
  // The first non-finite fp16 value of the run: it stops the gates, with this one message
  // (kernel call, row and column, the fp32 value, the chain's value there); "" if none.
  std::string nonfinite;
  std::vector<std::string> failures;  // every gate failure, "step N: ..."
  bool ok = true;
  double wall_setup = 0, wall_image = 0, wall_decode = 0;
  // The process's CPU seconds when the decode ends (getrusage: every thread, the simulator,
  // its helper and the chain), beside the wall times above.
  double cpu_user = 0, cpu_sys = 0;
  // The chain beside the device (functional runs): the wall time of its prefill and of
  // its decode steps together, and how long the device side then waited for it (the part
  // of wall_image / wall_decode the chain, not the simulator, took).
  double chain_image = 0, chain_decode = 0, chain_wait_image = 0, chain_wait_decode = 0;
  std::string config_json;
  std::vector<double> image_power_w, decode_power_w;  // W per power window: image program, first decode step
};

// A gate's cosine as printed: 6 decimals, or "NaN" (never 0: that is the zero control).
std::string format_cosine(double c);
// The chain intermediates (model/reference/chain.h) that hold what the kernel call `mark` writes
// (for the non-finite message): L<l>/P<l>.<op> the LM layers, V<b>.<op> the tower; a qk_rope
// call writes both q and k, a down in chunks (.mlp<c>.down) the MLP's output or residual + MLP;
// none when the chain keeps no such intermediate.
std::vector<std::string> chain_tensors_of(const std::string& mark);

// $GPNPU_CACHE, else $XDG_CACHE_HOME/gpnpu, else ~/.cache/gpnpu.
std::string default_cache_dir();

// The W4A16 bundle for a model spec: a .safetensors bundle as is; synthetic:NAME and
// checkpoint directories are quantised once into the cache dir (keyed by the spec and,
// for a directory, its path, file sizes and times) and reused afterwards.
std::string resolve_bundle(const std::string& model_spec, const std::string& cache_dir,
                           const std::function<void(const std::string&)>& log);

DescribeResult describe(const DescribeOptions& opt);

// The device KV cache against the chain's (a describe step's and a chat run's cache
// gate): slots filled (layer 0, head 0 rows that are not all zero), the lowest cosine of
// any cached (layer, slot) K or V row of slots [0, expected) (NaN when a row is
// non-finite), and the first row below kCacheGate in (layer, K/V, slot) order. The
// slots are counted over the first `scan` (0: all max_seq).
struct CacheCheck {
  int slots = 0;
  double min_cos = 1;
  int bad = 0;
  std::string first_bad;
  double first_bad_cos = 0;
  std::vector<std::string> failures(int expected) const;  // the gate's messages (none: it passes)
};
class Session;
struct KvCache;
CacheCheck check_cache(const Session& dev, const KvCache& chain, int expected, uint32_t scan = 0);

// The report of schema gpnpu-describe-report/1 (docs/report.md).
std::string report_json(const DescribeOptions& opt, const DescribeResult& r);

}  // namespace gpnpu::model
