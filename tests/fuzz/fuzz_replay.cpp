// fuzz_replay: runs files through the fuzz targets without libFuzzer, so every
// build (gcc, ASan/UBSan) checks the committed corpora and crash reproducers:
//   fuzz_replay TARGET FILE_OR_DIR...
// Each target's LLVMFuzzerTestOneInput is compiled under the name
// gpnpu_fuzz_one_TARGET (see tests/fuzz/CMakeLists.txt). Exit 0 when every
// input ran; a broken property aborts, naming the input on stderr first.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#define GPNPU_FUZZ_TARGET(t) int gpnpu_fuzz_one_##t(const uint8_t*, size_t);
GPNPU_FUZZ_TARGET(assembler)
GPNPU_FUZZ_TARGET(binary)
GPNPU_FUZZ_TARGET(safetensors)
GPNPU_FUZZ_TARGET(tokenizer)
GPNPU_FUZZ_TARGET(image)
GPNPU_FUZZ_TARGET(config)
#undef GPNPU_FUZZ_TARGET
int gpnpu_fuzz_init_tokenizer(int*, char***);
}

namespace {

struct Target {
  const char* name;
  int (*one)(const uint8_t*, size_t);
  int (*init)(int*, char***);
};

const Target kTargets[] = {
    {"assembler", gpnpu_fuzz_one_assembler, nullptr},
    {"binary", gpnpu_fuzz_one_binary, nullptr},
    {"safetensors", gpnpu_fuzz_one_safetensors, nullptr},
    {"tokenizer", gpnpu_fuzz_one_tokenizer, gpnpu_fuzz_init_tokenizer},
    {"image", gpnpu_fuzz_one_image, nullptr},
    {"config", gpnpu_fuzz_one_config, nullptr},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay TARGET FILE_OR_DIR...\n");
    return 2;
  }
  const Target* t = nullptr;
  for (const Target& k : kTargets)
    if (std::strcmp(k.name, argv[1]) == 0) t = &k;
  if (!t) {
    std::fprintf(stderr, "fuzz_replay: unknown target '%s'\n", argv[1]);
    return 2;
  }
  std::vector<std::filesystem::path> files;
  for (int k = 2; k < argc; ++k) {
    std::filesystem::path p = argv[k];
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (std::filesystem::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz_replay: no file or directory '%s'\n", argv[k]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: no inputs for '%s'\n", t->name);
    return 2;
  }
  std::sort(files.begin(), files.end());
  if (t->init) t->init(&argc, &argv);
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "fuzz_replay %s: %s (%zu bytes)\n", t->name, f.c_str(), data.size());
    t->one(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::printf("fuzz_replay %s: %zu inputs ran\n", t->name, files.size());
  return 0;
}
