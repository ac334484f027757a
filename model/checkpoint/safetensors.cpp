// safetensors reader (mmap), streaming writer and checkpoint loader. See safetensors.h.
#include "model/checkpoint/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "isa/io_rules.h"
#include "isa/fp16.h"

namespace gpnpu::model {

namespace fs = std::filesystem;
using nlohmann::json;

// Header JSON larger than this is surely corrupt (real headers are ~100 KB).
static constexpr uint64_t kMaxHeader = uint64_t(100) << 20;

const char* dtype_name(DType d) {
  switch (d) {
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F32: return "F32";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::BF16:
    case DType::F16: return 2;
    case DType::F32:
    case DType::I32: return 4;
    case DType::U8:
    case DType::I8: return 1;
  }
  return 0;
}

DType parse_dtype(const std::string& s, const std::string& where) {
  if (s == "BF16") return DType::BF16;
  if (s == "F16") return DType::F16;
  if (s == "F32") return DType::F32;
  if (s == "U8") return DType::U8;
  if (s == "I8") return DType::I8;
  if (s == "I32") return DType::I32;
  fail("{}: unsupported dtype '{}' (supported: BF16, F16, F32, U8, I8, I32); convert the checkpoint to bf16", where, s);
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fffu + lsb;  // round to nearest even; overflow carries into inf correctly
  return uint16_t(x >> 16);
}

float bf16_to_f32(uint16_t b) { return bits_to_f32(uint32_t(b) << 16); }

// ---- TensorView ---------------------------------------------------------------------

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> TensorView::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  to_f32(out.data());
  return out;
}

void TensorView::to_f32(float* out) const {
  const size_t n = size_t(numel());
  switch (dtype) {
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, data + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
      break;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, data + 2 * i, 2);
        out[i] = f16_to_f32(b);
      }
      break;
    case DType::F32: std::memcpy(out, data, n * 4); break;
    case DType::U8:
      for (size_t i = 0; i < n; ++i) out[i] = float(data[i]);
      break;
    case DType::I8:
      for (size_t i = 0; i < n; ++i) out[i] = float(int8_t(data[i]));
      break;
    case DType::I32:
      for (size_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, data + 4 * i, 4);
        out[i] = float(v);
      }
      break;
  }
}

void TensorView::check_finite() const {
  const size_t n = size_t(numel());
  auto bad = [&](size_t i, const char* what) {
    fail("{}: tensor '{}' holds {} at element {} (of {}): NaN and Inf weights and scales are refused; the file is "
         "corrupt: regenerate it (gpnpu make-checkpoint / gpnpu quantize)",
         file, name, what, i, n);
  };
  for (size_t i = 0; i < n; ++i) {
    uint32_t exp_all = 0, mant = 0;
    if (dtype == DType::F32) {
      uint32_t b;
      std::memcpy(&b, data + 4 * i, 4);
      exp_all = (b & 0x7f800000u) == 0x7f800000u, mant = b & 0x007fffffu;
    } else if (dtype == DType::BF16 || dtype == DType::F16) {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      const uint16_t em = dtype == DType::BF16 ? 0x7f80 : 0x7c00;
      exp_all = (h & em) == em, mant = h & uint16_t(~em & 0x7fff);
    } else {
      return;
    }
    if (exp_all) bad(i, mant ? "NaN" : "Inf");
  }
}

