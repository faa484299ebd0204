//===- AttentionTest.cpp - fused attention against a double reference -----===//

#include "RuntimeTestUtil.h"

#include <limits>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

struct Shape {
  int64_t b, h, hk, sq, sk, d, dv;
};

/// The naive double-precision forward and backward: the whole score
/// matrix, softmax per row, and the textbook gradients.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Shape &s, Buf &q, Buf &k, Buf &v, Buf *bias,
                    double scale, bool causal, Buf *gradOut) {
  Reference r;
  r.out.assign(size_t(s.b * s.h * s.sq * s.dv), 0);
  r.lse.assign(size_t(s.b * s.h * s.sq), 0);
  r.dq.assign(size_t(s.b * s.h * s.sq * s.d), 0);
  r.dk.assign(size_t(s.b * s.hk * s.sk * s.d), 0);
  r.dv.assign(size_t(s.b * s.hk * s.sk * s.dv), 0);
  int64_t g = s.h / s.hk;
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h) {
      int64_t kvh = h / g, bh = b * s.h + h, bk = b * s.hk + kvh;
      for (int64_t i = 0; i < s.sq; ++i) {
        std::vector<double> p(size_t(s.sk), 0);
        double mx = -INFINITY;
        std::vector<bool> keep(size_t(s.sk));
        for (int64_t j = 0; j < s.sk; ++j) {
          keep[j] = !causal || j <= i + s.sk - s.sq;
          if (!keep[j])
            continue;
          double dot = 0;
          for (int64_t c = 0; c < s.d; ++c)
            dot += valueAt(q, (bh * s.sq + i) * s.d + c) *
                   valueAt(k, (bk * s.sk + j) * s.d + c);
          p[j] = scale * dot;
          if (bias)
            p[j] += valueAt(*bias, broadcastIndex({b, h, i, j}, bias->shape));
          mx = std::max(mx, p[j]);
        }
        if (mx == -INFINITY) {
          r.lse[bh * s.sq + i] = -INFINITY;
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < s.sk; ++j)
          sum += keep[j] ? std::exp(p[j] - mx) : 0;
        for (int64_t j = 0; j < s.sk; ++j)
          p[j] = keep[j] ? std::exp(p[j] - mx) / sum : 0;
        r.lse[bh * s.sq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < s.sk; ++j)
          for (int64_t c = 0; c < s.dv; ++c)
            r.out[(bh * s.sq + i) * s.dv + c] +=
                p[j] * valueAt(v, (bk * s.sk + j) * s.dv + c);
        if (!gradOut)
          continue;
        // dP = dO v^T, dS = P (dP - dO . O), dQ = scale dS k, dK = scale dS^T q.
        double delta = 0;
        for (int64_t c = 0; c < s.dv; ++c)
          delta += valueAt(*gradOut, (bh * s.sq + i) * s.dv + c) *
                   r.out[(bh * s.sq + i) * s.dv + c];
        for (int64_t j = 0; j < s.sk; ++j) {
          double dp = 0;
          for (int64_t c = 0; c < s.dv; ++c) {
            double go = valueAt(*gradOut, (bh * s.sq + i) * s.dv + c);
            dp += go * valueAt(v, (bk * s.sk + j) * s.dv + c);
            r.dv[(bk * s.sk + j) * s.dv + c] += p[j] * go;
          }
          double ds = scale * p[j] * (dp - delta);
          for (int64_t c = 0; c < s.d; ++c) {
            r.dq[(bh * s.sq + i) * s.d + c] +=
                ds * valueAt(k, (bk * s.sk + j) * s.d + c);
            r.dk[(bk * s.sk + j) * s.d + c] +=
                ds * valueAt(q, (bh * s.sq + i) * s.d + c);
          }
        }
      }
    }
  return r;
}

::testing::AssertionResult allClose(Buf &got, const std::vector<double> &want,
                                    double rel, double abs) {
  for (int64_t i = 0; i < got.count(); ++i)
    if (auto c = close(valueAt(got, i), want[size_t(i)], rel, abs); !c)
      return c << " at " << i;
  return ::testing::AssertionSuccess();
}

