//===- ReduceTest.cpp - reductions and cumsum -----------------------------===//

#include "RuntimeTestUtil.h"

#include <limits>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// Naive reduction in double: each input element is combined into the
/// output element its kept coordinates name.
std::vector<double> refReduce(ReduceOp op, const std::vector<float> &in,
                              const std::vector<int64_t> &shape,
                              const std::vector<bool> &reduced,
                              std::vector<int64_t> &outShape) {
  outShape.clear();
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    outShape.push_back(reduced[d] ? 1 : shape[d]);
    if (reduced[d])
      count *= shape[d];
  }
  int64_t n = numElements(outShape.data(), int(outShape.size()));
  double init = op == ReduceOp::Max    ? -INFINITY
                : op == ReduceOp::Prod ? 1.0
                                       : 0.0;
  std::vector<double> out(n, init);
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<int64_t> idx = unravel(int64_t(i), shape);
    for (size_t d = 0; d < shape.size(); ++d)
      if (reduced[d])
        idx[d] = 0;
    double &o = out[ravel(idx, outShape)];
    double x = in[i];
    o = op == ReduceOp::Max    ? std::max(o, x)
        : op == ReduceOp::Prod ? o * x
                               : o + x;
  }
  if (op == ReduceOp::Mean)
    for (double &o : out)
      o /= double(count);
  return out;
}

TEST(RuntimeReduce, AxesAndKeepdimsMatchReference) {
  std::vector<int64_t> shape = {2, 3, 4, 5};
  Buf in = randomF32(shape, 0.5f, 1.5f);
  std::vector<std::vector<int64_t>> axesSets = {
      {}, {0}, {1}, {3}, {0, 2}, {1, 3}, {2, 3}, {0, 1, 2, 3}, {-1}, {0, 1, 3}};
  for (ReduceOp op :
       {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Prod})
    for (const auto &axes : axesSets)
      for (bool keepdims : {false, true}) {
        std::vector<bool> reduced(4, false);
        for (int64_t a : axes)
          reduced[(a + 4) % 4] = true;
        std::vector<int64_t> kept;
        std::vector<double> want =
            refReduce(op, in.values<float>(), shape, reduced, kept);
        std::vector<int64_t> outShape;
        for (int d = 0; d < 4; ++d)
          if (!reduced[d] || keepdims)
            outShape.push_back(kept[d]);
        Buf out(DType::F32, outShape);
        EXPECT_OK(reduce(op, in.view(), axes.data(), int(axes.size()), keepdims,
                         out.view()));
        for (int64_t i = 0; i < out.count(); ++i)
          ASSERT_TRUE(close(out.data<float>()[i], want[i], 1e-5))
              << "op " << int(op) << " axes " << axes.size() << " at " << i;
      }
}

TEST(RuntimeReduce, IntegersBoolsAndNaN) {
  int64_t axis = 1;
  Buf a = make<int32_t>(DType::I32, {2, 2}, {-3, -4, 7, 2});
  Buf out(DType::I32, {2});
  EXPECT_OK(reduce(ReduceOp::Mean, a.view(), &axis, 1, false, out.view()));
  EXPECT_EQ(out.values<int32_t>(), (std::vector<int32_t>{-3, 4})); // truncates
  EXPECT_OK(reduce(ReduceOp::Prod, a.view(), &axis, 1, false, out.view()));
  EXPECT_EQ(out.values<int32_t>(), (std::vector<int32_t>{12, 14}));
  EXPECT_OK(reduce(ReduceOp::Max, a.view(), &axis, 1, false, out.view()));
  EXPECT_EQ(out.values<int32_t>(), (std::vector<int32_t>{-3, 7}));
  Buf big = make<int8_t>(DType::I8, {200}, std::vector<int8_t>(200, 1));
  Buf m(DType::I8, {}); // the sum wraps in i8; the count 200 must not
  int64_t all = 0;
  EXPECT_OK(reduce(ReduceOp::Mean, big.view(), &all, 1, false, m.view()));
  EXPECT_EQ(m.data<int8_t>()[0], int8_t(int8_t(200) / 200));
  Buf b = make<uint8_t>(DType::I1, {2, 3}, {0, 0, 0, 0, 1, 0});
  Buf any(DType::I1, {2, 1});
  EXPECT_OK(reduce(ReduceOp::Max, b.view(), &axis, 1, true, any.view()));
  EXPECT_EQ(any.values<uint8_t>(), (std::vector<uint8_t>{0, 1}));
  EXPECT_ERROR(reduce(ReduceOp::Sum, b.view(), &axis, 1, true, any.view()),
               "only max");
  Buf f = f32({2, 2}, {1, NAN, 3, 4}), fm(DType::F32, {2});
  EXPECT_OK(reduce(ReduceOp::Max, f.view(), &axis, 1, false, fm.view()));
  EXPECT_TRUE(std::isnan(fm.data<float>()[0]));
  EXPECT_EQ(fm.data<float>()[1], 4.0f);
}

