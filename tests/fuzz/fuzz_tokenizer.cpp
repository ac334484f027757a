// libFuzzer target: the Qwen3 tokenizer (model::Tokenizer) on arbitrary bytes.
// The first byte picks the mode: even = encode the rest as text, odd = decode the
// rest as little-endian int32 token ids.
// Properties: invalid UTF-8 and out-of-range ids are a gpnpu::Error; every id
// encode returns is in range; decode(encode(s)) is valid UTF-8 and is a fixed
// point (t = decode(encode(s)) gives decode(encode(t)) == t, NFC being idempotent).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "fuzz_util.h"
#include "isa/error.h"
#include "model/inputs/tokenizer.h"

using namespace gpnpu;

namespace {
std::unique_ptr<model::Tokenizer> tok;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tok = std::make_unique<model::Tokenizer>(model::Tokenizer::load(model::Tokenizer::default_path()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool decode_mode = data[0] & 1;
  ++data;
  --size;
  if (decode_mode) {
    std::vector<int> ids(size / 4);
    for (size_t k = 0; k < ids.size(); ++k) {
      int32_t v;
      std::memcpy(&v, data + 4 * k, 4);
      ids[k] = v;
    }
    try {
      (void)tok->decode(ids);
    } catch (const Error&) {
    }
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<int> ids;
  try {
    ids = tok->encode(text);
  } catch (const Error&) {
    return 0;  // invalid UTF-8
  }
  for (int id : ids) fuzz::check(id >= 0 && id < tok->vocab_size(), "encode returns ids in range");
  std::string t = tok->decode(ids);
  std::vector<int> ids2;
  try {
    ids2 = tok->encode(t);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz::check(false, "decode(encode(s)) is valid UTF-8");
  }
  fuzz::check(tok->decode(ids2) == t, "decode(encode(t)) == t for t = decode(encode(s))");
  return 0;
}