/// x [B, X, Y, D] as [B, Y, X, D]: head-major <-> seq-major.
Buf swapHeadsAndRows(Buf &x) {
  std::vector<int64_t> shape = x.shape;
  std::swap(shape[1], shape[2]);
  Buf y(x.dtype, shape);
  size_t row = size_t(x.shape[3]) * dtypeSize(x.dtype);
  for (int64_t b = 0; b < x.shape[0]; ++b)
    for (int64_t i = 0; i < x.shape[1]; ++i)
      for (int64_t j = 0; j < x.shape[2]; ++j)
        std::memcpy(y.bytes.data() + ((b * shape[1] + j) * shape[2] + i) * row,
                    x.bytes.data() + ((b * x.shape[1] + i) * x.shape[2] + j) * row,
                    row);
  return y;
}

/// Runs forward and backward on random inputs and compares all five results
/// (SeqMajor: the kernels run on the operands transposed to [B, S, heads,
/// D], their results transposed back for the head-major reference).
void check(const Shape &s, DType t, bool causal,
           std::vector<int64_t> biasShape = {}, double rel = 1e-4,
           double abs = 1e-5,
           AttentionLayout layout = AttentionLayout::HeadMajor) {
  bool seq = layout == AttentionLayout::SeqMajor;
  SCOPED_TRACE(testing::Message()
               << dtypeName(t) << " causal " << causal << " B" << s.b << " H"
               << s.h << "/" << s.hk << " Sq" << s.sq << " Sk" << s.sk << " D"
               << s.d << "/" << s.dv << " bias rank " << biasShape.size()
               << (seq ? " seq-major" : ""));
  Buf q = randomOf(t, {s.b, s.h, s.sq, s.d});
  Buf k = randomOf(t, {s.b, s.hk, s.sk, s.d});
  Buf v = randomOf(t, {s.b, s.hk, s.sk, s.dv});
  Buf go = randomOf(t, {s.b, s.h, s.sq, s.dv});
  Buf bias = randomF32(biasShape, -1, 1);
  Buf *biasPtr = biasShape.empty() ? nullptr : &bias;
  Tensor biasView = bias.view();
  double scale = 1 / std::sqrt(double(s.d));
  DType lseType = t == DType::F64 ? DType::F64 : DType::F32;
  Buf out(t, {s.b, s.h, s.sq, s.dv}), lse(lseType, {s.b, s.h, s.sq});
  Buf dq(t, q.shape), dk(t, k.shape), dv(t, v.shape);
  if (seq) {
    Buf qs = swapHeadsAndRows(q), ks = swapHeadsAndRows(k),
        vs = swapHeadsAndRows(v), gos = swapHeadsAndRows(go),
        outs = swapHeadsAndRows(out);
    Buf dqs(t, qs.shape), dks(t, ks.shape), dvs(t, vs.shape);
    ASSERT_OK(attention(qs.view(), ks.view(), vs.view(),
                        biasPtr ? &biasView : nullptr, scale, causal,
                        outs.view(), lse.view(), layout));
    ASSERT_OK(attentionBackward(qs.view(), ks.view(), vs.view(),
                                biasPtr ? &biasView : nullptr, outs.view(),
                                lse.view(), gos.view(), scale, causal,
                                dqs.view(), dks.view(), dvs.view(), layout));
    out = swapHeadsAndRows(outs);
    dq = swapHeadsAndRows(dqs);
    dk = swapHeadsAndRows(dks);
    dv = swapHeadsAndRows(dvs);
  } else {
    ASSERT_OK(attention(q.view(), k.view(), v.view(),
                        biasPtr ? &biasView : nullptr, scale, causal,
                        out.view(), lse.view()));
    ASSERT_OK(attentionBackward(q.view(), k.view(), v.view(),
                                biasPtr ? &biasView : nullptr, out.view(),
                                lse.view(), go.view(), scale, causal,
                                dq.view(), dk.view(), dv.view()));
  }
  Reference r = reference(s, q, k, v, biasPtr, scale, causal, &go);
  EXPECT_TRUE(allClose(out, r.out, rel, abs)) << "out";
  EXPECT_TRUE(allClose(lse, r.lse, rel, abs)) << "lse";
  // The gradients sum over Sk (dq) or Sq x heads (dk, dv) products.
  double gradAbs = abs * std::sqrt(double(s.sq + s.sk));
  EXPECT_TRUE(allClose(dq, r.dq, rel, gradAbs)) << "dq";
  EXPECT_TRUE(allClose(dk, r.dk, rel, gradAbs)) << "dk";
  EXPECT_TRUE(allClose(dv, r.dv, rel, gradAbs)) << "dv";
}

