//===- CudaAttentionTest.cpp - fused attention against the host kernels ---===//
//
// cu::attention and cu::attentionBackward against rt::attention and
// rt::attentionBackward on random inputs, in f32, bf16 and f16: causal or
// not, Sq == Sk and not (both ways), lengths off the 64-row tiles, shared
// kv heads (H/Hk = 2 and 4), the three bias shapes (one with -inf entries
// and a row of nothing but -inf), the tensor-core shapes (f16/bf16 with D =
// Dv = 64 or 128) and generic ones (D = 40 / Dv = 24, D != Dv, D = 200 /
// Dv = 256). The backward on both sides runs on the host forward's out and
// lse, so each direction is checked on its own. Every case runs in both
// layouts (head-major [B, heads, S, D] and seq-major [B, S, heads, D], the
// device and the host given the same one); seq-major results are also
// checked against the head-major ones transposed.
//
// Tolerances scale with each result's largest magnitude: the tensor-core
// path rounds P and dS to f16/bf16 before the products (the host keeps
// them f32), which moves a result by a few of that type's ulps of the
// largest term, not of the (possibly cancelled) result itself.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <limits>
#include <sstream>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

enum class BiasKind { None, Matrix, PerKey, Full }; // [Sq,Sk] [B,1,1,Sk] full

struct Case {
  int64_t B, H, Hk, Sq, Sk, D, Dv;
  bool causal;
  BiasKind bias;
};

constexpr AttentionLayout kHeadMajor = AttentionLayout::HeadMajor,
                          kSeqMajor = AttentionLayout::SeqMajor;
const AttentionLayout kLayouts[] = {kHeadMajor, kSeqMajor};

std::string describeCase(const Case &c, DType t, AttentionLayout layout) {
  std::ostringstream os;
  os << dtypeName(t) << (layout == kSeqMajor ? " seq-major" : " head-major")
     << " B" << c.B << " H" << c.H << " Hk" << c.Hk << " Sq" << c.Sq << " Sk"
     << c.Sk << " D" << c.D << " Dv" << c.Dv << (c.causal ? " causal" : "")
     << " bias" << int(c.bias);
  return os.str();
}

/// The shape of a q/k/v/out-like operand of `heads` heads of S rows of
/// `width`: [B, heads, S, width], seq-major [B, S, heads, width].
std::vector<int64_t> shapeOf(AttentionLayout layout, int64_t B, int64_t heads,
                             int64_t S, int64_t width) {
  if (layout == kSeqMajor)
    return {B, S, heads, width};
  return {B, heads, S, width};
}

/// b with its dims 1 and 2 swapped (head-major <-> seq-major).
Buf swapHeadsAndRows(Buf b) {
  const std::vector<int64_t> &s = b.shape;
  Buf t(b.dtype, {s[0], s[2], s[1], s[3]});
  size_t row = size_t(s[3]) * dtypeSize(b.dtype);
  for (int64_t i = 0; i < s[0]; ++i)
    for (int64_t x = 0; x < s[1]; ++x)
      for (int64_t y = 0; y < s[2]; ++y)
        if (row)
          std::memcpy(t.bytes.data() + ((i * s[2] + y) * s[1] + x) * row,
                      b.bytes.data() + ((i * s[1] + x) * s[2] + y) * row, row);
  return t;
}

/// f32 values as type t (rounded to nearest even).
Buf asType(Buf f, DType t) {
  if (t == DType::F32)
    return f;
  Buf b(t, f.shape);
  for (int64_t i = 0; i < f.count(); ++i)
    b.data<uint16_t>()[i] = t == DType::BF16
                                ? math::floatToBf16(f.data<float>()[i])
                                : math::floatToHalf(f.data<float>()[i]);
  return b;
}

/// A random bias in [-1, 1]; the [Sq, Sk] one also has -inf at every fifth
/// element and in all of row 2 (a row without a finite score).
Buf makeBias(const Case &c, DType t) {
  std::vector<int64_t> shape;
  switch (c.bias) {
  case BiasKind::Matrix: shape = {c.Sq, c.Sk}; break;
  case BiasKind::PerKey: shape = {c.B, 1, 1, c.Sk}; break;
  default: shape = {c.B, c.H, c.Sq, c.Sk}; break;
  }
  Buf f = randomF32(shape, -1, 1);
  if (c.bias == BiasKind::Matrix) {
    for (int64_t i = 0; i < f.count(); ++i)
      if (i % 5 == 3 || i / c.Sk == 2)
        f.data<float>()[i] = -kInf;
  }
  return asType(f, t);
}