TEST(RuntimeReduce, EmptyAndErrors) {
  Buf e(DType::F32, {2, 0}), out(DType::F32, {2});
  int64_t axis = 1;
  EXPECT_OK(reduce(ReduceOp::Sum, e.view(), &axis, 1, false, out.view()));
  EXPECT_EQ(out.values<float>(), (std::vector<float>{0, 0}));
  EXPECT_OK(reduce(ReduceOp::Prod, e.view(), &axis, 1, false, out.view()));
  EXPECT_EQ(out.values<float>(), (std::vector<float>{1, 1}));
  EXPECT_OK(reduce(ReduceOp::Max, e.view(), &axis, 1, false, out.view()));
  EXPECT_EQ(out.data<float>()[0], -INFINITY);
  EXPECT_OK(reduce(ReduceOp::Mean, e.view(), &axis, 1, false, out.view()));
  EXPECT_TRUE(std::isnan(out.data<float>()[0]));
  Buf in(DType::F32, {2, 3}), wrong(DType::F32, {3});
  EXPECT_ERROR(reduce(ReduceOp::Sum, in.view(), &axis, 1, false, wrong.view()),
               "should have shape [2]");
  int64_t twice[] = {1, -1};
  EXPECT_ERROR(reduce(ReduceOp::Sum, in.view(), twice, 2, false, out.view()),
               "repeated");
}

TEST(RuntimeReduce, NarrowInputsIntoF32Results) {
  // f16/bf16 into an f32 result: the f32 accumulator unrounded, bit for bit
  // the reduction of the widened input, on both loop orders and the
  // threads' split.
  for (const auto &[t, toBits, fromBits] : kHalfFormats)
    for (std::vector<int64_t> axes : {std::vector<int64_t>{0},
                                      std::vector<int64_t>{1}, {0, 1}})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}) {
        Buf in = randomOf(t, {300, 70});
        Buf wide(DType::F32, in.shape);
        for (int64_t i = 0; i < in.count(); ++i)
          wide.data<float>()[i] = fromBits(in.data<uint16_t>()[i]);
        std::vector<int64_t> outShape;
        for (int64_t d = 0; d < 2; ++d)
          if (std::find(axes.begin(), axes.end(), d) == axes.end())
            outShape.push_back(in.shape[d]);
        Buf got(DType::F32, outShape), want(DType::F32, outShape);
        EXPECT_OK(reduce(op, in.view(), axes.data(), int(axes.size()), false,
                         got.view()));
        EXPECT_OK(reduce(op, wide.view(), axes.data(), int(axes.size()),
                         false, want.view()));
        EXPECT_EQ(got.values<float>(), want.values<float>())
            << dtypeName(t) << " op " << int(op) << " axes " << axes.size();
      }
  Buf h(DType::BF16, {2, 3}), f16(DType::F16, {2}), f64(DType::F64, {2}),
      f(DType::F32, {2, 3}), b16(DType::BF16, {2});
  int64_t axis = 1;
  EXPECT_ERROR(reduce(ReduceOp::Sum, h.view(), &axis, 1, false, f16.view()),
               "(or f32 for f16/bf16)");
  EXPECT_ERROR(reduce(ReduceOp::Sum, h.view(), &axis, 1, false, f64.view()),
               "another element type");
  EXPECT_ERROR(reduce(ReduceOp::Sum, f.view(), &axis, 1, false, b16.view()),
               "another element type");
}

TEST(RuntimeReduce, LargeReductionsSplitAcrossThreads) {
  setNumThreads(4);
  Buf ones = make<float>(DType::F32, {1 << 20}, std::vector<float>(1 << 20, 1));
  Buf s(DType::F32, {});
  int64_t all = 0;
  EXPECT_OK(reduce(ReduceOp::Sum, ones.view(), &all, 1, false, s.view()));
  EXPECT_EQ(s.data<float>()[0], float(1 << 20));
  Buf cols = randomF32({600, 300}), cs(DType::F32, {300});
  EXPECT_OK(reduce(ReduceOp::Sum, cols.view(), &all, 1, false, cs.view()));
  for (int64_t j = 0; j < 300; j += 37) {
    double want = 0;
    for (int64_t i = 0; i < 600; ++i)
      want += cols.data<float>()[i * 300 + j];
    EXPECT_TRUE(close(cs.data<float>()[j], want, 1e-4, 1e-4));
  }
  setNumThreads(0);
}

void checkCumsum(const std::vector<int64_t> &shape, int64_t axis,
                 bool exclusive, bool reverse) {
  Buf in = randomF32(shape), out(DType::F32, shape);
  EXPECT_OK(cumsum(in.view(), axis, exclusive, reverse, out.view()));
  for (int64_t i = 0; i < in.count(); ++i) {
    std::vector<int64_t> idx = unravel(i, shape);
    double want = 0;
    std::vector<int64_t> j = idx;
    for (j[axis] = 0; j[axis] < shape[axis]; ++j[axis]) {
      bool before = reverse ? j[axis] > idx[axis] : j[axis] < idx[axis];
      if (before || (!exclusive && j[axis] == idx[axis]))
        want += in.data<float>()[ravel(j, shape)];
    }
    ASSERT_TRUE(close(out.data<float>()[i], want, 1e-5, 1e-6));
  }
}

TEST(RuntimeCumsum, AxesExclusiveReverse) {
  for (int64_t axis : {0, 1, 2})
    for (bool exclusive : {false, true})
      for (bool reverse : {false, true})
        checkCumsum({3, 4, 5}, axis, exclusive, reverse);
  Buf a = make<int32_t>(DType::I32, {4}, {1, 2, 3, 4});
  EXPECT_OK(cumsum(a.view(), 0, true, false, a.view())); // in place
  EXPECT_EQ(a.values<int32_t>(), (std::vector<int32_t>{0, 1, 3, 6}));
  Buf b(DType::I1, {2});
  EXPECT_ERROR(cumsum(b.view(), 0, false, false, b.view()), "i1");
  EXPECT_ERROR(cumsum(a.view(), 1, false, false, a.view()), "axis");
}

} // namespace