TEST(RuntimeAttention, MatchesDoubleReference) {
  // Row blocks of 64: 70 rows take two, the second partial.
  check({2, 4, 2, 70, 70, 8, 6}, DType::F32, /*causal=*/true);
  check({2, 4, 2, 70, 70, 8, 6}, DType::F32, /*causal=*/false);
  check({1, 2, 1, 5, 9, 4, 3}, DType::F32, /*causal=*/true); // Sq < Sk
  check({1, 3, 3, 9, 5, 4, 4}, DType::F32, /*causal=*/true); // rows with no key
  check({2, 2, 2, 6, 7, 5, 5}, DType::F64, /*causal=*/false, {}, 1e-12, 1e-13);
}

TEST(RuntimeAttention, BiasBroadcasts) {
  Shape s = {2, 4, 4, 6, 7, 4, 3};
  for (std::vector<int64_t> bias :
       {std::vector<int64_t>{6, 7}, {2, 1, 1, 7}, {2, 4, 6, 7}, {4, 1, 7}, {}})
    for (bool causal : {false, true})
      check(s, DType::F32, causal, bias);
}

TEST(RuntimeAttention, HalfTypesWidenAndRound) {
  // Inputs rounded to 16 bits are exact in the reference; the results are
  // rounded once on store (bf16: 8 bits of mantissa).
  check({1, 2, 1, 20, 20, 16, 16}, DType::BF16, true, {}, 1.6e-2, 1e-2);
  check({1, 2, 2, 20, 33, 16, 8}, DType::F16, false, {20, 33}, 2e-3, 1e-3);
}

TEST(RuntimeAttention, SeqMajorLayout) {
  // [B, S, heads, D] operands: rows H*D (Hk*D) apart; the same values as
  // head-major, in f32 (read in place) and bf16 (widened copies).
  const AttentionLayout seq = AttentionLayout::SeqMajor;
  check({2, 4, 2, 70, 70, 8, 6}, DType::F32, true, {}, 1e-4, 1e-5, seq);
  check({1, 2, 1, 5, 9, 4, 3}, DType::F32, true, {}, 1e-4, 1e-5, seq);
  check({2, 4, 4, 6, 7, 4, 3}, DType::F32, false, {2, 1, 1, 7}, 1e-4, 1e-5,
        seq);
  check({2, 2, 2, 6, 7, 5, 5}, DType::F64, false, {}, 1e-12, 1e-13, seq);
  check({1, 2, 1, 20, 20, 16, 16}, DType::BF16, true, {}, 1.6e-2, 1e-2, seq);
  // Shapes are read in the layout's order.
  Buf q(DType::F32, {1, 3, 4, 8}), k(DType::F32, {1, 5, 2, 8}),
      v(DType::F32, {1, 5, 2, 6}), out(DType::F32, {1, 3, 4, 6}),
      lse(DType::F32, {1, 4, 3});
  EXPECT_OK(attention(q.view(), k.view(), v.view(), nullptr, 1, true,
                      out.view(), lse.view(), seq));
  EXPECT_ERROR(attention(q.view(), k.view(), v.view(), nullptr, 1, true,
                         out.view(), lse.view()),
               "3 query heads cannot share 5 kv heads");
  Buf kh(DType::F32, {1, 2, 5, 8});
  EXPECT_ERROR(attention(q.view(), kh.view(), v.view(), nullptr, 1, true,
                         out.view(), lse.view(), seq),
               "needs k [B, Sk, Hk, D]");
  Buf outh(DType::F32, {1, 4, 3, 6});
  EXPECT_ERROR(attention(q.view(), k.view(), v.view(), nullptr, 1, true,
                         outh.view(), lse.view(), seq),
               "out [B, Sq, H, Dv]");
}