/// |got - want| <= rel |want| + abs max(1, max |want|) elementwise.
::testing::AssertionResult near(Buf got, Buf want, double rel, double abs) {
  double peak = 1;
  for (int64_t i = 0; i < want.count(); ++i) {
    double w = valueAt(want, i);
    if (std::isfinite(w))
      peak = std::max(peak, std::fabs(w));
  }
  return allClose(std::move(got), std::move(want), rel, abs * peak);
}
double relOf(DType t) {
  return t == DType::F32 ? 1e-4 : t == DType::F16 ? 5e-3 : 2e-2;
}
double absOf(DType t) {
  return t == DType::F32 ? 2e-5 : t == DType::F16 ? 3e-3 : 1e-2;
}

/// Forward and backward of one case on the device against the host, both
/// in `layout`.
void checkCase(cudaStream_t stream, const Case &c, DType t,
               AttentionLayout layout, DType biasType = DType::F32) {
  SCOPED_TRACE(describeCase(c, t, layout));
  Buf q = randomOf(t, shapeOf(layout, c.B, c.H, c.Sq, c.D), -1, 1),
      k = randomOf(t, shapeOf(layout, c.B, c.Hk, c.Sk, c.D), -1, 1),
      v = randomOf(t, shapeOf(layout, c.B, c.Hk, c.Sk, c.Dv), -1, 1),
      dO = randomOf(t, shapeOf(layout, c.B, c.H, c.Sq, c.Dv), -1, 1);
  Buf bias = c.bias == BiasKind::None ? Buf() : makeBias(c, biasType);
  double scale = 1.0 / std::sqrt(double(c.D ? c.D : 1));
  Tensor hb = bias.view();
  const Tensor *hbias = c.bias == BiasKind::None ? nullptr : &hb;

  Buf out(t, shapeOf(layout, c.B, c.H, c.Sq, c.Dv)),
      lse(DType::F32, {c.B, c.H, c.Sq});
  ASSERT_TRUE(attention(q.view(), k.view(), v.view(), hbias, scale, c.causal,
                        out.view(), lse.view(), layout)
                  .ok());
  Buf gq(t, q.shape), gk(t, k.shape), gv(t, v.shape);
  ASSERT_TRUE(attentionBackward(q.view(), k.view(), v.view(), hbias, out.view(),
                                lse.view(), dO.view(), scale, c.causal,
                                gq.view(), gk.view(), gv.view(), layout)
                  .ok());

  Dev dq(q), dk(k), dv(v), ddO(dO), dbias(bias), hostOut(out), hostLse(lse);
  Dev dout(t, out.shape), dlse(DType::F32, lse.shape);
  Tensor db = dbias.view();
  const Tensor *devBias = hbias ? &db : nullptr;
  EXPECT_OK(cu::attention(dq.view(), dk.view(), dv.view(), devBias, scale,
                          c.causal, dout.view(), dlse.view(), layout, stream));
  Dev dgq(t, q.shape), dgk(t, k.shape), dgv(t, v.shape);
  EXPECT_OK(cu::attentionBackward(dq.view(), dk.view(), dv.view(), devBias,
                                  hostOut.view(), hostLse.view(), ddO.view(),
                                  scale, c.causal, dgq.view(), dgk.view(),
                                  dgv.view(), layout, stream));
  EXPECT_OK(cu::deviceStatus(stream));
  EXPECT_TRUE(near(dout.download(), out, relOf(t), absOf(t))) << "out";
  EXPECT_TRUE(allClose(dlse.download(), lse, 1e-4, 1e-4)) << "lse";
  EXPECT_TRUE(near(dgq.download(), gq, relOf(t), absOf(t))) << "gradQ";
  EXPECT_TRUE(near(dgk.download(), gk, relOf(t), absOf(t))) << "gradK";
  EXPECT_TRUE(near(dgv.download(), gv, relOf(t), absOf(t))) << "gradV";
}

