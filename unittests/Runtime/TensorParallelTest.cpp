//===- TensorParallelTest.cpp - the tensor-parallel calls' layouts --------===//
//
// lib/Runtime/TensorParallel.cpp on one member of a fake group whose other
// members hold this member's values plus 1000 times the difference of their
// indices: a gather or scatter along an inner axis must place each member's
// block where its index says.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/TensorParallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace lamina::rt;

namespace {

class FakeGroup : public TensorParallelGroup {
public:
  FakeGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// Member m's value of element x of this member.
  float peer(float x, int m) const { return x + 1000.0f * float(m - rank_); }
  Status allReduce(float *buf, int64_t count, GroupReduce op) override {
    for (int64_t i = 0; i < count; ++i) {
      float acc = op == GroupReduce::Sum ? 0.0f : peer(buf[i], 0);
      for (int m = 0; m < size_; ++m)
        acc = op == GroupReduce::Sum ? acc + peer(buf[i], m)
                                     : std::max(acc, peer(buf[i], m));
      buf[i] = acc;
    }
    return Status::success();
  }
  Status allGather(float *buf, int64_t count) override {
    const float *mine = buf + count * rank_;
    std::vector<float> own(mine, mine + count);
    for (int m = 0; m < size_; ++m)
      for (int64_t i = 0; i < count; ++i)
        buf[m * count + i] = peer(own[size_t(i)], m);
    return Status::success();
  }
  Status reduceScatter(const float *in, float *out, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) {
      float acc = 0;
      for (int m = 0; m < size_; ++m)
        acc += peer(in[rank_ * count + i], m);
      out[i] = acc;
    }
    return Status::success();
  }

private:
  int rank_, size_;
};

struct GroupScope {
  explicit GroupScope(TensorParallelGroup *g) { setTensorParallelGroup(g); }
  ~GroupScope() { setTensorParallelGroup(nullptr); }
};

std::vector<float> iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = float(i);
  return v;
}

TEST(TensorParallel, AllGatherInnerAxis) {
  FakeGroup g(1, 2);
  GroupScope scope(&g);
  const int64_t inShape[] = {2, 3, 2}, outShape[] = {2, 6, 2};
  std::vector<float> in = iota(12), out(24, -1);
  ASSERT_TRUE(tp::allGather(Tensor{in.data(), DType::F32, 3, inShape}, 1,
                            Tensor{out.data(), DType::F32, 3, outShape})
                  .ok());
  for (int o = 0; o < 2; ++o)
    for (int m = 0; m < 2; ++m)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 2; ++k)
          EXPECT_EQ(out[size_t((o * 6 + m * 3 + j) * 2 + k)],
                    g.peer(in[size_t((o * 3 + j) * 2 + k)], m));
}

TEST(TensorParallel, ReduceScatterInnerAxis) {
  FakeGroup g(1, 2);
  GroupScope scope(&g);
  const int64_t inShape[] = {2, 4, 2}, outShape[] = {2, 2, 2};
  std::vector<float> in = iota(16), out(8, -1);
  ASSERT_TRUE(tp::reduceScatter(GroupReduce::Sum,
                                Tensor{in.data(), DType::F32, 3, inShape}, 1,
                                Tensor{out.data(), DType::F32, 3, outShape})
                  .ok());
  // Member 1 keeps rows 2-3 of axis 1, summed over both members.
  for (int o = 0; o < 2; ++o)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) {
        float x = in[size_t((o * 4 + 2 + j) * 2 + k)];
        EXPECT_EQ(out[size_t((o * 2 + j) * 2 + k)],
                  g.peer(x, 0) + g.peer(x, 1));
      }
}

TEST(TensorParallel, AllReduceSliceRank) {
  FakeGroup g(0, 4);
  GroupScope scope(&g);
  const int64_t shape[] = {3};
  std::vector<float> x = {1, 2, 3}, sum(3), max(3);
  ASSERT_TRUE(tp::allReduce(GroupReduce::Sum,
                            Tensor{x.data(), DType::F32, 1, shape},
                            Tensor{sum.data(), DType::F32, 1, shape})
                  .ok());
  ASSERT_TRUE(tp::allReduce(GroupReduce::Max,
                            Tensor{x.data(), DType::F32, 1, shape},
                            Tensor{max.data(), DType::F32, 1, shape})
                  .ok());
  EXPECT_EQ(sum[0], 4 * 1.0f + 1000 * (0 + 1 + 2 + 3));
  EXPECT_EQ(max[2], 3.0f + 3000);
  // Block 2 of 4 along the last axis; the member's index.
  FakeGroup g2(2, 4);
  setTensorParallelGroup(&g2);
  const int64_t wide[] = {2, 8}, narrow[] = {2, 2};
  std::vector<float> in = iota(16), part(4);
  ASSERT_TRUE(tp::allSlice(Tensor{in.data(), DType::F32, 2, wide}, 1,
                           Tensor{part.data(), DType::F32, 2, narrow})
                  .ok());
  EXPECT_EQ(part, (std::vector<float>{4, 5, 12, 13}));
  int64_t rank = -1;
  ASSERT_TRUE(tp::groupRank(Tensor{&rank, DType::I64, 0, nullptr}).ok());
  EXPECT_EQ(rank, 2);
}

TEST(TensorParallel, Errors) {
  const int64_t shape[] = {4}, half[] = {3};
  std::vector<float> x(4), y(4);
  Status none =
      tp::allReduce(GroupReduce::Sum, Tensor{x.data(), DType::F32, 1, shape},
                    Tensor{y.data(), DType::F32, 1, shape});
  EXPECT_NE(none.message().find("runs no tensor-parallel group"),
            std::string::npos);
  FakeGroup g(0, 2);
  GroupScope scope(&g);
  Status uneven = tp::allGather(Tensor{x.data(), DType::F32, 1, half}, 0,
                                Tensor{y.data(), DType::F32, 1, shape});
  EXPECT_NE(uneven.message().find("do not split 2 ways on axis 0"),
            std::string::npos);
  std::vector<int32_t> ints(4);
  Status type =
      tp::allReduce(GroupReduce::Sum, Tensor{ints.data(), DType::I32, 1, shape},
                    Tensor{ints.data(), DType::I32, 1, shape});
  EXPECT_NE(type.message().find("f32 only"), std::string::npos);
}

} // namespace