TEST(RuntimeAttention, FullyMaskedRowsGiveZero) {
  // Row 1 of the bias is -inf everywhere: out 0, lse -inf, no gradient.
  const float inf = std::numeric_limits<float>::infinity();
  Buf q = randomF32({1, 1, 3, 2}), k = randomF32({1, 1, 4, 2}),
      v = randomF32({1, 1, 4, 2}), go = randomF32({1, 1, 3, 2});
  Buf bias = f32({3, 4}, {0, 0, 0, 0, -inf, -inf, -inf, -inf, 0, -inf, 0, 0});
  Tensor bv = bias.view();
  Buf out(DType::F32, {1, 1, 3, 2}), lse(DType::F32, {1, 1, 3});
  EXPECT_OK(attention(q.view(), k.view(), v.view(), &bv, 1.0, false,
                      out.view(), lse.view()));
  EXPECT_EQ(lse.data<float>()[1], -inf);
  EXPECT_EQ(out.data<float>()[2], 0.0f);
  EXPECT_EQ(out.data<float>()[3], 0.0f);
  EXPECT_TRUE(std::isfinite(lse.data<float>()[0]) &&
              std::isfinite(lse.data<float>()[2]));
  Buf dq(DType::F32, q.shape), dk(DType::F32, k.shape), dv(DType::F32, v.shape);
  EXPECT_OK(attentionBackward(q.view(), k.view(), v.view(), &bv, out.view(),
                              lse.view(), go.view(), 1.0, false, dq.view(),
                              dk.view(), dv.view()));
  EXPECT_EQ(dq.data<float>()[2], 0.0f);
  EXPECT_EQ(dq.data<float>()[3], 0.0f);
  for (int64_t i = 0; i < dq.count(); ++i)
    EXPECT_TRUE(std::isfinite(dq.data<float>()[i]));
}

TEST(RuntimeAttention, RejectsInconsistentViews) {
  Buf q(DType::F32, {1, 4, 3, 8}), k(DType::F32, {1, 2, 5, 8}),
      v(DType::F32, {1, 2, 5, 6}), out(DType::F32, {1, 4, 3, 6}),
      lse(DType::F32, {1, 4, 3});
  EXPECT_OK(attention(q.view(), k.view(), v.view(), nullptr, 1, true,
                      out.view(), lse.view()));
  Buf k3(DType::F32, {1, 3, 5, 8}), v3(DType::F32, {1, 3, 5, 6});
  EXPECT_ERROR(attention(q.view(), k3.view(), v3.view(), nullptr, 1, false,
                         out.view(), lse.view()),
               "4 query heads cannot share 3 kv heads");
  Buf kd(DType::F32, {1, 2, 5, 7});
  EXPECT_ERROR(attention(q.view(), kd.view(), v.view(), nullptr, 1, false,
                         out.view(), lse.view()),
               "needs k [B, Hk, Sk, D]");
  Buf badBias(DType::F32, {3, 4});
  Tensor bb = badBias.view();
  EXPECT_ERROR(attention(q.view(), k.view(), v.view(), &bb, 1, false,
                         out.view(), lse.view()),
               "broadcastable to [1,4,3,5]");
  Buf lse16(DType::BF16, {1, 4, 3});
  EXPECT_ERROR(attention(q.view(), k.view(), v.view(), nullptr, 1, false,
                         out.view(), lse16.view()),
               "lse [B, H, Sq] of f32");
  Buf qh(DType::BF16, {1, 4, 3, 8});
  EXPECT_ERROR(attention(qh.view(), k.view(), v.view(), nullptr, 1, false,
                         out.view(), lse.view()),
               "one float type");
  Buf dk(DType::F32, {1, 2, 5, 6});
  EXPECT_ERROR(attentionBackward(q.view(), k.view(), v.view(), nullptr,
                                 out.view(), lse.view(), out.view(), 1, false,
                                 q.view(), dk.view(), v.view()),
               "attention_grad: gradient");
}

} // namespace
