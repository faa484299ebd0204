//===- MovementTest.cpp - reshape, transpose, concat, slice, ... ----------===//

#include "RuntimeTestUtil.h"

#include <algorithm>
#include <numeric>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// 0, 1, 2, ... so every element names its own position.
Buf iota(DType t, std::vector<int64_t> shape) {
  Buf b(t, std::move(shape));
  for (int64_t i = 0; i < b.count(); ++i)
    switch (dtypeSize(t)) {
    case 1:
      b.data<uint8_t>()[i] = uint8_t(i);
      break;
    case 2:
      b.data<uint16_t>()[i] = uint16_t(i);
      break;
    case 4:
      b.data<int32_t>()[i] = int32_t(i);
      break;
    default:
      b.data<int64_t>()[i] = i;
      break;
    }
  return b;
}

TEST(RuntimeMovement, Reshape) {
  Buf in = iota(DType::I32, {2, 3}), out(DType::I32, {3, 2});
  EXPECT_OK(reshape(in.view(), out.view()));
  EXPECT_EQ(in.bytes, out.bytes);
  Tensor alias = in.view();
  int64_t flat[] = {6};
  alias.shape = flat;
  alias.rank = 1;
  EXPECT_OK(reshape(in.view(), alias));
  Buf bad(DType::I32, {5});
  EXPECT_ERROR(reshape(in.view(), bad.view()), "element count");
}

