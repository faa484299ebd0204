//===- TokenDataTest.cpp - token files and the batch sampler --------------===//

#include "lamina/Runtime/TokenData.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

using namespace lamina::rt;

namespace {

class TokenDataTest : public test::TempDirTest {
protected:
  std::string write(const std::string &name, const void *data, size_t n) {
    std::string path = dir + "/" + name;
    FILE *f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(std::fwrite(data, 1, n, f), n);
    std::fclose(f);
    return path;
  }
  template <typename T> std::string write(const std::vector<T> &ids) {
    return write(sizeof(T) == 2 ? "u16.bin" : "u32.bin", ids.data(),
                 ids.size() * sizeof(T));
  }
};

/// Batches as i64 or i32 tensors.
struct Batch {
  std::vector<int64_t> shape;
  std::vector<int64_t> in, lab;
  std::vector<int32_t> in32, lab32;
  Batch(int64_t b, int64_t s) : shape{b, s}, in(b * s), lab(b * s),
                                in32(b * s), lab32(b * s) {}
  Tensor inputs(bool i32) {
    return i32 ? Tensor{in32.data(), DType::I32, 2, shape.data()}
               : Tensor{in.data(), DType::I64, 2, shape.data()};
  }
  Tensor labels(bool i32) {
    return i32 ? Tensor{lab32.data(), DType::I32, 2, shape.data()}
               : Tensor{lab.data(), DType::I64, 2, shape.data()};
  }
};

TEST(SplitMix64Test, KnownSequence) {
  // The reference outputs of splitmix64.c for seed 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.next(), 0x06C45D188009454Full);
  for (int i = 0; i < 1000; ++i)
    EXPECT_LT(rng.below(7), 7u);
}

TEST_F(TokenDataTest, U16WindowsAndShiftedLabels) {
  // Token i has id i % 50, so a window is identified by its first id and
  // every label is the next input.
  std::vector<uint16_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = uint16_t(i % 50);
  TokenData data;
  ASSERT_TRUE(data.open(write(ids), DType::U16).ok());
  EXPECT_EQ(data.numTokens(), 1000);
  SplitMix64 rng(42);
  Batch batch(4, 16);
  Status s = data.sample(rng, 50, batch.inputs(false), batch.labels(false));
  ASSERT_TRUE(s.ok()) << s.message();
  for (int b = 0; b < 4; ++b)
    for (int j = 0; j < 16; ++j) {
      int64_t x = batch.in[b * 16 + j];
      EXPECT_EQ(batch.lab[b * 16 + j], (x + 1) % 50);
      if (j > 0) {
        EXPECT_EQ(x, batch.lab[b * 16 + j - 1]);
      }
    }
}

TEST_F(TokenDataTest, U32AndI32AreDeterministicBySeed) {
  std::vector<uint32_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = uint32_t((i * 7919) % 100000);
  TokenData data;
  ASSERT_TRUE(data.open(write(ids), DType::U32).ok());
  auto draw = [&](uint64_t seed, bool i32) {
    SplitMix64 rng(seed);
    Batch batch(8, 32);
    Status s = data.sample(rng, 100000, batch.inputs(i32), batch.labels(i32));
    EXPECT_TRUE(s.ok()) << s.message();
    std::vector<int64_t> all;
    for (int64_t k = 0; k < 8 * 32; ++k)
      all.push_back(i32 ? batch.in32[k] : batch.in[k]);
    return all;
  };
  EXPECT_EQ(draw(7, false), draw(7, false));
  EXPECT_EQ(draw(7, false), draw(7, true)) << "i32 and i64 hold the same ids";
  EXPECT_NE(draw(7, false), draw(8, false));
  // The window starts follow from the documented generator alone.
  SplitMix64 rng(7);
  std::vector<int64_t> first = draw(7, false);
  for (int b = 0; b < 8; ++b) {
    int64_t start = int64_t(rng.below(5000 - 32));
    EXPECT_EQ(first[size_t(b * 32)], int64_t(ids[size_t(start)]));
  }
}

TEST_F(TokenDataTest, TooShort) {
  std::vector<uint16_t> ids(16, 1);
  TokenData data;
  ASSERT_TRUE(data.open(write(ids), DType::U16).ok());
  Status s = data.checkFits(16, 10);
  EXPECT_NE(s.message().find("holds 16 tokens; one sample of sequence length "
                             "16 needs at least 17"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(data.checkFits(15, 10).ok());
  SplitMix64 rng(1);
  Batch batch(1, 16);
  EXPECT_FALSE(data.sample(rng, 10, batch.inputs(false), batch.labels(false)).ok());
}

TEST_F(TokenDataTest, OddSizeAndEmpty) {
  uint8_t bytes[5] = {1, 0, 2, 0, 3};
  TokenData data;
  Status s = data.open(write("odd.bin", bytes, 5), DType::U16);
  EXPECT_NE(s.message().find("has 5 bytes, not a multiple of 2 (uint16 ids)"),
            std::string::npos)
      << s.message();
  s = data.open(write("six.bin", bytes, 4), DType::U32);
  EXPECT_TRUE(s.ok()) << s.message();
  s = data.open(write("empty.bin", bytes, 0), DType::U16);
  EXPECT_NE(s.message().find("is empty"), std::string::npos) << s.message();
  s = data.open(dir + "/missing.bin", DType::U16);
  EXPECT_NE(s.message().find("missing.bin"), std::string::npos) << s.message();
  EXPECT_FALSE(data.open(write("x.bin", bytes, 4), DType::I32).ok());
}

TEST_F(TokenDataTest, IdBeyondVocabulary) {
  // Every window of 4 + 1 tokens covers position 4.
  std::vector<uint16_t> ids{1, 2, 3, 4, 60000, 5, 6, 7};
  TokenData data;
  ASSERT_TRUE(data.open(write(ids), DType::U16).ok());
  SplitMix64 rng(3);
  Batch batch(2, 4);
  Status s = data.sample(rng, 50257, batch.inputs(false), batch.labels(false));
  EXPECT_NE(s.message().find("token 4 is 60000, beyond the vocabulary of 50257"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(data.sample(rng, 60001, batch.inputs(false), batch.labels(false)).ok());
}

} // namespace