// ---- SafetensorsFile ----------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  io::check_input(path, "safetensors file", uint64_t(1) << 40);  // mapped, not read: any size a disk holds
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open safetensors file: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  size_ = size_t(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("{}: truncated safetensors file: {} bytes, shorter than the 8-byte header length; re-download or regenerate it",
         path, size_);
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("{}: mmap failed: {}", path, std::strerror(e));
  }
  try {
    const uint8_t* base = static_cast<const uint8_t*>(map_);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(base[i]) << (8 * i);
    if (n > size_ - 8 || n > kMaxHeader)
      fail("{}: truncated or corrupt safetensors file: header length {} bytes but the file has {} bytes after the "
           "8-byte prefix; re-download or regenerate it",
           path, n, size_ - 8);
    header_len_ = size_t(n);
    const char* hb = reinterpret_cast<const char*>(base + 8);
    json j;
    try {
      j = json::parse(hb, hb + n);
    } catch (const json::parse_error& ex) {
      fail("{}: corrupt safetensors header: invalid JSON at byte {} of the {}-byte header ({}); the file is damaged, "
           "re-download or regenerate it",
           path, ex.byte, n, ex.what());
    } catch (const json::exception& ex) {  // not only parse_error: a number too large throws out_of_range (fuzz_safetensors)
      fail("{}: corrupt safetensors header: {}; the file is damaged, re-download or regenerate it", path, ex.what());
    }
    if (!j.is_object()) fail("{}: corrupt safetensors header: expected a JSON object, got {}", path, j.type_name());
    const uint8_t* data0 = base + 8 + n;
    const uint64_t data_size = size_ - 8 - n;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& name = it.key();
      const json& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) fail("{}: corrupt safetensors header: __metadata__ must be an object", path);
        // Strings only, as the format says (and HF's reader requires): dumping a
        // nested value recursed once per level, so a deeply nested one overflowed
        // the stack (reproduced with tests/fuzz/fuzz_safetensors).
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string())
            fail("{}: corrupt safetensors header: __metadata__ value of '{}' is a {}, not a string; the file is "
                 "damaged, re-download or regenerate it",
                 path, m.key(), m.value().type_name());
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      auto bad = [&](const std::string& what) {
        fail("{}: corrupt safetensors header: tensor '{}': {}; the file is damaged, re-download or regenerate it", path,
             name, what);
      };
      if (!v.is_object()) bad("entry is not an object");
      if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing or non-string 'dtype'");
      if (!v.contains("shape") || !v["shape"].is_array()) bad("missing or non-list 'shape'");
      if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
        bad("missing 'data_offsets' [begin, end]");
      TensorView t;
      t.name = name;
      t.file = path;
      t.dtype = parse_dtype(v["dtype"].get<std::string>(), fmt::format("{}: tensor '{}'", path, name));
      uint64_t numel = 1;
      for (const auto& d : v["shape"]) {
        if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
          bad(fmt::format("shape entry {} is not a non-negative integer", d.dump()));
        uint64_t dv = d.get<uint64_t>();
        if (dv > (uint64_t(1) << 40) || (dv && numel > (uint64_t(1) << 40) / dv)) bad("shape too large");
        numel *= dv;
        t.shape.push_back(int64_t(dv));
      }
      const json& off = v["data_offsets"];
      for (const auto& o : off)
        if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
          bad(fmt::format("data_offsets entry {} is not a non-negative integer", o.dump()));
      uint64_t b = off[0].get<uint64_t>(), e2 = off[1].get<uint64_t>();
      if (e2 < b) bad(fmt::format("data_offsets [{}, {}] end before begin", b, e2));
      if (e2 > data_size)
        fail("{}: truncated safetensors file: tensor '{}' data_offsets [{}, {}] run past the {}-byte data section "
             "(file {} bytes); re-download or regenerate it",
             path, name, b, e2, data_size, size_);
      uint64_t want = numel * dtype_size(t.dtype);
      if (e2 - b != want)
        bad(fmt::format("data_offsets [{}, {}] hold {} bytes but {} {} needs {}", b, e2, e2 - b,
                        dtype_name(t.dtype), shape_str(t.shape), want));
      t.data = data0 + b;
      t.nbytes = size_t(want);
      tensors_.push_back(std::move(t));
    }
    std::sort(tensors_.begin(), tensors_.end(),
              [&](const TensorView& a, const TensorView& b2) { return a.data < b2.data || (a.data == b2.data && a.nbytes < b2.nbytes); });
    for (size_t i = 1; i < tensors_.size(); ++i) {
      const TensorView& p = tensors_[i - 1];
      const TensorView& c = tensors_[i];
      if (c.data < p.data + p.nbytes)
        fail("{}: corrupt safetensors header: tensors '{}' and '{}' overlap (data_offsets [{}, {}] and [{}, {}]); the "
             "file is damaged, re-download or regenerate it",
             path, p.name, c.name, p.data - data0, p.data - data0 + p.nbytes, c.data - data0,
             c.data - data0 + c.nbytes);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: missing tensor '{}'", path_, name);
  return tensors_[it->second];
}

