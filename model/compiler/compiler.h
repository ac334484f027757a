// The model compiler: lays Qwen3-VL's quantised weights, the KV cache and the
// activations out in DDR and OCM, and builds the device programs from the kernel
// emitters (kernels/): the decode program (one token in; logits and one new KV
// slot out: compiler.cpp) and the image program (tower + prefill: compiler_image.cpp,
// with its resident plan; the streamed plan in image_streamed.cpp). Both emit the
// model's blocks as blocks.h writes them once.
// Every stage and every kernel call is marked, so stats come per stage and per
// kernel; each call's floor (kernels/cost.h) is kept beside it.
//
// Contract: the programs depend only on the model config, the machine config and
// the compile options, never on weight values; load_weights() fills DDR for
// functional runs (timing-only runs need no weights at all).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "isa/program.h"
#include "kernels/cost.h"
#include "kernels/w4_weights.h"
#include "model/checkpoint/config.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {
class Builder;
}

namespace gpnpu::model {

class QuantBundle;
struct QuantTensor;

// Where load_*() put their bytes: DDR offsets. Made from anything with
// write(offset, data, bytes), such as the simulator's DDR (the host runtime passes
// it); the compiler itself never sees the simulator.
class DdrWriter {
 public:
  template <typename Memory>
    requires(!std::is_same_v<std::remove_cvref_t<Memory>, DdrWriter>)
  DdrWriter(Memory& m) : write_([&m](uint64_t off, const void* src, uint64_t n) { m.write(off, src, n); }) {}
  void write(uint64_t offset, const void* src, uint64_t bytes) const { write_(offset, src, bytes); }

