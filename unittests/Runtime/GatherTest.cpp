//===- GatherTest.cpp - gather, gather_nd, scatter_nd ---------------------===//

#include "RuntimeTestUtil.h"

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

using F = std::vector<float>;

TEST(RuntimeGather, AxesAndNegativeIndices) {
  Buf data = randomF32({3, 4, 5});
  Buf idx32 = make<int32_t>(DType::I32, {2, 2}, {0, -1, 2, -4});
  for (int64_t axis : {0, 1, 2}) {
    int64_t size = data.shape[axis];
    std::vector<int64_t> os(data.shape.begin(), data.shape.begin() + axis);
    os.insert(os.end(), {2, 2});
    os.insert(os.end(), data.shape.begin() + axis + 1, data.shape.end());
    Buf out(DType::F32, os);
    Buf idx = i64({2, 2}, {0, -1, 2, 1 - size});
    EXPECT_OK(gather(data.view(), idx.view(), axis, out.view()));
    for (int64_t i = 0; i < out.count(); ++i) {
      std::vector<int64_t> o = unravel(i, os);
      std::vector<int64_t> src(o.begin(), o.begin() + axis);
      int64_t k = idx.data<int64_t>()[o[axis] * 2 + o[axis + 1]];
      src.push_back(k < 0 ? k + size : k);
      src.insert(src.end(), o.begin() + axis + 2, o.end());
      ASSERT_EQ(out.data<float>()[i],
                data.data<float>()[ravel(src, data.shape)]);
    }
  }
  Buf out(DType::F32, {3, 2, 2, 5});
  EXPECT_OK(gather(data.view(), idx32.view(), 1, out.view()));
  EXPECT_EQ(out.data<float>()[5 * 3], data.data<float>()[5 * 0]); // -4 -> 0
}

TEST(RuntimeGather, OutOfRangeIsAnErrorAndWritesNothing) {
  Buf data = f32({3}, {1, 2, 3}), out = f32({2}, {7, 7});
  Buf idx = i64({2}, {1, 3});
  EXPECT_ERROR(gather(data.view(), idx.view(), 0, out.view()),
               "index 3 at position 1 is out of range for a dim of size 3");
  EXPECT_EQ(out.values<float>(), (F{7, 7}));
  Buf neg = i64({2}, {-4, 0});
  EXPECT_ERROR(gather(data.view(), neg.view(), 0, out.view()), "index -4");
  Buf fidx(DType::F32, {2});
  EXPECT_ERROR(gather(data.view(), fidx.view(), 0, out.view()), "i32 or i64");
  Buf wrong(DType::F32, {3});
  EXPECT_ERROR(gather(data.view(), idx.view(), 0, wrong.view()),
               "should be [2]");
}

// The examples of the ONNX GatherND specification.
TEST(RuntimeGatherND, OnnxExamples) {
  Buf d2 = f32({2, 2}, {0, 1, 2, 3});
  Buf i1 = i64({2, 2}, {0, 0, 1, 1}), o1(DType::F32, {2});
  EXPECT_OK(gatherND(d2.view(), i1.view(), 0, o1.view()));
  EXPECT_EQ(o1.values<float>(), (F{0, 3}));
  Buf i2 = i64({2, 1}, {1, 0}), o2(DType::F32, {2, 2});
  EXPECT_OK(gatherND(d2.view(), i2.view(), 0, o2.view()));
  EXPECT_EQ(o2.values<float>(), (F{2, 3, 0, 1}));
  Buf d3 = f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Buf i3 = i64({2, 2}, {0, 1, 1, 0}), o3(DType::F32, {2, 2});
  EXPECT_OK(gatherND(d3.view(), i3.view(), 0, o3.view()));
  EXPECT_EQ(o3.values<float>(), (F{2, 3, 4, 5}));
  Buf i4 = i64({2, 1, 2}, {0, 1, 1, 0}), o4(DType::F32, {2, 1, 2});
  EXPECT_OK(gatherND(d3.view(), i4.view(), 0, o4.view()));
  EXPECT_EQ(o4.values<float>(), (F{2, 3, 4, 5}));
  Buf i5 = make<int32_t>(DType::I32, {2, 1}, {1, 0}), o5(DType::F32, {2, 2});
  EXPECT_OK(gatherND(d3.view(), i5.view(), 1, o5.view()));
  EXPECT_EQ(o5.values<float>(), (F{2, 3, 4, 5}));
  Buf i6 = i64({2, 2}, {-1, 1, 0, -2}), o6(DType::F32, {2});
  EXPECT_OK(gatherND(d2.view(), i6.view(), 0, o6.view()));
  EXPECT_EQ(o6.values<float>(), (F{3, 0}));
  Buf bad = i64({2, 2}, {0, 0, 2, 0});
  EXPECT_ERROR(gatherND(d2.view(), bad.view(), 0, o1.view()), "index 2");
  EXPECT_ERROR(gatherND(d2.view(), i1.view(), 2, o1.view()), "batch_dims");
}