// ---- SafetensorsWriter --------------------------------------------------------------

size_t TensorDecl::nbytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorDecl> decls,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), out_(path), decls_(std::move(decls)) {
  // nlohmann::ordered_json keeps declaration order, so the header reads like the data.
  nlohmann::ordered_json h;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t off = 0;
  for (const auto& d : decls_) {
    if (h.contains(d.name)) fail("{}: tensor '{}' declared twice", path, d.name);
    uint64_t n = d.nbytes();
    h[d.name] = {{"dtype", dtype_name(d.dtype)}, {"shape", d.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  data_size_ = off;
  std::string js = h.dump();
  while (js.size() % 8) js.push_back(' ');
  header_.resize(8);
  uint64_t n = js.size();
  for (int i = 0; i < 8; ++i) header_[size_t(i)] = char((n >> (8 * i)) & 0xff);
  header_ += js;
  f_ = std::fopen(out_.temp().c_str(), "wb");
  if (!f_) fail("{}: cannot create the output file: {}", path, std::strerror(errno));
  if (std::fwrite(header_.data(), 1, header_.size(), f_) != header_.size()) {
    int e = errno;
    std::fclose(f_);  // the destructor does not run after a throwing constructor
    f_ = nullptr;
    fail("{}: write failed (disk full?): {}", path, std::strerror(e));
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_) std::fclose(f_);
}

void SafetensorsWriter::close_current() {
  if (!open_tensor_) return;
  const TensorDecl& d = decls_[next_ - 1];
  if (cur_written_ != d.nbytes())
    fail("{}: tensor '{}' got {} bytes, declared {} {} needs {}", path_, d.name, cur_written_, dtype_name(d.dtype),
         shape_str(d.shape), d.nbytes());
  open_tensor_ = false;
}

void SafetensorsWriter::begin_tensor(const std::string& name) {
  close_current();
  if (next_ >= decls_.size()) fail("{}: tensor '{}' written but all {} declared tensors are done", path_, name, decls_.size());
  if (decls_[next_].name != name)
    fail("{}: tensor '{}' written out of order; the next declared tensor is '{}'", path_, name, decls_[next_].name);
  ++next_;
  open_tensor_ = true;
  cur_written_ = 0;
}

void SafetensorsWriter::append(const void* data, size_t nbytes) {
  if (!open_tensor_) fail("{}: append() without begin_tensor()", path_);
  const TensorDecl& d = decls_[next_ - 1];
  if (cur_written_ + nbytes > d.nbytes())
    fail("{}: tensor '{}' given more than its {} bytes", path_, d.name, d.nbytes());
  if (nbytes && std::fwrite(data, 1, nbytes, f_) != nbytes)
    fail("{}: write failed (disk full?) in tensor '{}': {}", path_, d.name, std::strerror(errno));
  cur_written_ += nbytes;
}

void SafetensorsWriter::write(const std::string& name, const void* data, size_t nbytes) {
  begin_tensor(name);
  append(data, nbytes);
  close_current();
}

void SafetensorsWriter::write_f32(const std::string& name, const float* data, size_t count) {
  if (next_ >= decls_.size() || decls_[next_].name != name) {
    begin_tensor(name);  // throws the ordering error
  }
  const TensorDecl& d = decls_[next_];
  size_t want = d.nbytes() / dtype_size(d.dtype);
  if (count != want) fail("{}: tensor '{}' given {} values, {} needs {}", path_, name, count, shape_str(d.shape), want);
  begin_tensor(name);
  constexpr size_t kChunk = 1 << 16;
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < count; i += kChunk) {
    size_t m = std::min(kChunk, count - i);
    switch (d.dtype) {
      case DType::F32: append(data + i, m * 4); continue;
      case DType::BF16:
        buf.resize(m * 2);
        for (size_t k = 0; k < m; ++k) {
          uint16_t b = f32_to_bf16(data[i + k]);
          std::memcpy(&buf[2 * k], &b, 2);
        }
        break;
      case DType::F16:
        buf.resize(m * 2);
        for (size_t k = 0; k < m; ++k) {
          uint16_t b = f32_to_f16(data[i + k]);
          std::memcpy(&buf[2 * k], &b, 2);
        }
        break;
      default: fail("{}: write_f32 for tensor '{}' of integer dtype {}", path_, name, dtype_name(d.dtype));
    }
    append(buf.data(), buf.size());
  }
  close_current();
}

void SafetensorsWriter::skip_rest() {
  close_current();
  next_ = decls_.size();
  if (std::fflush(f_) != 0) fail("{}: flush failed: {}", path_, std::strerror(errno));
  if (::ftruncate(fileno(f_), off_t(header_.size() + data_size_)) != 0)
    fail("{}: cannot extend the file to {} bytes: {}", path_, header_.size() + data_size_, std::strerror(errno));
  if (std::fseek(f_, 0, SEEK_END) != 0) fail("{}: seek failed", path_);
}

void SafetensorsWriter::finish() {
  if (finished_) return;
  close_current();
  if (next_ != decls_.size())
    fail("{}: only {} of {} declared tensors were written (next: '{}')", path_, next_, decls_.size(),
         decls_[next_].name);
  if (std::fflush(f_) != 0 || std::ferror(f_)) fail("{}: write failed (disk full?): {}", path_, std::strerror(errno));
  int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) fail("{}: close failed: {}", path_, std::strerror(errno));
  out_.commit();  // the complete file appears under its name only now
  finished_ = true;
}

// ---- Checkpoint ---------------------------------------------------------------------

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint ck;
  ck.path_ = path;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    fs::path dir(path);
    fs::path cfg = dir / "config.json";
    if (fs::exists(cfg)) {
      ck.config_ = ModelConfig::from_json_file(cfg.string());
      ck.has_config_ = true;
    }
    fs::path single = dir / "model.safetensors";
    fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(single)) {
      files.push_back(single.string());
    } else if (fs::exists(index)) {
      const std::string text = io::read_input(index.string(), "shard index", 256 * io::kMiB);
      json j;
      try {
        j = json::parse(text);
      } catch (const json::parse_error& e) {
        fail("{}: invalid JSON at byte {} in the shard index; re-download model.safetensors.index.json", index.string(),
             e.byte);
      } catch (const json::exception& e) {  // e.g. a number too large (out_of_range)
        fail("{}: invalid shard index ({}); re-download model.safetensors.index.json", index.string(), e.what());
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        fail("{}: missing 'weight_map' in the shard index", index.string());
      std::vector<std::string> shards;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string()) fail("{}: weight_map['{}'] is not a file name", index.string(), it.key());
        std::string s = it.value().get<std::string>();
        if (std::find(shards.begin(), shards.end(), s) == shards.end()) shards.push_back(s);
      }
      std::sort(shards.begin(), shards.end());
      for (const auto& s : shards) {
        fs::path p = dir / s;
        if (!fs::exists(p))
          fail("{}: shard '{}' listed in model.safetensors.index.json is missing; download every "
               "model-0000x-of-0000y.safetensors file",
               path, s);
        files.push_back(p.string());
      }
      // The index maps each tensor to its shard; checked after opening below.
      for (const auto& f : files) ck.files_.push_back(std::make_shared<SafetensorsFile>(f));
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        const std::string fn = (dir / it.value().get<std::string>()).string();
        bool found = false;
        for (const auto& f : ck.files_)
          if (f->path() == fn && f->has(it.key())) found = true;
        if (!found)
          fail("{}: missing tensor '{}': model.safetensors.index.json puts it in '{}' but that shard does not hold it; "
               "the download is incomplete",
               path, it.key(), it.value().get<std::string>());
      }
      files.clear();
    } else {
      fail("{}: not a checkpoint directory: expected model.safetensors or model.safetensors.index.json (with "
           "model-0000x-of-0000y.safetensors shards) next to config.json",
           path);
    }
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
    fs::path cfg = fs::path(path).parent_path() / "config.json";
    if (fs::exists(cfg)) {
      ck.config_ = ModelConfig::from_json_file(cfg.string());
      ck.has_config_ = true;
    }
  } else {
    if (fs::exists(path, ec))
      fail("checkpoint '{}' is {}, not a checkpoint directory or a .safetensors file", path, io::file_kind(path));
    fail("{}: no such checkpoint (expected a directory with config.json and model.safetensors, or a .safetensors file)",
         path);
  }
  for (const auto& f : files) ck.files_.push_back(std::make_shared<SafetensorsFile>(f));
  for (const auto& f : ck.files_) {
    for (const auto& t : f->tensors()) {
      auto [it, inserted] = ck.index_.emplace(t.name, &t);
      if (!inserted)
        fail("{}: tensor '{}' appears in two files ({} and {}); the shards are inconsistent", path, t.name,
             it->second->file, t.file);
    }
  }
  return ck;
}