 private:
  std::function<void(uint64_t, const void*, uint64_t)> write_;
};

// Where one named tensor lives in DDR (offsets from the DDR base).
struct DdrTensor {
  std::string name;
  uint64_t offset = 0, bytes = 0;
  std::string layout;  // "gemv", "gemm", "f16", "kv"
  uint32_t split = 0;  // a GEMM packing's K split, as its calls read it (0: the tiling rule's for its shape)
};

class DdrLayout {
 public:
  uint64_t add(const std::string& name, uint64_t bytes, const std::string& layout);
  void set_split(const std::string& name, uint32_t split) { tensors_[&at(name) - tensors_.data()].split = split; }
  const DdrTensor& at(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  uint32_t bus(const std::string& name) const;  // bus address (sim::ddr_addr)
  uint64_t total() const { return end_; }
  void truncate(size_t count);  // keeps the first count tensors
  const std::vector<DdrTensor>& tensors() const { return tensors_; }

 private:
  std::vector<DdrTensor> tensors_;
  std::map<std::string, size_t> index_;
  uint64_t end_ = 0;
};

// One kernel call of a program: its mark name and its floor inputs.
struct KernelCall {
  std::string mark;    // region name in the stats
  std::string kernel;  // "gemv", "norm", ...
  kernels::KernelCost cost;
  bool int8 = false;   // MACs at the int8 rate
  // Work added per context token, for calls that read the context length at run time
  // (decode attention): the floor of a run with `context` tokens attended is at(context).
  kernels::KernelCost per_token;
  kernels::KernelCost at(uint64_t context) const {
    return {cost.macs + per_token.macs * context, cost.ddr_bytes + per_token.ddr_bytes * context,
            cost.ocm_bytes + per_token.ocm_bytes * context};
  }
};

// Where the host puts a decode step's inputs and finds its outputs.
struct DecodeIo {
  uint32_t token_smem = 0;  // 32-bit token id
  uint32_t slot_smem = 4;   // cache slot of this token (= tokens cached before it)
  uint32_t len_smem = 8;    // slot + 1: keys attended to
  uint32_t cos_ocm = 0, sin_ocm = 0;  // fp32 [head_dim] rotary tables of this position
  uint32_t max_seq = 0;
};

// The shape an image program is compiled for: one image, one prompt.
// Conversations (issue 18, docs/chat.md) split it into runs: a vision program (vision
// = true, prefill = false: pixels -> the image rows act.img and the DeepStack rows
// act.ds* left in DDR) and prefill programs (vision = false: a chunk of seq_len rows
// appended to the KV cache after cache_offset cached tokens, attending to them; its
// image rows, if any, spliced from act.img rows image_first..).
struct ImageShape {
  int grid_h = 16, grid_w = 16;  // patches (merge-window order), t = 1
  int seq_len = 128;             // prompt tokens
  int image_start = 4;           // row of the first <|image_pad|> (the pads are contiguous)
  int n_image_tokens() const { return grid_h * grid_w / 4; }
  bool vision = true, prefill = true;  // the program's runs: tower; prefill and head
  uint32_t cache_offset = 0;           // prefill: tokens in the KV cache before row 0 (the host's slot0 word)
  int image_rows = -1;                 // prefill: image rows in this chunk (-1: n_image_tokens(); 0: text only)
  int image_first = 0;                 // prefill: the act.img / act.ds row of the chunk's first image row
  bool head = true;                    // prefill: the LM head on the last row (a conversation's last chunk)
  bool plan_only = false;              // return after the OCM rule: CompiledProgram::plan only (prefill_chunk_rows)
  int chunk_image_rows() const { return image_rows < 0 ? n_image_tokens() : image_rows; }
};

// Where the host puts an image program's inputs and finds its outputs.
struct ImageIo {
  uint32_t ids_smem = 4096;    // seq_len 32-bit token ids (after the descriptor areas)
  uint32_t slot0_smem = 12;    // a word holding 0: the first KV-cache slot written
  uint32_t patches_ddr = 0;    // bus address: [patches][patch_dim] fp16
  uint32_t trope_ddr = 0;      // bus address: fp32 cos [seq][head_dim]; sin follows at + max_seq * head_dim * 4
};

struct CompiledProgram {
  isa::Program program;
  std::vector<KernelCall> calls;
  // Where the program leaves its logits (vocab fp16): in DDR at logits_ddr (a byte offset, the
  // decode program's "logits" tensor), or, where that is -1, in OCM at logits_ocm (the image program).
  uint32_t logits_ocm = 0;
  int64_t logits_ddr = -1;
  std::string plan;         // the image program's OCM plan (compiler_image.cpp), for reports
  // Streamed: the plan's cost-model estimate, which chooses between streamed plans (plan_only: no
  // fit gives infinity); without the head and the tower's attention phases. 0: a resident plan.
  double est_cycles = 0;
  double est_weight_bytes = 0;  // plan_only, streamed: the weights' DDR bytes, every pass
  uint64_t least_ocm = 0;       // plan_only, streamed, no plan fits: the least OCM its error names
  // plan_only, resident: the tower's MLP runs in row chunks, each reading its weights again,
  // where its chunk packings (Compiler::add_pm_packings), as wide as on this many PEs
  // (pm_chunk_width), would take it over every row (0: they would not).
  uint32_t tower_chunk_pes = 0;
  // plan_only, resident: the prefill's down GEMM would run in chunks beside its gate|up calls
  // (Compiler::down_chunks_laid) where their packings are laid.
  bool down_chunks = false;
  bool gate_up_whole = false;  // plan_only, resident: one gate|up call takes every chunk
};

struct CompileOptions {
  uint32_t max_seq = 4096;      // KV-cache slots per layer
  bool image = true;            // lay out the tower and the prefill weights too
  uint32_t max_patches = 1024;  // largest image (patches) the DDR input areas take
  // Test knobs of the image program (0: the OCM rule of compiler_image.cpp decides).
  // Non-zero forces the streamed plan (activations in DDR, row tiles) with at most
  // image_tile_rows rows per tile, image_attn_groups kv heads per attention call and
  // image_copy_mode the row phases' copies (1 waited, 2 pipelined, 3 stores behind);
  // image_prefill the streamed prefill's arrangement (1 three phases, 2 whole layers a tile;
  // `gpnpu compile --prefill`).
  uint32_t image_tile_rows = 0, image_attn_groups = 0, image_copy_mode = 0, image_prefill = 0;
  // Test knob: the streamed plans' MLP over every row with its first and last parts (out GEMM,
  // residual, norm; residual) in tiles of this many rows, where the partial sums are in LRM
  // and the parts fit (Streamed::ppt, vpt; 0: the cost model decides).
  uint32_t image_part_rows = 0;
  // Test knob: the streamed prefill's MLP over every row with its down in this many column
  // groups (Streamed::pg) where their LRM sums fit, also where the whole width's do, and that
  // plan taken; the mergers' fc2 too where they run in chunks (0: the cost model decides).
  uint32_t image_down_groups = 0;
  // Test knob: with it, the first of those groups of this many columns (ColumnGroups::first).
  uint32_t image_down_first = 0;
  // Test knob: the streamed prefill's q|k|v phase in column groups (Streamed::pqg) wherever a
  // group fits, also where its rows take one tile.
  bool image_qkv_groups = false;
  // Test knob: the MLP phases' partial sums in OCM even where they fit LRM (GemmArgs::lrm_in).
  bool image_ocm_sums = false;
  // Test knobs: the tower's q, k, v in turn (Streamed::vqa, where its packing is in DDR) in
  // tiles of at most image_qkv_rows rows through image_qkv_buffers output buffers (1 or 2;
  // 0: two where they fit; set, k and v go through DDR too, never kept for the attention);
  // 0 rows: the cost model decides.
  uint32_t image_qkv_rows = 0, image_qkv_buffers = 0;
  // Test knob: the tower's MLP phase in row tiles, never over every row in chunks (Streamed::vpm).
  bool image_tower_mlp_tiles = false;
  // Test knob: every fc1's GELU in the GEMM's epilogue (GemmArgs::act), also where the cost
  // model keeps the element-wise call (the tiny models' GEMMs are too narrow to fuse).
  bool image_gelu_fused = false;
  // Test knob: the prefill's gate|up packings interleaved and their SiLU in the GEMM's epilogue
  // (Compiler::gate_up_fused) where their calls run at split 1, whatever the cost model says.
  bool image_silu_fused = false;
  // Test knob: the resident prefill's gate|up chunks of gate_up_chunk's width (compiler_image.cpp),
  // never as one where a call takes them all (Compiler::gu_cw_).
  bool image_narrow_gate_up = false;
  // Test knob: the streamed prefill's down over two gate|up chunks a call wherever
  // pm_down_pairs allows it and the plan fits, whatever the estimate (Compiler::settle_pm_pairs).
  bool image_down_pairs = false;
  // Test knob: the resident prefill's down chunk packings laid (Compiler::pm_down_) whatever the
  // planning prompt's plan; the down then runs in chunks where the plan allows it.
  bool image_down_chunks = false;
  // Test knob: the resident prefill's GEMMs never two calls ahead (kernels::gemm_two_ahead).
  bool image_no_two_ahead = false;
  // Test knob: the resident plan's tower MLP over every row in chunks (its packings laid, the
  // partial sums in LRM where they fit) even where its rows fit one pass or the cost model
  // takes row chunks.
  bool image_tower_chunks = false;
  // Test knob: the resident plan's rotary tables loaded a block (layer) at a time into its
  // temporaries, not held in their own region (taken where only that makes the plan fit).
  bool image_rope_per_block = false;
  // Test knob: the mergers' MLP in chunks over every merged row (Streamed::mpm) even where their
  // row tiles hold every row (where the packing is in DDR and the partial sums fit LRM).
  bool image_merger_chunks = false;
  // Test knob: the streamed plan's activations go through DDR (stored, loaded back) where they
  // could park in LRM (kernels/park.h): the residual kept in OCM between layers (stored at a
  // layer's start, loaded for its attention residual) and the prefill's attention output (stored
  // by the attention calls, loaded for o_proj); the resident plan's LM head chunks parked in free
  // OCM (GemvArgs::park_chunks).
  bool image_no_park = false;
  // Test knob: the streamed plan's MLP chunks as wide as on this many PEs (pm_chunk_width;
  // 0: Compiler::settle_pm_chunks decides).
  uint32_t image_chunk_pes = 0;
  // Test knob: the streamed program on one view in two parts (1) or in one (2) (0:
  // Compiler::settle_parts decides).
  uint32_t image_parts = 0;
  // The image GEMMs on this many PE rows (`gpnpu compile --gemm-rows`; 0: gemm_view's rule).
  uint32_t image_gemm_rows = 0;
  // The vision tower's and mergers' GEMMs on this many PE rows (`gpnpu compile --tower-rows`; 0:
  // Compiler::settle_tower_view's choice): where that differs from the prefill's view, the image
  // program runs in two parts (Compiler::image_in_parts).
  uint32_t image_tower_rows = 0;
  // Mixed precision (kernels/f16cols.h): the bundle keeps up to kernels::kF16Cols input
  // channels of each (fused) weight in fp16; every GEMV, GEMM and embedding lookup gets
  // a gather and a correction call after it, and the image program's GEMMs run unchained.
  bool fp16_channels = false;
  // Rows per prefill chunk, the last one shorter (0: prefill_chunk_rows' OCM rule; gpnpu chat --chunk).
  uint32_t prefill_chunk = 0;
};

class Compiler {
 public:
  Compiler(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt = {});

