//===- GemmTest.cpp - batched matmul --------------------------------------===//

#include "RuntimeTestUtil.h"

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// Naive batched matmul in double with broadcast batch dims.
std::vector<double> refMatmul(Buf &a, Buf &b, const std::vector<int64_t> &os) {
  int64_t m = os[os.size() - 2], n = os.back(), k = a.shape.back();
  std::vector<int64_t> ob(os.begin(), os.end() - 2);
  std::vector<int64_t> ab(a.shape.begin(), a.shape.end() - 2);
  std::vector<int64_t> bb(b.shape.begin(), b.shape.end() - 2);
  int64_t batches = numElements(ob.data(), int(ob.size()));
  std::vector<double> out(batches * m * n);
  for (int64_t t = 0; t < batches; ++t) {
    std::vector<int64_t> idx = unravel(t, ob);
    const float *x = a.data<float>() + broadcastIndex(idx, ab) * m * k;
    const float *y = b.data<float>() + broadcastIndex(idx, bb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += double(x[i * k + l]) * y[l * n + j];
        out[(t * m + i) * n + j] = s;
      }
  }
  return out;
}

void checkMatmul(std::vector<int64_t> as, std::vector<int64_t> bs,
                 std::vector<int64_t> os) {
  Buf a = randomF32(as), b = randomF32(bs), out(DType::F32, os);
  EXPECT_OK(matmul(a.view(), b.view(), out.view()));
  std::vector<double> want = refMatmul(a, b, os);
  for (int64_t i = 0; i < out.count(); ++i)
    ASSERT_TRUE(close(out.data<float>()[i], want[i], 1e-5, 1e-5)) << "at " << i;
}

TEST(RuntimeMatmul, ShapesAndBroadcastBatches) {
  checkMatmul({3, 4}, {4, 5}, {3, 5});
  checkMatmul({2, 3, 4}, {2, 4, 5}, {2, 3, 5});
  checkMatmul({2, 3, 4}, {4, 5}, {2, 3, 5});          // stacked into one gemm
  checkMatmul({3, 4}, {2, 4, 5}, {2, 3, 5});          // lhs broadcast
  checkMatmul({2, 1, 3, 4}, {3, 4, 5}, {2, 3, 3, 5}); // both broadcast
  checkMatmul({1, 2, 3, 4}, {1, 4, 5}, {1, 2, 3, 5});
  checkMatmul({1, 1}, {1, 1}, {1, 1});
  checkMatmul({64, 96}, {96, 80}, {64, 80});
}

