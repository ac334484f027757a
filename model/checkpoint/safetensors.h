// safetensors I/O: a memory-mapped reader, a streaming writer, and the checkpoint
// loader that checks a Qwen3-VL checkpoint against its config.
//
// File format (https://huggingface.co/docs/safetensors): 8-byte little-endian u64 N,
// then N bytes of JSON header {"__metadata__": {str: str}, NAME: {"dtype": "BF16",
// "shape": [..], "data_offsets": [begin, end]}, ...}, then the data section; offsets
// are bytes relative to the data section, little-endian, row-major, no padding.
//
// Contract:
//  - SafetensorsFile mmaps the file read-only and validates the whole header on open:
//    header length within the file, valid JSON, known dtype, offsets in range, end-begin
//    == numel*dtype_size, no two tensors overlapping. Each failure is a gpnpu::Error
//    with the file path, the tensor name and what to do. Views stay valid while the
//    SafetensorsFile (or the Checkpoint holding it) lives.
//  - SafetensorsWriter streams: the header (all names, dtypes, shapes) is fixed at
//    construction and written first; tensors are then written one at a time, in
//    declaration order, so a 4 GB file never sits in memory.
//    It writes PATH.tmp.PID and finish() renames it to PATH (isa/atomic_file.h): a
//    writer destroyed before finish() (an exception, a full disk) leaves no file.
//  - Checkpoint opens the Hugging Face directory layout (config.json plus either
//    model.safetensors or model-0000x-of-0000y.safetensors shards with
//    model.safetensors.index.json), or a single .safetensors file.
//  - Checkpoint::check(cfg) verifies every expected tensor (config.h expected_tensors):
//    missing (name), wrong shape (name, expected, got), wrong dtype (float checkpoints
//    must be BF16, F16 or F32). lm_head.weight is accepted if present.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "isa/atomic_file.h"
#include "model/checkpoint/config.h"

namespace gpnpu::model {

enum class DType : uint8_t { BF16, F16, F32, U8, I8, I32 };

const char* dtype_name(DType d);     // "BF16", "F16", ... as in the safetensors header
size_t dtype_size(DType d);          // bytes per element
// Parses a header dtype string; throws gpnpu::Error naming `where` on an unknown one.
DType parse_dtype(const std::string& s, const std::string& where);
std::string shape_str(const std::vector<int64_t>& shape);  // "[1024, 3, 2, 16, 16]"

// bfloat16 as uint16_t bits. f32_to_bf16 rounds to nearest, ties to even; NaN stays NaN.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);

// One tensor inside a mapped file. `data` points into the mapping (little-endian).
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file it lives in (for error messages)

  int64_t numel() const;
  // Converts BF16/F16/F32/U8/I8/I32 to float (integers exactly up to 2^24).
  std::vector<float> to_f32() const;
  void to_f32(float* out) const;  // out must hold numel() floats
  // The rule for weights and scales (docs/errors.md): a float tensor holding NaN or
  // Inf is refused when it is loaded, naming the file, the tensor and the element.
  // Integer dtypes always pass.
  void check_finite() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // mmaps and validates
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws gpnpu::Error naming the file if absent.
  const TensorView& get(const std::string& name) const;
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in data-offset order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t header_size() const { return header_len_; }  // JSON bytes (N)
  size_t file_size() const { return size_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  size_t header_len_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor declared to the writer before any data is written.
struct TensorDecl {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  size_t nbytes() const;
};

class SafetensorsWriter {
 public:
  // Opens `path` for writing and writes the 8-byte length and the JSON header (padded
  // with spaces to a multiple of 8). Tensors are laid out contiguously in `decls` order.
  SafetensorsWriter(const std::string& path, std::vector<TensorDecl> decls,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // closes without the completeness check (after an exception)
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Writes the next tensor's raw little-endian bytes. `name` must be the next declared
  // tensor and `nbytes` its size; otherwise gpnpu::Error.
  void write(const std::string& name, const void* data, size_t nbytes);
  // Convenience: converts floats to the declared dtype (BF16/F16/F32) and writes them.
  void write_f32(const std::string& name, const float* data, size_t count);
  // Writes the next tensor as `nbytes` bytes of data supplied in pieces: call
  // begin_tensor(name) then append() until exactly nbytes were given (checked at the
  // next begin_tensor/finish).
  void begin_tensor(const std::string& name);
  void append(const void* data, size_t nbytes);
  // Skips the data of every remaining tensor, leaving a sparse, zero-filled file of the
  // full size (ftruncate). Used by `make-checkpoint --no-data` to test the layout fast.
  void skip_rest();
  // Checks every tensor was written, flushes and closes; gpnpu::Error on I/O failure.
  void finish();

  const std::vector<TensorDecl>& decls() const { return decls_; }
  // The exact header bytes written (length prefix + JSON + padding).
  const std::string& header_bytes() const { return header_; }

 private:
  void close_current();
  std::string path_;
  AtomicFile out_;  // the temporary file f_ writes; renamed to path_ by finish()
  std::FILE* f_ = nullptr;
  std::vector<TensorDecl> decls_;
  std::string header_;
  size_t next_ = 0;        // index of the next tensor to begin
  bool open_tensor_ = false;
  size_t cur_written_ = 0; // bytes appended to the open tensor
  uint64_t data_size_ = 0; // total data bytes
  bool finished_ = false;
};

// A (possibly sharded) checkpoint: a directory with config.json and model.safetensors
// or model.safetensors.index.json + shards, or a single .safetensors file.
class Checkpoint {
 public:
  // Opens the files and reads config.json if present; throws gpnpu::Error naming the
  // path if the layout is not recognised (say which files were expected).
  static Checkpoint open(const std::string& path);

  const std::string& path() const { return path_; }
  bool has_config() const { return has_config_; }
  // The config from config.json; gpnpu::Error if there was none.
  const ModelConfig& config() const;
  bool has(const std::string& name) const;
  const TensorView& get(const std::string& name) const;  // gpnpu::Error if missing
  std::vector<float> get_f32(const std::string& name) const { return get(name).to_f32(); }
  std::vector<std::string> names() const;  // all tensors, sorted
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

  // Verifies every tensor of expected_tensors(cfg): present, exact shape, dtype in
  // {BF16, F16, F32}. The first problem is thrown as gpnpu::Error with file, tensor
  // name, expected vs got, and what to do. Extra tensors other than lm_head.weight
  // are reported too (a different model).
  void check(const ModelConfig& cfg) const;

 private:
  std::string path_;
  bool has_config_ = false;
  ModelConfig config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// Opens `path` with Checkpoint::open and checks it against its config.json (or, when
// `cfg` is given, against that config).
Checkpoint load_checkpoint(const std::string& path, const ModelConfig* cfg = nullptr);

}  // namespace gpnpu::model