// Tensor-core shapes for f16/bf16 (D == Dv in {64, 128}); f32 takes the
// generic path on them.
const Case kFastCases[] = {
    {2, 4, 4, 100, 100, 64, 64, true, BiasKind::None},
    {1, 4, 2, 77, 130, 128, 128, false, BiasKind::PerKey},
    {2, 4, 1, 130, 77, 64, 64, true, BiasKind::Matrix},
    {1, 2, 1, 64, 192, 128, 128, true, BiasKind::Full},
    {1, 2, 2, 257, 257, 128, 128, true, BiasKind::None},
    {1, 1, 1, 1, 1, 64, 64, false, BiasKind::None},
};
// Shapes only the generic path takes.
const Case kGenericCases[] = {
    {2, 4, 2, 77, 100, 40, 24, true, BiasKind::Full},
    {1, 4, 4, 33, 33, 128, 64, false, BiasKind::Matrix},
    {1, 2, 1, 20, 50, 200, 256, true, BiasKind::PerKey},
    {1, 4, 1, 70, 45, 40, 24, true, BiasKind::None},
};

TEST_F(CudaKernel, AttentionTensorCoreShapesMatchHost) {
  for (AttentionLayout layout : kLayouts)
    for (DType t : kFloatTypes)
      for (const Case &c : kFastCases)
        checkCase(stream, c, t, layout);
}

TEST_F(CudaKernel, AttentionGenericShapesMatchHost) {
  for (AttentionLayout layout : kLayouts)
    for (DType t : kFloatTypes)
      for (const Case &c : kGenericCases)
        checkCase(stream, c, t, layout);
}

TEST_F(CudaKernel, AttentionBiasOfAnotherTypeMatchesHost) {
  for (AttentionLayout layout : kLayouts) {
    checkCase(stream, {1, 2, 2, 50, 70, 64, 64, false, BiasKind::Matrix},
              DType::BF16, layout, DType::F16);
    checkCase(stream, {1, 2, 2, 50, 70, 40, 24, true, BiasKind::Full},
              DType::F32, layout, DType::BF16);
  }
}

TEST_F(CudaKernel, AttentionWithoutKeysOrQueries) {
  // No keys: out 0, lse -inf, gradQ 0. No queries: gradK and gradV 0.
  for (AttentionLayout layout : kLayouts)
    for (DType t : {DType::F32, DType::BF16}) {
      checkCase(stream, {1, 2, 2, 5, 0, 64, 64, false, BiasKind::None}, t,
                layout);
      checkCase(stream, {1, 2, 1, 0, 10, 64, 64, true, BiasKind::None}, t,
                layout);
    }
}

TEST_F(CudaKernel, AttentionSeqMajorIsHeadMajorTransposed) {
  // The device's seq-major results on transposed operands are its
  // head-major results transposed (same kernels, same tiles and order: equal
  // up to nothing but the addressing), lse and bias untouched.
  const Case cases[] = {
      {2, 4, 2, 77, 130, 64, 64, true, BiasKind::Full},     // tensor cores
      {1, 4, 1, 70, 100, 128, 128, true, BiasKind::None},   // tensor cores
      {2, 4, 2, 77, 100, 40, 24, true, BiasKind::PerKey},   // generic
      {1, 2, 1, 33, 20, 200, 256, false, BiasKind::Matrix}, // generic
  };
  for (DType t : kFloatTypes)
    for (const Case &c : cases) {
      SCOPED_TRACE(describeCase(c, t, kSeqMajor));
      Buf q = randomOf(t, {c.B, c.H, c.Sq, c.D}, -1, 1),
          k = randomOf(t, {c.B, c.Hk, c.Sk, c.D}, -1, 1),
          v = randomOf(t, {c.B, c.Hk, c.Sk, c.Dv}, -1, 1),
          dO = randomOf(t, {c.B, c.H, c.Sq, c.Dv}, -1, 1);
      Buf bias = c.bias == BiasKind::None ? Buf() : makeBias(c, DType::F32);
      Dev dbias(bias);
      Tensor db = dbias.view();
      const Tensor *devBias = c.bias == BiasKind::None ? nullptr : &db;
      double scale = 1.0 / std::sqrt(double(c.D));
      Buf got[2][5]; // per layout: out, lse, gradQ, gradK, gradV
      for (int l = 0; l < 2; ++l) {
        AttentionLayout layout = kLayouts[l];
        auto in = [&](const Buf &b) {
          return layout == kSeqMajor ? swapHeadsAndRows(b) : b;
        };
        Dev dq(in(q)), dk(in(k)), dv(in(v)), ddO(in(dO));
        Dev out(t, shapeOf(layout, c.B, c.H, c.Sq, c.Dv)),
            lse(DType::F32, {c.B, c.H, c.Sq});
        Dev gq(t, dq.shape), gk(t, dk.shape), gv(t, dv.shape);
        EXPECT_OK(cu::attention(dq.view(), dk.view(), dv.view(), devBias, scale,
                                c.causal, out.view(), lse.view(), layout,
                                stream));
        EXPECT_OK(cu::attentionBackward(dq.view(), dk.view(), dv.view(),
                                        devBias, out.view(), lse.view(),
                                        ddO.view(), scale, c.causal, gq.view(),
                                        gk.view(), gv.view(), layout, stream));
        sync();
        got[l][0] = out.download();
        got[l][1] = lse.download();
        got[l][2] = gq.download();
        got[l][3] = gk.download();
        got[l][4] = gv.download();
      }
      const char *names[] = {"out", "lse", "gradQ", "gradK", "gradV"};
      for (int i = 0; i < 5; ++i) {
        Buf seq = i == 1 ? got[1][i] : swapHeadsAndRows(got[1][i]);
        EXPECT_EQ(seq.shape, got[0][i].shape) << names[i];
        EXPECT_TRUE(seq.bytes == got[0][i].bytes) << names[i];
      }
    }
}