TEST(RuntimeMatmul, OtherTypesAndEdges) {
  Buf a = make<double>(DType::F64, {2, 2}, {1, 2, 3, 4});
  Buf b = make<double>(DType::F64, {2, 1}, {1 + 1e-12, 1});
  Buf c(DType::F64, {2, 1});
  EXPECT_OK(matmul(a.view(), b.view(), c.view()));
  // 1e-12 would vanish in f32: the product is computed in f64.
  EXPECT_TRUE(close(c.data<double>()[0], 3 + 1e-12, 1e-15));
  EXPECT_TRUE(close(c.data<double>()[1], 7 + 3e-12, 1e-15));
  for (const auto &[t, toBits, fromBits] : kHalfFormats) {
    Buf h(t, {2, 3, 2}), w(t, {2, 2}), r(t, {2, 3, 2});
    float hv[] = {1, 2, 3, 4, 5, 6, -1, -2, 0.5f, 0.25f, 8, 9};
    float wv[] = {1, 0.5f, -1, 2};
    for (int i = 0; i < 12; ++i)
      h.data<uint16_t>()[i] = toBits(hv[i]);
    for (int i = 0; i < 4; ++i)
      w.data<uint16_t>()[i] = toBits(wv[i]);
    EXPECT_OK(matmul(h.view(), w.view(), r.view()));
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 2; ++j) {
        float want = hv[2 * i] * wv[j] + hv[2 * i + 1] * wv[2 + j];
        EXPECT_EQ(r.data<uint16_t>()[2 * i + j], toBits(want));
        EXPECT_EQ(fromBits(r.data<uint16_t>()[2 * i + j]),
                  fromBits(toBits(want)));
      }
    // An f32 result stores the f32 product unrounded; a narrow result of
    // another type than f32 is an error.
    Buf wide(DType::F32, {2, 3, 2});
    h.data<uint16_t>()[1] = toBits(1.0f / 3.0f);
    EXPECT_OK(matmul(h.view(), w.view(), wide.view()));
    EXPECT_OK(matmul(h.view(), w.view(), r.view()));
    float hx = fromBits(h.data<uint16_t>()[1]);
    EXPECT_EQ(wide.data<float>()[0], hv[0] * wv[0] + hx * wv[2]);
    for (int e = 0; e < 12; ++e)
      EXPECT_EQ(toBits(wide.data<float>()[e]), r.data<uint16_t>()[e]) << e;
    Buf f64r(DType::F64, {2, 3, 2});
    EXPECT_ERROR(matmul(h.view(), w.view(), f64r.view()), "f32 result");
  }
  Buf ek(DType::F32, {2, 0}), ek2(DType::F32, {0, 3});
  Buf zeros = f32({2, 3}, {1, 1, 1, 1, 1, 1});
  EXPECT_OK(matmul(ek.view(), ek2.view(), zeros.view()));
  EXPECT_EQ(zeros.values<float>(), std::vector<float>(6, 0));
  Buf x(DType::F32, {2, 3}), y(DType::F32, {4, 5}), z(DType::F32, {2, 5});
  EXPECT_ERROR(matmul(x.view(), y.view(), z.view()), "does not give");
  Buf v(DType::F32, {3});
  EXPECT_ERROR(matmul(v.view(), y.view(), z.view()), "rank >= 2");
  Buf i(DType::I32, {2, 2});
  EXPECT_ERROR(matmul(i.view(), i.view(), i.view()), "float");
}

/// matmulEpilogue(a, b, bias, addend) against the double product plus both
/// terms, the addend given in place of the result when `inPlace`.
void checkEpilogue(std::vector<int64_t> as, std::vector<int64_t> bs,
                   std::vector<int64_t> os, std::vector<int64_t> biasShape,
                   bool withAddend, bool inPlace = false) {
  Buf a = randomF32(as), b = randomF32(bs), out(DType::F32, os);
  Buf bias = biasShape.empty() ? Buf() : randomF32(biasShape);
  Buf addend = withAddend ? randomF32(os) : Buf();
  std::vector<double> want = refMatmul(a, b, os);
  int64_t n = os.back();
  for (int64_t i = 0; i < int64_t(want.size()); ++i)
    want[i] += (biasShape.empty() ? 0.0 : double(bias.data<float>()[i % n])) +
               (withAddend ? double(addend.data<float>()[i]) : 0.0);
  Tensor bt = bias.view(), at = addend.view();
  Tensor result = inPlace ? at : out.view();
  EXPECT_OK(matmulEpilogue(a.view(), b.view(), biasShape.empty() ? nullptr : &bt,
                           withAddend ? &at : nullptr, result));
  Buf &got = inPlace ? addend : out;
  for (int64_t i = 0; i < got.count(); ++i)
    ASSERT_TRUE(close(got.data<float>()[i], want[i], 1e-5, 1e-5)) << "at " << i;
}

TEST(RuntimeMatmul, EpilogueBiasAndAddend) {
  for (bool addend : {false, true}) {
    checkEpilogue({3, 4}, {4, 5}, {3, 5}, {5}, addend);
    checkEpilogue({2, 3, 4}, {4, 5}, {2, 3, 5}, {1, 1, 5}, addend); // stacked
    checkEpilogue({2, 3, 4}, {2, 4, 5}, {2, 3, 5}, {1, 5}, addend); // batched
    checkEpilogue({3, 4}, {2, 4, 5}, {2, 3, 5}, {5}, addend); // lhs broadcast
    checkEpilogue({64, 96}, {96, 80}, {64, 80}, {80}, addend); // threads split
  }
  checkEpilogue({2, 3, 4}, {4, 5}, {2, 3, 5}, {}, true);       // addend only
  checkEpilogue({2, 3, 4}, {4, 5}, {2, 3, 5}, {5}, true, true); // over addend
  checkEpilogue({64, 96}, {96, 80}, {64, 80}, {}, true, true);
}

