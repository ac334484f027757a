// Bugs the fuzz targets of tests/fuzz found, one test each, through the API the
// target drives. The inputs are also in tests/fuzz/corpus/TARGET/regress-*
// (replayed by ctest -L fuzz). Each says what used to happen.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>

#include "isa/error.h"
#include "isa/program.h"
#include "model/inputs/image.h"
#include "model/checkpoint/safetensors.h"

namespace gpnpu::errors_test {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// fuzz_assembler: a mark name holding a '"' assembled, but its disassembly did not
// assemble again (the quote ended the string and the comment became an operand).
TEST(FuzzRegressions, MarkNameWithAQuoteIsRejected) {
  EXPECT_EQ(error_of([] { isa::assemble("mark.begin \"a\"b\"\nmark.end \"a\"b\"\nhalt\n", "q.s"); }),
            "q.s:1:12: a mark name cannot contain '\"'");
  EXPECT_EQ(error_of([] { isa::assemble(".name \"x\"y\"\n", "q.s"); }), "q.s:1:7: a mark name cannot contain '\"'");
  // Control: the same program with a plain name round-trips.
  isa::Program p = isa::assemble("mark.begin \"a b#c;d\"\nmark.end \"a b#c;d\"\nhalt\n", "ok.s");
  isa::Program q = isa::assemble(p.disassemble(), "dis.s");
  EXPECT_EQ(q.words, p.words);
  EXPECT_EQ(q.names, p.names);
}

// fuzz_assembler: `.equ O, 0xE0000000333*3333333` overflowed int64 in the
// expression evaluator (undefined behaviour; UBSan: signed integer overflow).
TEST(FuzzRegressions, ExpressionOverflowIsAnError) {
  EXPECT_EQ(error_of([] { isa::assemble(".equ O, 0xE0000000333*3333333\n", "o.s"); }),
            "o.s:1:9: '0xE0000000333*3333333' overflows 64-bit integer arithmetic");
  EXPECT_NE(error_of([] { isa::assemble(".equ P, 9223372036854775807+1\n", "o.s"); }).find("overflows"),
            std::string::npos);
  EXPECT_NE(error_of([] { isa::assemble(".equ M, -9223372036854775807-1\nli x1, -M\n", "o.s"); }).find("o.s:2:8: '-M' overflows"),
            std::string::npos);
  // Control: the largest values still evaluate.
  EXPECT_EQ(error_of([] { isa::assemble(".equ M, -9223372036854775807-1\n.equ N, 9223372036854775806+1\n", "o.s"); }),
            "");
}

// fuzz_image: a JPEG whose Huffman table (DHT) declares more than 256 codes made
// stb_image 2.27 write past stbi__huffman::size[257] (UBSan: index 257 out of
// bounds). load_image_rgb now rejects it before stb decodes.
TEST(FuzzRegressions, JpegHuffmanTableWithTooManyCodesIsRejected) {
  const std::string bad = std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/regress-jpeg-dht-over-256-codes.jpg";
  EXPECT_NE(error_of([&] { model::load_image_rgb(bad); })
                .find("is not a readable image (corrupt JPEG: a Huffman table declares 1357 codes, at most 256)"),
            std::string::npos)
      << error_of([&] { model::load_image_rgb(bad); });
  // The same table behind 32 leading 0xFF fill bytes (stb skips them before SOI).
  const std::string fill = std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/regress-jpeg-dht-after-fill-bytes.jpg";
  EXPECT_NE(error_of([&] { model::load_image_rgb(fill); }).find("a Huffman table declares 957 codes"), std::string::npos)
      << error_of([&] { model::load_image_rgb(fill); });
  // A progressive scan decoding with AC table 1 before the DHT that defines it:
  // stb read the uninitialised table out of bounds (UBSan: index 18, maxcode[18]).
  const std::string undef = std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/regress-jpeg-scan-uses-undefined-table.jpg";
  EXPECT_NE(error_of([&] { model::load_image_rgb(undef); }).find("a scan uses AC Huffman table 1 before it is defined"),
            std::string::npos)
      << error_of([&] { model::load_image_rgb(undef); });
  // Control: a valid JPEG (and a progressive one, with tables between scans) loads.
  EXPECT_EQ(model::load_image_rgb(std::string(GPNPU_SOURCE_DIR) + "/tests/model/data/image_jpeg_64.jpg").width, 64);
  EXPECT_EQ(model::load_image_rgb(std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/progressive_32x40.jpg").height,
            40);
  // Only PNG and JPEG are decoded (stb's other decoders are compiled out).
  EXPECT_NE(error_of([] { model::load_image_rgb(std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/tiny_4.bmp"); })
                .find("is not a readable image"),
            std::string::npos);
}

// fuzz_image: 1.4 KB of JPEG declaring 2368x5632 px took 8 s of CPU to decode under
// the fuzzing instrumentation (a libFuzzer timeout); the same header declaring
// 16000x16000 px took minutes and 2 GB. The loader now refuses a header declaring
// more than PIL's 89.5 Mpx decompression-bomb limit before decoding anything.
TEST(FuzzRegressions, ImageDeclaringTooManyPixelsIsRefusedUndecoded) {
  const std::string dir = std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/";
  const std::string bomb = dir + "regress-jpeg-declares-16000x16000.jpg";
  EXPECT_EQ(error_of([&] { model::load_image_rgb(bomb); }),
            "image '" + bomb + "' declares 16000x16000 px (WxH) = 256.0 Mpx, more than the 89.5 Mpx this tool decodes "
            "(PIL's decompression-bomb limit); downscale it first");
  // Control: the 13 Mpx header is under the limit (the loader decodes it; the fuzz
  // target skips decoding it: over its 0.5 Mpx budget).
  std::string bytes;
  {
    std::FILE* f = std::fopen((dir + "regress-jpeg-13mpx-timeout.jpg").c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);
    std::fclose(f);
  }
  int w = 0, h = 0;
  ASSERT_TRUE(model::image_header_size(bytes, w, h));
  EXPECT_EQ(w, 2368);
  EXPECT_EQ(h, 5632);
  EXPECT_LE(int64_t(w) * h, model::kMaxImagePixels);
  EXPECT_FALSE(model::image_header_size("not an image", w, h));
}

// fuzz_image: image_header_size (stbi_info) parsed a DHT declaring more than 256
// codes before any check (UBSan: index 257 out of bounds in stbi__build_huffman).
// It now applies load_image_rgb's JPEG table checks first.
TEST(FuzzRegressions, ImageHeaderSizeChecksTheJpegTablesFirst) {
  const std::string bad =
      std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/regress-jpeg-header-size-dht-over-256-codes.jpg";
  std::string bytes;
  {
    std::FILE* f = std::fopen(bad.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);
    std::fclose(f);
  }
  int w = -1, h = -1;
  EXPECT_FALSE(model::image_header_size(bytes, w, h));
  EXPECT_NE(error_of([&] { model::load_image_rgb(bad); }).find("a Huffman table declares"), std::string::npos)
      << error_of([&] { model::load_image_rgb(bad); });
}

// fuzz_image: a PNG whose first IDAT chunk is empty made stb_image 2.27 call
// memcpy(NULL, src, 0) (UBSan: null pointer passed as argument 1). Empty IDAT
// chunks (no image data) are now dropped before stb reads the file.
TEST(FuzzRegressions, PngWithAnEmptyIdatChunkLoads) {
  const std::string dir = std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/";
  // The fuzzer's input: the rest of it is corrupt, a clean error.
  EXPECT_NE(error_of([&] { model::load_image_rgb(dir + "regress-png-empty-idat-first.png"); }).find("is not a readable image"),
            std::string::npos)
      << error_of([&] { model::load_image_rgb(dir + "regress-png-empty-idat-first.png"); });
  // A valid PNG with an empty IDAT chunk inserted before its data decodes to the
  // same pixels (the PNG format allows empty IDAT chunks).
  std::string png;
  {
    std::FILE* f = std::fopen((dir + "rgb_32.png").c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) png.append(buf, n);
    std::fclose(f);
  }
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  // length 0, "IDAT", CRC-32 of "IDAT" (0x35AF061E)
  std::string with_empty = png;
  with_empty.insert(idat - 4, std::string("\0\0\0\0IDAT\x35\xAF\x06\x1E", 12));
  const std::string path = ::testing::TempDir() + "/gpnpu_empty_idat.png";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(with_empty.data(), 1, with_empty.size(), f);
    std::fclose(f);
  }
  const model::RgbImage a = model::load_image_rgb(dir + "rgb_32.png"), b = model::load_image_rgb(path);
  EXPECT_EQ(b.width, a.width);
  EXPECT_EQ(b.height, a.height);
  EXPECT_EQ(b.rgb, a.rgb);
  std::remove(path.c_str());
}

// fuzz_image: 205 bytes of PNG whose second IDAT chunk declares 1224736836 bytes
// made stb_image 2.27 grow its buffer to 2 GiB before finding the data missing
// (libFuzzer: out-of-memory, malloc(2147483648)). A chunk running past the end of
// the file is now an error before stb reads it.
TEST(FuzzRegressions, PngChunkLongerThanTheFileIsRejected) {
  const std::string bad = std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/image/regress-png-idat-longer-than-file.png";
  EXPECT_EQ(error_of([&] { model::load_image_rgb(bad); }),
            "'" + bad + "' is not a readable image (corrupt PNG: chunk 'IDAT' at byte 113 declares 1224736836 bytes, the "
            "file has 80 left): give a PNG or JPEG file");
}

// fuzz_binary: a binary with no instructions passed a null pointer to memcpy
// (UBSan: null pointer passed as argument 1). It now reads as an empty program.
TEST(FuzzRegressions, EmptyProgramBinaryReads) {
  const std::string path = std::string(::testing::TempDir()) + "/gpnpu_empty_program.bin";
  isa::Program empty;
  empty.write_binary(path);
  isa::Program p = isa::Program::read_binary(path);
  EXPECT_TRUE(p.words.empty());
  EXPECT_TRUE(p.names.empty());
  std::remove(path.c_str());
  // The fuzzer's input: the same header with trailing bytes.
  EXPECT_NE(error_of([] {
              isa::Program::read_binary(std::string(GPNPU_SOURCE_DIR) +
                                        "/tests/fuzz/corpus/binary/regress-empty-program-memcpy-null.bin");
            }).find("unexpected trailing bytes"),
            std::string::npos);
}

// Safetensors: a __metadata__ value nested 200000 deep overflowed the stack (the
// reader dumped non-string values to text, recursively). Found reviewing the
// reader while fuzzing, reproduced with fuzz_safetensors (ASan: stack-overflow in
// nlohmann's serializer). Non-string metadata values are now an error.
TEST(FuzzRegressions, DeeplyNestedSafetensorsMetadataIsRejected) {
  const std::string path = std::string(::testing::TempDir()) + "/gpnpu_deep_meta.safetensors";
  auto write = [&](const std::string& header) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, 8, f);
    std::fwrite(header.data(), 1, header.size(), f);
    std::fclose(f);
  };
  const size_t depth = 200000;
  write("{\"__metadata__\":{\"a\":" + std::string(depth, '[') + std::string(depth, ']') + "}}");
  EXPECT_NE(error_of([&] { model::SafetensorsFile f(path); })
                .find("corrupt safetensors header: __metadata__ value of 'a' is a array, not a string"),
            std::string::npos)
      << error_of([&] { model::SafetensorsFile f(path); });
  // Control: string metadata reads back.
  write("{\"__metadata__\":{\"a\":\"b\"}}");
  model::SafetensorsFile ok(path);
  EXPECT_EQ(ok.metadata().at("a"), "b");
  std::remove(path.c_str());
}

// fuzz_binary: a binary naming the same mark twice read fine, but its disassembly
// (one .name per entry, interned) renumbered the marks, so it did not reassemble
// to the same words. The reader now rejects repeated names.
TEST(FuzzRegressions, RepeatedMarkNameInABinaryIsRejected) {
  const std::string e = error_of([] {
    isa::Program::read_binary(std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/binary/regress-duplicate-mark-names.bin");
  });
  EXPECT_NE(e.find("is corrupt: mark name 2"), std::string::npos) << e;
  EXPECT_NE(e.find("repeats name"), std::string::npos) << e;
}

// fuzz_safetensors: a header number too large for a double made nlohmann::json
// throw out_of_range, not parse_error; nothing caught it (std::terminate).
TEST(FuzzRegressions, SafetensorsHeaderNumberOverflowIsAnError) {
  const std::string path =
      std::string(GPNPU_SOURCE_DIR) + "/tests/fuzz/corpus/safetensors/regress-json-number-overflow.safetensors";
  const std::string e = error_of([&] { model::SafetensorsFile f(path); });
  EXPECT_NE(e.find("corrupt safetensors header"), std::string::npos) << e;
  EXPECT_NE(e.find("number overflow"), std::string::npos) << e;
}

}  // namespace
}  // namespace gpnpu::errors_test