TEST_F(CudaKernel, AttentionPropagatesNaN) {
  // A NaN key reaches every row that sees it (the causal rows from 3 on)
  // as NaN, as on the host: not a row of zeros with lse -inf. Two query
  // heads share the one kv head (k has one head: the NaN is key 3's first
  // element in either layout).
  for (AttentionLayout layout : kLayouts)
    for (DType t : kFloatTypes)
      for (int64_t d : {64, 40}) { // tensor-core (f16/bf16) and generic
        SCOPED_TRACE(std::string(dtypeName(t)) + " D" + std::to_string(d) +
                     (layout == kSeqMajor ? " seq-major" : " head-major"));
        const int64_t S = 8, H = 2;
        Buf q = randomOf(t, shapeOf(layout, 1, H, S, d), -1, 1),
            v = randomOf(t, shapeOf(layout, 1, 1, S, d), -1, 1);
        Buf kf = randomF32(shapeOf(layout, 1, 1, S, d), -1, 1);
        kf.data<float>()[3 * d] = std::numeric_limits<float>::quiet_NaN();
        Buf k = asType(kf, t);
        Buf out(t, shapeOf(layout, 1, H, S, d)), lse(DType::F32, {1, H, S});
        ASSERT_TRUE(attention(q.view(), k.view(), v.view(), nullptr, 0.125,
                              true, out.view(), lse.view(), layout)
                        .ok());
        Dev dq(q), dk(k), dv(v), dout(t, out.shape),
            dlse(DType::F32, lse.shape);
        EXPECT_OK(cu::attention(dq.view(), dk.view(), dv.view(), nullptr, 0.125,
                                true, dout.view(), dlse.view(), layout,
                                stream));
        EXPECT_OK(cu::deviceStatus(stream));
        Buf got = dout.download(), gotLse = dlse.download();
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < S; ++i) {
            int64_t row = layout == kSeqMajor ? i * H + h : h * S + i;
            EXPECT_EQ(std::isnan(valueAt(got, row * d)), i >= 3)
                << "head " << h << " row " << i;
            EXPECT_EQ(std::isnan(valueAt(gotLse, h * S + i)),
                      std::isnan(valueAt(lse, h * S + i)))
                << "lse head " << h << " row " << i;
          }
      }
}