  const DdrLayout& layout() const { return ddr_; }
  const DecodeIo& decode_io() const { return dio_; }

  CompiledProgram decode_program() const;
  // The image program (tower, mergers, splice, prefill with DeepStack, head on the
  // last row) for one image and prompt shape (compiler_image.cpp).
  CompiledProgram image_program(const ImageShape& shape) const;
  const ImageIo& image_io() const { return iio_; }
  // Constants the compiler folds for a grid: the interpolated position table and the
  // tower's rotary tables (functional runs only).
  void load_image_constants(const QuantBundle& bundle, const ImageShape& shape, DdrWriter ddr) const;

  // Rows of the next prefill chunk (issue 18): of the `rows` left, from `offset` cached
  // tokens, the most that run with the resident plan (activations in OCM), evened out
  // over the chunks that takes (rows / ceil(rows / most)), at least 1, where those chunks
  // are estimated 3% below one streamed run of every row; else `rows` (the streamed plan
  // takes any chunk); at most the ids scalar memory holds; CompileOptions::prefill_chunk
  // rows when that is set.
  uint32_t prefill_chunk_rows(uint32_t offset, uint32_t rows) const;
  // Bytes of the weights a vision run (tower and mergers) or a prefill run (the LM's
  // GEMM weights, its vectors and the embedding table) needs, each once; a prefill run
  // without the head (a conversation's earlier chunk) needs neither the embedding table's
  // head read nor the last layer's o_proj and MLP (only that layer's keys and values).
  uint64_t run_weight_bytes(bool vision, bool head = true) const;
  // Bytes of the last layer's weights past its KV write (o_proj and MLP, their fp16
  // corrections): a prefill without the head skips them, its one-row tail streams them.
  uint64_t past_kv_weight_bytes() const;

