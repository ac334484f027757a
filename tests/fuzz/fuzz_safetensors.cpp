// libFuzzer target: the safetensors reader (model::SafetensorsFile) on arbitrary
// bytes. Property: a bad file is a gpnpu::Error; a file that opens has tensors
// whose views lie inside the file, do not overlap and convert to float.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "isa/error.h"
#include "model/checkpoint/safetensors.h"

using namespace gpnpu;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::scratch_path("safetensors", ".safetensors");
  fuzz::write_bytes(path, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    model::SafetensorsFile f(path);
    const uint8_t* prev_end = nullptr;
    for (const model::TensorView& t : f.tensors()) {
      fuzz::check(t.nbytes == size_t(t.numel()) * model::dtype_size(t.dtype), "nbytes == numel * dtype size");
      fuzz::check(prev_end == nullptr || t.data >= prev_end, "tensors do not overlap");
      prev_end = t.data + t.nbytes;
      fuzz::check(f.get(t.name).data == t.data, "get(name) finds every tensor");
      if (t.numel() <= (1 << 20)) {
        std::vector<float> v = t.to_f32();  // touches every byte of the view (ASan checks the bounds)
        fuzz::check(v.size() == size_t(t.numel()), "to_f32 size");
      }
    }
    (void)model::shape_str({});
  } catch (const Error&) {
  }
  return 0;
}