TEST(RuntimeMovement, TransposeEveryPermOfRank4) {
  std::vector<int64_t> shape = {2, 3, 4, 5};
  Buf in = iota(DType::F32, shape);
  for (int64_t i = 0; i < in.count(); ++i)
    in.data<float>()[i] = float(i);
  std::vector<int64_t> perm = {0, 1, 2, 3};
  do {
    std::vector<int64_t> os(4);
    for (int d = 0; d < 4; ++d)
      os[d] = shape[perm[d]];
    Buf out(DType::F32, os);
    EXPECT_OK(transpose(in.view(), perm.data(), out.view()));
    for (int64_t i = 0; i < out.count(); ++i) {
      std::vector<int64_t> o = unravel(i, os), src(4);
      for (int d = 0; d < 4; ++d)
        src[perm[d]] = o[d];
      ASSERT_EQ(out.data<float>()[i], float(ravel(src, shape)));
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(RuntimeMovement, TransposeTiledAndElementSizes) {
  for (DType t : {DType::I1, DType::F16, DType::I32, DType::F64}) {
    Buf in = iota(t, {3, 67, 131});
    Buf out(t, {3, 131, 67});
    int64_t perm[] = {0, 2, 1};
    EXPECT_OK(transpose(in.view(), perm, out.view()));
    Buf back(t, {3, 67, 131});
    EXPECT_OK(transpose(out.view(), perm, back.view()));
    EXPECT_EQ(back.bytes, in.bytes) << dtypeName(t);
    size_t es = dtypeSize(t);
    // out[b][j][i] = in[b][i][j]
    EXPECT_EQ(std::memcmp(&out.bytes[(1 * 131 * 67 + 5 * 67 + 7) * es],
                          &in.bytes[(1 * 67 * 131 + 7 * 131 + 5) * es], es),
              0);
  }
  Buf in(DType::F32, {2, 3}), out(DType::F32, {3, 2});
  int64_t bad[] = {0, 0};
  EXPECT_ERROR(transpose(in.view(), bad, out.view()), "permutation");
}

TEST(RuntimeMovement, Concat) {
  for (int64_t axis : {0, 1, 2}) {
    std::vector<Buf> ins;
    std::vector<int64_t> os = {2, 3, 4};
    os[axis] = 0;
    for (int64_t size : {1, 3, 0, 2}) {
      std::vector<int64_t> s = {2, 3, 4};
      s[axis] = size;
      ins.push_back(randomF32(s));
      os[axis] += size;
    }
    std::vector<Tensor> views;
    for (Buf &b : ins)
      views.push_back(b.view());
    Buf out(DType::F32, os);
    EXPECT_OK(concat(views.data(), int(views.size()), axis, out.view()));
    for (int64_t i = 0; i < out.count(); ++i) {
      std::vector<int64_t> idx = unravel(i, os);
      size_t k = 0;
      while (idx[axis] >= ins[k].shape[axis])
        idx[axis] -= ins[k++].shape[axis];
      ASSERT_EQ(out.data<float>()[i],
                ins[k].data<float>()[ravel(idx, ins[k].shape)]);
    }
  }
  Buf a(DType::F32, {2, 3}), b(DType::F32, {3, 3}), out(DType::F32, {5, 3});
  Tensor views[] = {a.view(), b.view()};
  EXPECT_OK(concat(views, 2, -2, out.view()));
  EXPECT_ERROR(concat(views, 2, 1, out.view()), "does not fit");
}

void checkSlice(const std::vector<int64_t> &shape,
                const std::vector<int64_t> &starts,
                const std::vector<int64_t> &sizes,
                const std::vector<int64_t> &steps) {
  Buf in = iota(DType::I64, shape), out(DType::I64, sizes);
  EXPECT_OK(
      slice(in.view(), starts.data(), sizes.data(), steps.data(), out.view()));
  for (int64_t i = 0; i < out.count(); ++i) {
    std::vector<int64_t> idx = unravel(i, sizes);
    for (size_t d = 0; d < shape.size(); ++d)
      idx[d] = starts[d] + idx[d] * steps[d];
    ASSERT_EQ(out.data<int64_t>()[i], ravel(idx, shape));
  }
}

TEST(RuntimeMovement, SliceStepsIncludingNegative) {
  checkSlice({4, 5}, {1, 0}, {2, 5}, {1, 1});
  checkSlice({4, 5}, {0, 1}, {4, 2}, {1, 2});
  checkSlice({4, 5}, {3, 4}, {4, 5}, {-1, -1}); // full reversal
  checkSlice({4, 5, 6}, {2, 4, 5}, {2, 2, 3}, {-2, -3, -2});
  checkSlice({4, 5}, {0, 0}, {0, 5}, {1, 1}); // empty
  checkSlice({1, 7}, {0, 6}, {1, 7}, {1, -1});
  Buf in(DType::F32, {4}), out(DType::F32, {3});
  int64_t start = 2, one = 1, size = 3, step = 1, back = -1, zero = 0;
  EXPECT_ERROR(slice(in.view(), &start, &size, &step, out.view()),
               "out of bounds");
  EXPECT_ERROR(slice(in.view(), &one, &size, &back, out.view()),
               "out of bounds");
  EXPECT_OK(slice(in.view(), &start, &size, &back, out.view()));
  EXPECT_ERROR(slice(in.view(), &zero, &size, &zero, out.view()), "step is 0");
}

TEST(RuntimeMovement, BroadcastAndTile) {
  Buf in = iota(DType::I32, {3, 1}), out(DType::I32, {2, 3, 4});
  EXPECT_OK(broadcast(in.view(), out.view()));
  for (int64_t i = 0; i < out.count(); ++i)
    EXPECT_EQ(out.data<int32_t>()[i], unravel(i, {2, 3, 4})[1]);
  Buf scalar = make<uint16_t>(DType::F16, {}, {0x3c00}), sq(DType::F16, {2, 2});
  EXPECT_OK(broadcast(scalar.view(), sq.view()));
  EXPECT_EQ(sq.values<uint16_t>(), std::vector<uint16_t>(4, 0x3c00));
  Buf bad(DType::I32, {2, 2});
  EXPECT_ERROR(broadcast(in.view(), bad.view()), "does not broadcast");

  Buf t = iota(DType::I32, {2, 3}), tiled(DType::I32, {4, 9});
  int64_t reps[] = {2, 3};
  EXPECT_OK(tile(t.view(), reps, tiled.view()));
  for (int64_t i = 0; i < tiled.count(); ++i) {
    std::vector<int64_t> idx = unravel(i, {4, 9});
    EXPECT_EQ(tiled.data<int32_t>()[i], (idx[0] % 2) * 3 + idx[1] % 3);
  }
  Buf t3 = iota(DType::I8, {2, 1, 3}), t3out(DType::I8, {2, 4, 3});
  int64_t reps3[] = {1, 4, 1};
  EXPECT_OK(tile(t3.view(), reps3, t3out.view()));
  EXPECT_EQ(t3out.data<int8_t>()[3 * 3 + 2], 2);
  EXPECT_EQ(t3out.data<int8_t>()[12 + 5], 5);
  Buf r3(DType::I32, {2, 4, 3});
  EXPECT_ERROR(tile(t.view(), reps3, r3.view()), "rank");
  Buf r2(DType::I32, {4, 8});
  EXPECT_ERROR(tile(t.view(), reps, r2.view()), "times repeats");
}

TEST(RuntimeMovement, Trilu) {
  for (bool upper : {false, true})
    for (int64_t k : {-1, 0, 2, -5, 7}) {
      Buf in = randomF32({2, 4, 5}), out(DType::F32, {2, 4, 5});
      EXPECT_OK(trilu(in.view(), k, upper, out.view()));
      for (int64_t i = 0; i < in.count(); ++i) {
        std::vector<int64_t> idx = unravel(i, {2, 4, 5});
        int64_t diff = idx[2] - idx[1];
        bool keep = upper ? diff >= k : diff <= k;
        ASSERT_EQ(out.data<float>()[i], keep ? in.data<float>()[i] : 0.0f);
      }
      Buf copy = in;
      EXPECT_OK(trilu(copy.view(), k, upper, copy.view())); // in place
      EXPECT_EQ(copy.bytes, out.bytes);
    }
  Buf v(DType::F32, {3});
  EXPECT_ERROR(trilu(v.view(), 0, true, v.view()), "rank >= 2");
}

} // namespace
