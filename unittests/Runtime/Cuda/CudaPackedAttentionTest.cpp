//===- CudaPackedAttentionTest.cpp - attention on a packed q/k/v ----------===//
//
// cu::packedAttention and cu::packedAttentionBackward (graph.packed_attention)
// against cu::attention and cu::attentionBackward on the three slices of
// the packed tensor copied out, and the gradients concatenated back: the
// same computation. With cuDNN (on a GPU) the packed calls hand it the
// projection with a row stride, so results may differ by the engine's
// rounding; on the kernels (the emulator, or without cuDNN) the packed
// calls copy the slices out themselves and agree bit for bit.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <cstring>
#include <sstream>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// Columns [col, col + width) of each row of x [rows, W] (element size es).
Buf columns(const Buf &x, DType t, std::vector<int64_t> shape, int64_t col,
            int64_t width) {
  Buf out(t, std::move(shape));
  size_t es = dtypeSize(t);
  int64_t w = x.shape.back(), rows = x.count() / w;
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.bytes.data() + size_t(r * width) * es,
                x.bytes.data() + size_t(r * w + col) * es, size_t(width) * es);
  return out;
}

/// x [rows, W] with columns [col, col + width) replaced by part's rows.
void setColumns(Buf &x, const Buf &part, int64_t col, int64_t width) {
  size_t es = dtypeSize(x.dtype);
  int64_t w = x.shape.back(), rows = x.count() / w;
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(x.bytes.data() + size_t(r * w + col) * es,
                part.bytes.data() + size_t(r * width) * es, size_t(width) * es);
}

TEST_F(CudaKernel, PackedAttentionIsAttentionOnTheSlices) {
  struct Case {
    int64_t B, S, H, Hk, D;
    bool causal;
  };
  const Case cases[] = {{2, 37, 4, 4, 16, false}, {2, 37, 4, 2, 16, true},
                        {1, 70, 2, 2, 64, true}, {1, 33, 4, 1, 64, false}};
  for (DType t : {DType::F32, DType::BF16})
    for (const Case &c : cases) {
      std::ostringstream what;
      what << dtypeName(t) << " B" << c.B << " S" << c.S << " H" << c.H
           << " Hk" << c.Hk << " D" << c.D << (c.causal ? " causal" : "");
      int64_t W = (c.H + 2 * c.Hk) * c.D, qw = c.H * c.D, kw = c.Hk * c.D;
      double scale = 1.0 / std::sqrt(double(c.D));
      Buf qkv = randomOf(t, {c.B, c.S, W}, -1, 1),
          dO = randomOf(t, {c.B, c.S, c.H, c.D}, -1, 1);
      std::vector<int64_t> qs{c.B, c.S, c.H, c.D}, ks{c.B, c.S, c.Hk, c.D};
      Dev dqkv(qkv), ddO(dO), q(columns(qkv, t, qs, 0, qw)),
          k(columns(qkv, t, ks, qw, kw)), v(columns(qkv, t, ks, qw + kw, kw));
      // The unpacked reference.
      Dev out(t, qs), lse(DType::F32, {c.B, c.H, c.S}), gq(t, qs), gk(t, ks),
          gv(t, ks);
      EXPECT_OK(cu::attention(q.view(), k.view(), v.view(), nullptr, scale,
                              c.causal, out.view(), lse.view(),
                              AttentionLayout::SeqMajor, stream));
      EXPECT_OK(cu::attentionBackward(
          q.view(), k.view(), v.view(), nullptr, out.view(), lse.view(),
          ddO.view(), scale, c.causal, gq.view(), gk.view(), gv.view(),
          AttentionLayout::SeqMajor, stream));
      // Packed, the backward on the reference's out and lse.
      Dev pout(t, qs), plse(DType::F32, {c.B, c.H, c.S}),
          pgrad(t, {c.B, c.S, W});
      EXPECT_OK(cu::packedAttention(dqkv.view(), c.H, c.Hk, scale, c.causal,
                                    pout.view(), plse.view(), stream));
      EXPECT_OK(cu::packedAttentionBackward(dqkv.view(), out.view(),
                                            lse.view(), ddO.view(), c.H, c.Hk,
                                            scale, c.causal, pgrad.view(),
                                            stream));
      sync();
      Buf want(t, {c.B, c.S, W});
      setColumns(want, gq.download(), 0, qw);
      setColumns(want, gk.download(), qw, kw);
      setColumns(want, gv.download(), qw + kw, kw);
      EXPECT_TRUE(allClose(pout.download(), out.download(), relFor(t),
                           absFor(t)))
          << what.str();
      EXPECT_TRUE(allClose(plse.download(), lse.download(), 1e-5, 1e-5))
          << what.str();
      EXPECT_TRUE(allClose(pgrad.download(), want, relFor(t), absFor(t)))
          << what.str();
    }
}

TEST_F(CudaKernel, PackedAttentionRejectsWhatIsNotPacked) {
  Dev qkv(DType::BF16, {1, 8, 100}), out(DType::BF16, {1, 8, 4, 16}),
      lse(DType::F32, {1, 4, 8}), wrong(DType::BF16, {1, 8, 96});
  // 100 columns are no (4 + 2 x 2) x D.
  EXPECT_ERROR(cu::packedAttention(qkv.view(), 4, 2, 0.25, false, out.view(),
                                   lse.view(), stream),
               "is not [B, S, (4 + 2 x 2) D]");
  Dev good(DType::BF16, {1, 8, 128});
  EXPECT_ERROR(cu::packedAttention(good.view(), 4, 3, 0.25, false, out.view(),
                                   lse.view(), stream),
               "is not [B, S, (4 + 2 x 3) D]");
  EXPECT_ERROR(cu::packedAttentionBackward(good.view(), out.view(), lse.view(),
                                           out.view(), 4, 2, 0.25, false,
                                           wrong.view(), stream),
               "is not shaped as");
}

} // namespace