const ModelConfig& Checkpoint::config() const {
  if (!has_config_)
    fail("{}: no config.json beside the checkpoint; put the model's config.json there or pass --config", path_);
  return config_;
}

bool Checkpoint::has(const std::string& name) const { return index_.count(name) != 0; }

const TensorView& Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    fail("{}: missing tensor '{}'; the checkpoint does not match the model (wrong model or incomplete download)", path_,
         name);
  return *it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : index_) out.push_back(k);
  return out;
}

void Checkpoint::check(const ModelConfig& cfg) const {
  auto specs = expected_tensors(cfg);
  std::map<std::string, const TensorSpec*> want;
  for (const auto& s : specs) want[s.name] = &s;
  for (const auto& s : specs) {
    auto it = index_.find(s.name);
    if (it == index_.end())
      fail("{}: missing tensor '{}' (expected shape {}); the checkpoint does not match the config (wrong model size, "
           "or an incomplete download)",
           path_, s.name, shape_str(s.shape));
    const TensorView& t = *it->second;
    if (t.shape != s.shape)
      fail("{}: wrong shape for tensor '{}': expected {}, got {}; the checkpoint was made for a different config "
           "(check config.json)",
           t.file, s.name, shape_str(s.shape), shape_str(t.shape));
    if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
      fail("{}: wrong dtype for tensor '{}': expected BF16, F16 or F32, got {}; use the original float checkpoint "
           "(quantised bundles are read with QuantBundle)",
           t.file, s.name, dtype_name(t.dtype));
  }
  for (const auto& [name, t] : index_) {
    if (want.count(name)) continue;
    if (name == kLmHead) {
      std::vector<int64_t> es = {cfg.text.vocab_size, cfg.text.hidden_size};
      if (t->shape != es)
        fail("{}: wrong shape for tensor '{}': expected {}, got {}", t->file, name, shape_str(es), shape_str(t->shape));
      continue;
    }
    fail("{}: unexpected tensor '{}' {}; the checkpoint holds a different model than the config describes", t->file,
         name, shape_str(t->shape));
  }
}

Checkpoint load_checkpoint(const std::string& path, const ModelConfig* cfg) {
  Checkpoint ck = Checkpoint::open(path);
  ck.check(cfg ? *cfg : ck.config());
  return ck;
}

}  // namespace gpnpu::model