TEST_F(CudaKernel, AttentionBackwardIsDeterministic) {
  for (AttentionLayout layout : kLayouts)
    for (DType t : {DType::F32, DType::BF16}) {
      Case c{1, 4, 1, 150, 150, 64, 64, true, BiasKind::None};
      Dev q(randomOf(t, shapeOf(layout, c.B, c.H, c.Sq, c.D), -1, 1)),
          k(randomOf(t, shapeOf(layout, c.B, c.Hk, c.Sk, c.D), -1, 1)),
          v(randomOf(t, shapeOf(layout, c.B, c.Hk, c.Sk, c.Dv), -1, 1)),
          dO(randomOf(t, shapeOf(layout, c.B, c.H, c.Sq, c.Dv), -1, 1));
      Dev out(t, shapeOf(layout, c.B, c.H, c.Sq, c.Dv)),
          lse(DType::F32, {c.B, c.H, c.Sq});
      EXPECT_OK(cu::attention(q.view(), k.view(), v.view(), nullptr, 0.125,
                              true, out.view(), lse.view(), layout, stream));
      std::vector<uint8_t> first[3];
      for (int run = 0; run < 2; ++run) {
        Dev gq(t, q.shape), gk(t, k.shape), gv(t, v.shape);
        EXPECT_OK(cu::attentionBackward(q.view(), k.view(), v.view(), nullptr,
                                        out.view(), lse.view(), dO.view(),
                                        0.125, true, gq.view(), gk.view(),
                                        gv.view(), layout, stream));
        sync();
        Buf got[3] = {gq.download(), gk.download(), gv.download()};
        for (int i = 0; i < 3; ++i) {
          if (run == 0)
            first[i] = got[i].bytes;
          else
            EXPECT_EQ(got[i].bytes, first[i])
                << dtypeName(t) << " gradient " << i;
        }
      }
    }
}

TEST(CudaChecks, AttentionRejectsBadOperandsBeforeLaunching) {
  int64_t q4[] = {1, 2, 8, 16}, k8[] = {1, 2, 8, 8}, l3[] = {1, 2, 8},
          big[] = {1, 2, 8, 512}, bl3[] = {1, 2, 8};
  float dummy[4];
  auto view = [&](DType t, const int64_t *shape, int rank) {
    return Tensor{dummy, t, rank, shape};
  };
  Tensor q = view(DType::F32, q4, 4), kBad = view(DType::F32, k8, 4),
         lse = view(DType::F32, l3, 3);
  cudaStream_t s = nullptr;
  EXPECT_ERROR(cu::attention(q, kBad, q, nullptr, 0.25, false, q, lse, s),
               "attention: q [B, H, Sq, D] needs k [B, Hk, Sk, D]");
  EXPECT_ERROR(cu::attention(q, kBad, q, nullptr, 0.25, false, q, lse,
                             AttentionLayout::SeqMajor, s),
               "attention: q [B, Sq, H, D] needs k [B, Sk, Hk, D]");
  // Seq-major q [1, 8, 2, 16] (Sq 8, H 2) needs out [1, 8, 2, 16], not a
  // head-major [1, 2, 8, 16].
  int64_t qs4[] = {1, 8, 2, 16};
  Tensor qs = view(DType::F32, qs4, 4);
  EXPECT_ERROR(cu::attention(qs, qs, qs, nullptr, 0.25, false, q, lse,
                             AttentionLayout::SeqMajor, s),
               "results must be out [B, Sq, H, Dv]");
  EXPECT_ERROR(cu::attentionBackward(qs, qs, qs, nullptr, qs, lse, q, 0.25,
                                     false, qs, qs, qs,
                                     AttentionLayout::SeqMajor, s),
               "attention_grad: gradient");
  EXPECT_ERROR(cu::attentionBackward(q, q, q, nullptr, q, lse, q, 0.25, false,
                                     kBad, q, q, s),
               "attention_grad: gradient");
  Tensor bias = view(DType::F32, l3, 3); // [1, 2, 8] vs [B, H, 8, 8]: Sq = 2
  Tensor q2 = view(DType::F32, q4, 4);
  EXPECT_ERROR(cu::attention(q2, q2, q2, &bias, 0.25, false, q2, lse, s),
               "broadcastable");
  Tensor q64 = view(DType::F64, q4, 4), lse64 = view(DType::F64, l3, 3);
  EXPECT_ERROR(cu::attention(q64, q64, q64, nullptr, 0.25, false, q64, lse64,
                             s),
               "f32, f16, bf16 only");
  Tensor qBig = view(DType::BF16, big, 4), lBig = view(DType::F32, bl3, 3);
  EXPECT_ERROR(cu::attention(qBig, qBig, qBig, nullptr, 0.25, false, qBig,
                             lBig, s),
               "exceed");
}

} // namespace
