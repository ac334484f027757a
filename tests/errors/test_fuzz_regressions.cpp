// Bugs the fuzz targets of tests/fuzz found, one test each, through the API the
// target drives. The inputs are also in tests/fuzz/corpus/TARGET/regress-*
// (replayed by ctest -L fuzz). Each says what used to happen.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>

#include "isa/error.h"
#include "isa/program.h"
#include "model/image.h"
#include "model/safetensors.h"

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