  // The most KV-cache slots (context tokens) that fit the DDR beside everything else the
  // compiler lays out for `opt` (weights, image areas, the slots' prefill areas); with
  // `packings`, beside the image program's second packings too (--max-context auto), which
  // a larger count leaves out. gpnpu::Error when not even one fits.
  static uint32_t max_context(const ModelConfig& model, const sim::Config& cfg, CompileOptions opt,
                              bool packings = false);
  // Bytes of DDR the layout of `opt` takes (opt.max_seq slots); packings: as above.
  static uint64_t ddr_need(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt,
                           bool packings = false);

  // Bytes of the weights a program reads, each once (the image program: the tower,
  // mergers and prefill GEMM weights, the embedding table for its LM head, the vectors;
  // decode: the GEMV weights and the vectors): its weights-once DDR floor's bytes.
  uint64_t weight_bytes(bool image_program) const;

  // Writes every weight the programs read into DDR, in the kernels' layouts.
  void load_weights(const QuantBundle& bundle, DdrWriter ddr) const;

  const ModelConfig& model() const { return model_; }
  const sim::Config& config() const { return cfg_; }

 private:
  struct LayoutOnly {
    bool packings = false;  // keep the second packings even past ddr_bytes
  };
  // The image GEMMs' view of the array (compiler_image.cpp): the first rows of it, the
  // fewest of (whole array, halved) whose GEMM MACs stay within 0.7 x the weights' DDR
  // time, and at most those whose DMA code buffers take a quarter of the OCM.
  // CompileOptions::image_gemm_rows forces the rows. settle_gemm_view then settles the view from
  // the default image program's plans (settle_view_from_rule), and on a machine of more DMA
  // channels or LRM than the rule's (kernels::kGemmRuleChannels, kGemmRuleLrm) also from the view
  // of those; with forced rows, the LRM only.
  static sim::Config gemm_view(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt);
  void settle_gemm_view();
  void settle_view_from_rule();  // (settle_gemm_view's steps from the view in gemm_cfg_)
  // The vision part's view (tower_rows_): CompileOptions::image_tower_rows, checked against the
  // array; without it, more rows than the prefill's where the program in parts is estimated 2%
  // or more faster reading no more weight bytes (0: the prefill's view).
  void settle_tower_view();
  // The tower's GEMM MACs on the GEMMs' view (a narrow tile's idle PEs counted) over its
  // weights' DDR time, for the default image program.
  double tower_mac_per_ddr() const;
  // MAC-heavy: half of the view's rows would take over 1.5 x the weights' DDR time in MACs.
  bool mac_heavy(const sim::Config& view) const;
  // settle_gemm_view keeps every row of a MAC-heavy machine; where that program streams, fewer
  // rows can still run it faster (their GEMM buffers leave the row tiles room). fewer_rows_apply:
  // such a machine, on every row; settle_fewer_rows: the program settled again (tower view,
  // chunks, pairs) from `viewed` (this compiler after settle_gemm_view) on 3/4 and 1/2 of the
  // rows, taken where its estimate is 5% or more below this one's.
  bool fewer_rows_apply() const;
  void settle_fewer_rows(const Compiler& viewed);
  // A streamed program on one view in two parts (image_in_parts) where that reads fewer weight bytes.
  void settle_parts();
  // This compiler with the tower's view as its GEMM view: it packs and emits the vision part
  // (tower and mergers; their weights are packed for that view).
  Compiler vision_part() const;
  bool views_differ() const { return tower_rows_ && tower_rows_ != uint32_t(gemm_cfg_.pe_rows); }
  // This compiler emits a part of a program in parts (the vision part, or the rest beside it):
  // its GEMM DMA buffers hold only that part's GEMMs (the other part has its own).
  bool in_parts() const { return vision_part_ || views_differ() || parts_; }
  struct GemmLoad {
    double macs, ddr_cycles;
  };
  static GemmLoad gemm_load(const ModelConfig& model, const sim::Config& cfg);
  Compiler(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt, LayoutOnly);
  void plan_ddr();
  // A W4 weight of n rows and k inputs in the "gemv" or "gemm" layout, with its
  // mixed-precision parts (NAME.f16sel, NAME.f16w) after it when fp16_channels is set.
  void add_weight(const std::string& name, uint32_t n, uint32_t k, const char* layout);
  void plan_image_ddr();
  // The streamed plan's MLP chunks (image_plan.h, pm_chunk_width; up columns per inner
  // column 1 for fc1, 2 for gate|up), packed as the layout's last tensors (from pm_first_; 0:
  // none) for pm_npe_ PEs (0: the narrow default); settle_pm_chunks re-lays them wider where
  // the default image program's estimate is lower. pm_tower_only_: only the tower's, for the
  // resident plan, as wide as it took them (CompiledProgram::tower_chunk_pes).
  uint32_t pm_chunk(uint32_t inter, uint32_t up) const;
  // The prefill chunks' gate|up split (pm_gate_up_split over the planning prompt's rows; 0: the
  // tiling rule).
  uint32_t pm_split() const;
  // Gate|up chunks a down call of the streamed prefill's MLP takes (1 or 2: pm_pairs_; its
  // packings pm_name(i, k, "down") then take K = pm_down() * pm_chunk(I, 2)).
  uint32_t pm_down() const { return pm_pairs_; }
  // The prefill's gate|up chunk packings (gu{c}.gemm) interleave gate and up rows and their
  // calls take the SiLU in the GEMM's epilogue (kernels::GemmAct::silu_pairs: compiler_image.cpp).
  bool gate_up_fused() const;
  // The same for the streamed plan's gate|up chunk packings (pm_name(i, c, "gu")).
  bool pm_gate_up_fused() const;
  void add_pm_packings();
  void relay_pm_packings();
  void settle_pm_chunks();
  void settle_pm_pairs();
  // The default image program's streamed plan (plan only), or an empty one where it is not
  // streamed or does not fit.
  CompiledProgram streamed_estimate() const;
  bool pm_allowed() const;  // the plan knobs and mixed precision leave the second packings out
  // The resident tower's q|k|v in two calls, q|k then v (compiler_image.cpp).
  bool tower_qkv_split() const;
  uint64_t tower_v_offset() const;  // (the v call's weight bytes into V<b>.qkv)
  // The resident prefill's gate|up chunk width (gate_up_chunk, or gu_cw_: plan_image_ddr) and
  // the split of every call on its chunks (compiler_image.cpp).
  uint32_t gu_chunk() const;
  uint32_t gate_up_chunk_split() const;
  uint32_t gu_cw_ = 0;
  // The packings whose calls read them at a split other than the tiling rule's for their shape
  // (DdrTensor::split), recorded once the GEMM view has settled (compiler_image.cpp).
  void record_gemm_splits();
  uint32_t pm_npe_ = 0;
  uint32_t pm_pairs_ = 1;  // settle_pm_pairs
  uint32_t pm_tower_npe_ = 0;  // the tower's and mergers' chunks for this many PEs instead (0: pm_npe_)
  size_t pm_first_ = 0;
  bool pm_tower_only_ = false;
  bool pm_left_out_ = false;  // they did not fit beside the KV cache (plan_ddr)
  bool pm_kept_ = false;      // LayoutOnly::packings
  bool pm_down_ = false;      // the resident prefill's down chunk packings (L.dn{c}) too
  std::pair<std::string, uint32_t> lrm_short_;  // the GEMM weight needing the most LRM past lrm_bytes (add_weight)
  uint32_t lrm_even_ = 0;  // on an odd pe_cols, the most those weights would need with one column more
  void plan_decode_ocm();
  void load_image_weights(const QuantBundle& bundle, DdrWriter ddr) const;
  void load_vision_weights(const QuantBundle& bundle, DdrWriter ddr) const;  // (the tower's and mergers')
  void load_text_weights(const QuantBundle& bundle, DdrWriter ddr) const;    // (the prefill's)
  void put(DdrWriter ddr, const std::string& name, const std::vector<uint8_t>& bytes) const;
  // A quantised weight packed in its layout ("gemv" or "gemm", at the layout's split), with
  // its fp16 parts.
  void put_weight(DdrWriter ddr, const std::string& name, const QuantTensor& q) const;
  // The bundle's tensor `tensor` as put_weight packs it, its codes read in place from the
  // mapped file (QuantBundle::get_quant_mapped) instead of from a copy; returns the tensor
  // without its codes (scales, zeros, fp16 parts).
  QuantTensor put_bundle_weight(DdrWriter ddr, const std::string& name, const QuantBundle& bundle,
                                const std::string& tensor) const;
  void put_weight(DdrWriter ddr, const std::string& name, const QuantTensor& q, const kernels::W4Weights& w) const;
  // The image program; with `into`, emitted into *into and its calls appended to *calls:
  // image_program (the resident plan) then leaves out the halt and the finish (a resident
  // tower before a streamed prefill), image_streamed finishes the program.
  CompiledProgram image_program(const ImageShape& shape, kernels::Builder* into, std::vector<KernelCall>* calls) const;
  // Where the views differ: the vision part on the tower's view (vision_part), then the prefill
  // on this one's; they meet in DDR (act.img and the DeepStack rows). plan_only: the parts'
  // estimates added.
  CompiledProgram image_in_parts(const ImageShape& shape, kernels::Builder* into, std::vector<KernelCall>* calls) const;
  // The image program with activations streamed from DDR in row tiles (small OCM; image_streamed.cpp).
  CompiledProgram image_streamed(const ImageShape& shape, kernels::Builder* into = nullptr,
                                 std::vector<KernelCall>* calls = nullptr) const;

  ModelConfig model_;
  sim::Config cfg_;
  // The image GEMMs' view of the array (gemm_view): cfg_ with the rows they use; their
  // weights are packed for it.
  sim::Config gemm_cfg_;
  uint32_t tower_rows_ = 0;  // the vision part's view: its rows (settle_tower_view; 0: gemm_cfg_'s)
  bool vision_part_ = false;  // this is vision_part()'s copy
  bool parts_ = false;  // a program on one view in two parts (settle_parts)
  CompileOptions opt_;
  DdrLayout ddr_;
  DecodeIo dio_;
  ImageIo iio_;
  struct DecodeOcm {
    uint32_t h, xn, qkv, attn, o, gu, act, normw, finalw, attn_scratch, attn_scratch_bytes, norm_scratch,
        embed_scratch, gemv_scratch, gemv_scratch_bytes, f16xs, f16scr;
    uint32_t lm_cols;  // columns of an LM-head call (whole GEMV tiles); its two staging buffers at attn_scratch
  } docm_{};
};

// Text-layer linear names, in the order the fused decode weights concatenate them.
std::vector<std::string> qkv_names(int layer);
std::vector<std::string> gate_up_names(int layer);

}  // namespace gpnpu::model