TEST(RuntimeScatterND, OnnxExamplesAndReductions) {
  Buf data = f32({8}, {1, 2, 3, 4, 5, 6, 7, 8}), out(DType::F32, {8});
  Buf idx = i64({4, 1}, {4, 3, 1, 7}), upd = f32({4}, {9, 10, 11, 12});
  EXPECT_OK(scatterND(data.view(), idx.view(), upd.view(),
                      ScatterReduction::None, out.view()));
  EXPECT_EQ(out.values<float>(), (F{1, 11, 3, 10, 9, 6, 7, 12}));

  // Whole slices of a [4,4,4] tensor.
  Buf d3(DType::F32, {4, 4, 4}), r3(DType::F32, {4, 4, 4});
  Buf i3 = i64({2, 1}, {0, -2}), u3 = randomF32({2, 4, 4});
  EXPECT_OK(scatterND(d3.view(), i3.view(), u3.view(), ScatterReduction::None,
                      r3.view()));
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(r3.data<float>()[i], u3.data<float>()[i]);
    EXPECT_EQ(r3.data<float>()[32 + i], u3.data<float>()[16 + i]);
    EXPECT_EQ(r3.data<float>()[16 + i], 0.0f);
  }

  // Duplicates combine in order.
  Buf d = f32({4}, {1, 2, 3, 4}), dup = i64({3, 1}, {0, 0, 2});
  Buf u = f32({3}, {5, 6, 7});
  struct Case {
    ScatterReduction r;
    F want;
  } cases[] = {{ScatterReduction::None, {6, 2, 7, 4}},
               {ScatterReduction::Add, {12, 2, 10, 4}},
               {ScatterReduction::Mul, {30, 2, 21, 4}},
               {ScatterReduction::Max, {6, 2, 7, 4}},
               {ScatterReduction::Min, {1, 2, 3, 4}}};
  for (const Case &c : cases) {
    Buf r(DType::F32, {4});
    EXPECT_OK(scatterND(d.view(), dup.view(), u.view(), c.r, r.view()));
    EXPECT_EQ(r.values<float>(), c.want) << int(c.r);
  }
  Buf ints = make<int32_t>(DType::I32, {3}, {1, 2, 3});
  Buf iu = make<int32_t>(DType::I32, {2}, {10, 20});
  Buf ii = make<int32_t>(DType::I32, {2, 1}, {-1, -1});
  EXPECT_OK(scatterND(ints.view(), ii.view(), iu.view(), ScatterReduction::Add,
                      ints.view())); // in place
  EXPECT_EQ(ints.values<int32_t>(), (std::vector<int32_t>{1, 2, 33}));
}

TEST(RuntimeScatterND, ErrorsAndParsing) {
  Buf d = f32({4}, {1, 2, 3, 4}), r = f32({4}, {0, 0, 0, 0});
  Buf idx = i64({2, 1}, {0, 4}), u = f32({2}, {5, 6});
  EXPECT_ERROR(scatterND(d.view(), idx.view(), u.view(), ScatterReduction::Add,
                         r.view()),
               "index 4 at position 1");
  EXPECT_EQ(r.values<float>(), (F{0, 0, 0, 0})); // nothing written
  Buf u3 = f32({3}, {1, 2, 3});
  EXPECT_ERROR(scatterND(d.view(), idx.view(), u3.view(),
                         ScatterReduction::None, r.view()),
               "do not match");
  Buf b(DType::I1, {4}), bu(DType::I1, {2}), ok = i64({2, 1}, {0, 1});
  EXPECT_ERROR(scatterND(b.view(), ok.view(), bu.view(), ScatterReduction::Add,
                         b.view()),
               "i1");
  EXPECT_OK(scatterND(b.view(), ok.view(), bu.view(), ScatterReduction::Max,
                      b.view()));
  ScatterReduction out;
  EXPECT_TRUE(parseScatterReduction("mul", out));
  EXPECT_EQ(out, ScatterReduction::Mul);
  EXPECT_TRUE(parseScatterReduction("none", out));
  EXPECT_EQ(out, ScatterReduction::None);
  EXPECT_FALSE(parseScatterReduction("mean", out));
}

} // namespace