TEST(RuntimeMatmul, EpilogueTransposedAndNarrow) {
  // rhs stored transposed ([n, k]), the bias added once per row.
  Buf a = randomF32({3, 4}), b = randomF32({4, 2}), bt(DType::F32, {2, 4});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      bt.data<float>()[j * 4 + i] = b.data<float>()[i * 2 + j];
  Buf bias = f32({2}, {10, -10}), out(DType::F32, {3, 2});
  Tensor bv = bias.view();
  EXPECT_OK(matmulEpilogue(a.view(), bt.view(), &bv, nullptr, out.view(),
                           false, true));
  std::vector<double> want = refMatmul(a, b, {3, 2});
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(close(out.data<float>()[i], want[i] + (i % 2 ? -10 : 10),
                      1e-5, 1e-5));
  for (const auto &[t, toBits, fromBits] : kHalfFormats) {
    // Narrow operands: an f32 result adds f32 terms to the accumulator; a
    // narrow result adds its own type's bias and is rounded once.
    Buf h = randomOf(t, {2, 3, 8}), w = randomOf(t, {8, 4});
    Buf wide(DType::F32, {2, 3, 4}), r(t, {2, 3, 4});
    Buf fb = randomF32({4}), nb = randomOf(t, {4});
    Tensor fbv = fb.view(), nbv = nb.view();
    EXPECT_OK(matmul(h.view(), w.view(), wide.view()));
    std::vector<float> product = wide.values<float>();
    EXPECT_OK(matmulEpilogue(h.view(), w.view(), &fbv, nullptr, wide.view()));
    EXPECT_OK(matmulEpilogue(h.view(), w.view(), &nbv, nullptr, r.view()));
    for (int e = 0; e < 24; ++e) {
      EXPECT_TRUE(close(wide.data<float>()[e], product[e] + fb.data<float>()[e % 4],
                        1e-6, 1e-6)) << e;
      float exact = product[e] + fromBits(nb.data<uint16_t>()[e % 4]);
      EXPECT_TRUE(close(fromBits(r.data<uint16_t>()[e]), exact, 1e-2, 1e-2))
          << e;
    }
    Tensor wrong = fb.view();
    EXPECT_ERROR(matmulEpilogue(h.view(), w.view(), &wrong, nullptr, r.view()),
                 "is not a row");
  }
}

TEST(RuntimeMatmul, EpilogueEdgesAndErrors) {
  // k = 0: the empty sums are 0, the result addend + bias.
  Buf ek(DType::F32, {2, 0}), ek2(DType::F32, {0, 3});
  Buf bias = f32({3}, {1, 2, 3}), addend = f32({2, 3}, {10, 20, 30, 40, 50, 60});
  Buf out = f32({2, 3}, {7, 7, 7, 7, 7, 7});
  Tensor bv = bias.view(), av = addend.view();
  EXPECT_OK(matmulEpilogue(ek.view(), ek2.view(), &bv, &av, out.view()));
  EXPECT_EQ(out.values<float>(), (std::vector<float>{11, 22, 33, 41, 52, 63}));
  EXPECT_OK(matmulEpilogue(ek.view(), ek2.view(), nullptr, nullptr, out.view()));
  EXPECT_EQ(out.values<float>(), std::vector<float>(6, 0));
  Buf x = randomF32({2, 4}), y = randomF32({4, 3});
  Buf column(DType::F32, {2, 1}), longer(DType::F32, {4}), wide(DType::F32, {2, 3});
  Buf flat(DType::F32, {6});
  Tensor cv = column.view(), lv = longer.view(), fv = flat.view();
  EXPECT_ERROR(matmulEpilogue(x.view(), y.view(), &cv, nullptr, wide.view()),
               "is not a row of 3");
  EXPECT_ERROR(matmulEpilogue(x.view(), y.view(), &lv, nullptr, wide.view()),
               "is not a row of 3");
  EXPECT_ERROR(matmulEpilogue(x.view(), y.view(), nullptr, &fv, wide.view()),
               "addend");
  Buf bad(DType::F32, {4, 5});
  EXPECT_ERROR(matmulEpilogue(x.view(), bad.view(), &bv, nullptr, wide.view()),
               "does not give");
}

} // namespace
