//===- NNTest.cpp - softmax, log_softmax, layer_norm, rms_norm ------------===//

#include "RuntimeTestUtil.h"

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// Double-precision softmax (or log-softmax) along `axis`.
std::vector<double> refSoftmax(const std::vector<float> &x,
                               const std::vector<int64_t> &shape, int axis,
                               bool log) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<int64_t> idx = unravel(int64_t(i), shape), j = idx;
    double mx = -INFINITY, sum = 0;
    for (j[axis] = 0; j[axis] < shape[axis]; ++j[axis])
      mx = std::max(mx, double(x[ravel(j, shape)]));
    for (j[axis] = 0; j[axis] < shape[axis]; ++j[axis])
      sum += std::exp(double(x[ravel(j, shape)]) - mx);
    double v = double(x[i]) - mx;
    out[i] = log ? v - std::log(sum) : std::exp(v) / sum;
  }
  return out;
}

TEST(RuntimeSoftmax, EveryAxisMatchesReference) {
  std::vector<int64_t> shape = {3, 4, 5};
  Buf in = randomF32(shape, -4, 4);
  for (bool log : {false, true})
    for (int axis : {0, 1, 2, -1}) {
      Buf out(DType::F32, shape);
      EXPECT_OK(log ? logSoftmax(in.view(), axis, out.view())
                    : softmax(in.view(), axis, out.view()));
      std::vector<double> want =
          refSoftmax(in.values<float>(), shape, (axis + 3) % 3, log);
      for (int64_t i = 0; i < out.count(); ++i)
        ASSERT_TRUE(close(out.data<float>()[i], want[i], 1e-5, 1e-7));
    }
}

TEST(RuntimeSoftmax, LargeValuesDoNotOverflow) {
  Buf in = f32({2, 3}, {1000, 1001, 1002, -1e30f, 0, 3e38f});
  Buf out(DType::F32, {2, 3}), lout(DType::F32, {2, 3});
  EXPECT_OK(softmax(in.view(), 1, out.view()));
  EXPECT_OK(logSoftmax(in.view(), 1, lout.view()));
  std::vector<double> want = refSoftmax(in.values<float>(), {2, 3}, 1, false);
  std::vector<double> lwant = refSoftmax(in.values<float>(), {2, 3}, 1, true);
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(close(out.data<float>()[i], want[i], 1e-6, 1e-30));
    EXPECT_TRUE(close(lout.data<float>()[i], lwant[i], 1e-6));
  }
  EXPECT_EQ(out.data<float>()[5], 1.0f);
  EXPECT_TRUE(std::isfinite(lout.data<float>()[3]));
  Buf d = make<double>(DType::F64, {3}, {1e300, 1e300, -1e300});
  Buf dout(DType::F64, {3});
  EXPECT_OK(softmax(d.view(), 0, dout.view()));
  EXPECT_EQ(dout.values<double>(), (std::vector<double>{0.5, 0.5, 0}));
}

TEST(RuntimeSoftmax, HalfInPlaceAndErrors) {
  std::vector<float> v = {0.5f, -1.0f, 2.0f, 0.0f};
  Buf h(DType::BF16, {4});
  for (int i = 0; i < 4; ++i)
    h.data<uint16_t>()[i] = math::floatToBf16(v[i]);
  EXPECT_OK(softmax(h.view(), 0, h.view()));
  std::vector<double> want = refSoftmax(v, {4}, 0, false);
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(close(math::bf16ToFloat(h.data<uint16_t>()[i]), want[i],
                      1.0 / 256)); // half a bf16 ulp
  Buf ints(DType::I32, {4});
  EXPECT_ERROR(softmax(ints.view(), 0, ints.view()), "float");
  Buf f(DType::F32, {4});
  EXPECT_ERROR(softmax(f.view(), 1, f.view()), "axis");
}

/// Double-precision layer norm (bias optional) or RMS norm over dims from
/// `axis` on.
std::vector<double> refNorm(const std::vector<float> &x, int64_t n,
                            const std::vector<float> &scale,
                            const std::vector<float> *bias, double eps,
                            bool rms) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      mean += x[r * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) {
      double d = x[r * n + i] - (rms ? 0 : mean);
      sq += d * d;
    }
    double inv = 1 / std::sqrt(sq / n + eps);
    for (int64_t i = 0; i < n; ++i)
      out[r * n + i] = (x[r * n + i] - (rms ? 0 : mean)) * inv * scale[i] +
                       (bias ? (*bias)[i] : 0);
  }
  return out;
}

TEST(RuntimeNorm, LayerAndRmsNormMatchDoubleReference) {
  std::vector<int64_t> shape = {4, 6, 8};
  // An offset mean makes naive single-pass variance visibly wrong.
  Buf in = randomF32(shape, 99, 101);
  for (int64_t axis : {1, 2}) {
    std::vector<int64_t> ps(shape.begin() + axis, shape.end());
    Buf scale = randomF32(ps, 0.5f, 1.5f), bias = randomF32(ps);
    int64_t n = scale.count();
    std::vector<float> sv = scale.values<float>(), bv = bias.values<float>();
    for (int variant = 0; variant < 3; ++variant) {
      Buf out(DType::F32, shape);
      Tensor b = bias.view();
      bool rms = variant == 2, withBias = variant == 1;
      EXPECT_OK(rms ? rmsNorm(in.view(), scale.view(), axis, 1e-5, out.view())
                    : layerNorm(in.view(), scale.view(),
                                withBias ? &b : nullptr, axis, 1e-5,
                                out.view()));
      std::vector<double> want = refNorm(in.values<float>(), n, sv,
                                         withBias ? &bv : nullptr, 1e-5, rms);
      for (int64_t i = 0; i < out.count(); ++i)
        ASSERT_TRUE(close(out.data<float>()[i], want[i], 1e-5, 1e-6))
            << "variant " << variant << " axis " << axis << " at " << i;
    }
  }
}

TEST(RuntimeNorm, F64HalfInPlaceAndErrors) {
  std::vector<float> v = randomFloats(2 * 16);
  Buf d(DType::F64, {2, 16}),
      ds = make<double>(DType::F64, {16}, std::vector<double>(16, 2.0));
  for (int i = 0; i < 32; ++i)
    d.data<double>()[i] = v[i];
  EXPECT_OK(layerNorm(d.view(), ds.view(), nullptr, 1, 1e-6, d.view()));
  std::vector<double> want =
      refNorm(v, 16, std::vector<float>(16, 2.0f), nullptr, 1e-6, false);
  for (int i = 0; i < 32; ++i)
    EXPECT_TRUE(close(d.data<double>()[i], want[i], 1e-12, 1e-14));
  Buf h(DType::F16, {2, 16}), hs(DType::F16, {16});
  for (int i = 0; i < 32; ++i)
    h.data<uint16_t>()[i] = math::floatToHalf(v[i]);
  for (int i = 0; i < 16; ++i)
    hs.data<uint16_t>()[i] = math::floatToHalf(1.0f);
  EXPECT_OK(rmsNorm(h.view(), hs.view(), 1, 1e-6, h.view()));
  std::vector<float> hv(32);
  for (int i = 0; i < 32; ++i)
    hv[i] = math::halfToFloat(math::floatToHalf(v[i]));
  want = refNorm(hv, 16, std::vector<float>(16, 1.0f), nullptr, 1e-6, true);
  for (int i = 0; i < 32; ++i)
    EXPECT_TRUE(
        close(math::halfToFloat(h.data<uint16_t>()[i]), want[i], 1e-3, 1e-4));
  Buf f = randomF32({2, 16}), bad(DType::F32, {8});
  EXPECT_ERROR(layerNorm(f.view(), bad.view(), nullptr, 1, 1e-5, f.view()),
               "parameter");
  EXPECT_ERROR(rmsNorm(f.view(), ds.view(), 1, 1e-5, f.view()), "parameter");
}

TEST(RuntimeNorm, BackwardAddsTheAddend) {
  // The addend (a residual's gradient) is added to gradInput before its one
  // store: in f32 exactly the separate add's sum; the parameter gradients
  // are unchanged.
  int64_t rows = 5, n = 12;
  Buf x = randomF32({rows, n}, -3, 3), g = randomF32({n}),
      dy = randomF32({rows, n}), r = randomF32({rows, n});
  Tensor rv = r.view();
  for (bool rms : {false, true}) {
    Buf plain(DType::F32, {rows, n}), fused(DType::F32, {rows, n});
    Buf gs(DType::F32, {n}), gb(DType::F32, {n}), gs2(DType::F32, {n}),
        gb2(DType::F32, {n});
    Tensor gsv = gs.view(), gbv = gb.view(), gs2v = gs2.view(),
           gb2v = gb2.view();
    if (rms) {
      EXPECT_OK(rmsNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                plain.view(), &gsv));
      EXPECT_OK(rmsNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                fused.view(), &gs2v, &rv));
    } else {
      EXPECT_OK(layerNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                  plain.view(), &gsv, &gbv));
      EXPECT_OK(layerNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                  fused.view(), &gs2v, &gb2v, &rv));
      EXPECT_EQ(gb.values<float>(), gb2.values<float>());
    }
    EXPECT_EQ(gs.values<float>(), gs2.values<float>()) << rms;
    for (int64_t i = 0; i < rows * n; ++i)
      ASSERT_EQ(fused.data<float>()[i],
                plain.data<float>()[i] + r.data<float>()[i])
          << rms << " at " << i;
  }
  Buf wrong(DType::F32, {rows, n + 1});
  Tensor wv = wrong.view();
  Buf dx(DType::F32, {rows, n}), gs(DType::F32, {n});
  Tensor gsv = gs.view();
  EXPECT_ERROR(layerNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                 dx.view(), &gsv, nullptr, &wv),
               "layer_norm_grad: addend");
}

TEST(RuntimeNorm, BackwardWidensANarrowGradientOnLoad) {
  // An f32 input's result gradient in bf16/f16 (a product stored narrow,
  // graph-fuse-epilogues): exactly the gradients of its widened f32 copy.
  int64_t rows = 7, n = 20;
  Buf x = randomF32({rows, n}, -3, 3), g = randomF32({n}),
      r = randomF32({rows, n});
  Tensor rv = r.view();
  for (DType t : {DType::BF16, DType::F16})
    for (bool rms : {false, true}) {
      Buf dy = randomOf(t, {rows, n}), wide(DType::F32, {rows, n});
      EXPECT_OK(cast(dy.view(), wide.view()));
      Buf dx(DType::F32, {rows, n}), want(DType::F32, {rows, n});
      Buf gs(DType::F32, {n}), gb(DType::F32, {n}), ws(DType::F32, {n}),
          wb(DType::F32, {n});
      Tensor gsv = gs.view(), gbv = gb.view(), wsv = ws.view(), wbv = wb.view();
      if (rms) {
        EXPECT_OK(rmsNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                  dx.view(), &gsv, &rv));
        EXPECT_OK(rmsNormBackward(x.view(), g.view(), wide.view(), 1, 1e-5,
                                  want.view(), &wsv, &rv));
      } else {
        EXPECT_OK(layerNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                    dx.view(), &gsv, &gbv, &rv));
        EXPECT_OK(layerNormBackward(x.view(), g.view(), wide.view(), 1, 1e-5,
                                    want.view(), &wsv, &wbv, &rv));
        EXPECT_EQ(gb.values<float>(), wb.values<float>());
      }
      EXPECT_EQ(dx.values<float>(), want.values<float>()) << rms;
      EXPECT_EQ(gs.values<float>(), ws.values<float>()) << rms;
    }
  // Only the result's gradient may be narrower, and only of an f32 input.
  Buf dx(DType::F32, {rows, n}), gs(DType::F32, {n}),
      narrowAdd = randomOf(DType::BF16, {rows, n}),
      dy = randomOf(DType::BF16, {rows, n});
  Tensor gsv = gs.view(), av = narrowAdd.view();
  EXPECT_ERROR(layerNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                 dx.view(), &gsv, nullptr, &av),
               "layer_norm_grad: addend");
  Buf hx = randomOf(DType::F16, {rows, n}), hg = randomOf(DType::F16, {n}),
      hdx(DType::F16, {rows, n}), hgs(DType::F16, {n});
  Tensor hgsv = hgs.view();
  EXPECT_ERROR(rmsNormBackward(hx.view(), hg.view(), dy.view(), 1, 1e-5,
                               hdx.view(), &hgsv),
               "rms_norm_grad: gradient");
}

TEST(RuntimeNorm, NarrowResultsRoundTheF32Value) {
  // An f32 input's norm stored as f16/bf16: exactly the f32 result rounded
  // once (what the cast it replaces gives).
  Buf x = randomF32({6, 40}, -3, 3), g = randomF32({40}), b = randomF32({40});
  Tensor bv = b.view();
  for (const auto &[t, toBits, fromBits] : kHalfFormats)
    for (bool rms : {false, true}) {
      Buf wide(DType::F32, {6, 40}), narrow(t, {6, 40});
      EXPECT_OK(rms ? rmsNorm(x.view(), g.view(), 1, 1e-6, wide.view())
                    : layerNorm(x.view(), g.view(), &bv, 1, 1e-5, wide.view()));
      EXPECT_OK(rms ? rmsNorm(x.view(), g.view(), 1, 1e-6, narrow.view())
                    : layerNorm(x.view(), g.view(), &bv, 1, 1e-5,
                                narrow.view()));
      for (int64_t i = 0; i < wide.count(); ++i)
        ASSERT_EQ(narrow.data<uint16_t>()[i], toBits(wide.data<float>()[i]))
            << dtypeName(t) << " rms " << rms << " at " << i;
    }
  Buf h = randomOf(DType::BF16, {6, 40}), hg = randomOf(DType::BF16, {40});
  Buf f16(DType::F16, {6, 40});
  EXPECT_ERROR(rmsNorm(h.view(), hg.view(), 1, 1e-6, f16.view()),
               "needs equal float types");
}

TEST(RuntimeCrossEntropy, NarrowGradientRoundsTheF32Gradient) {
  // graph-fuse-epilogues' narrowed LM-head gradient: f32 logits, the
  // gradient stored as f16/bf16 -- exactly the f32 gradient rounded once
  // (what the cast it replaces gives), ignored rows 0.
  int64_t rows = 5, v = 37;
  Buf logits = randomF32({rows, v}, -4, 4), labels(DType::I64, {rows}),
      rowGrad = randomF32({rows}, 0.1f, 1);
  for (int64_t r = 0; r < rows; ++r)
    labels.data<int64_t>()[r] = (r * 7) % v;
  labels.data<int64_t>()[2] = -100;
  Buf wide(DType::F32, {rows, v});
  EXPECT_OK(softmaxCrossEntropyBackward(logits.view(), labels.view(),
                                        rowGrad.view(), -100, wide.view()));
  for (const auto &[t, toBits, fromBits] : kHalfFormats) {
    Buf narrow(t, {rows, v});
    EXPECT_OK(softmaxCrossEntropyBackward(logits.view(), labels.view(),
                                          rowGrad.view(), -100, narrow.view()));
    for (int64_t i = 0; i < wide.count(); ++i)
      ASSERT_EQ(narrow.data<uint16_t>()[i], toBits(wide.data<float>()[i]))
          << dtypeName(t) << " at " << i;
  }
  // Only f32 logits narrow; a wider or mismatched gradient is refused.
  Buf h = randomOf(DType::BF16, {rows, v}), hrow = randomOf(DType::BF16, {rows}),
      f16(DType::F16, {rows, v}), f64(DType::F64, {rows, v});
  EXPECT_ERROR(softmaxCrossEntropyBackward(h.view(), labels.view(),
                                           hrow.view(), -100, f16.view()),
               "differs from logits");
  EXPECT_ERROR(softmaxCrossEntropyBackward(logits.view(), labels.view(),
                                           rowGrad.view(), -100, f64.view()),
               "differs from logits");
}

TEST(RuntimeCrossEntropy, NarrowLogitsAreReadWidened) {
  // graph-fuse-epilogues' narrow logits: f16/bf16 logits with an f32 loss
  // and an f32 loss gradient compute what the f32 logits they widen to
  // give, bit for bit (the gradient in the logits' type: the f32 one
  // rounded once).
  int64_t rows = 5, v = 37;
  Buf labels(DType::I64, {rows}), rowGrad = randomF32({rows}, 0.1f, 1);
  for (int64_t r = 0; r < rows; ++r)
    labels.data<int64_t>()[r] = (r * 7) % v;
  labels.data<int64_t>()[2] = -100;
  for (const auto &[t, toBits, fromBits] : kHalfFormats) {
    Buf narrow = randomOf(t, {rows, v}, -4, 4), wide(DType::F32, {rows, v});
    EXPECT_OK(cast(narrow.view(), wide.view()));
    Buf wantLoss(DType::F32, {rows}), loss(DType::F32, {rows});
    EXPECT_OK(softmaxCrossEntropy(wide.view(), labels.view(), -100,
                                  wantLoss.view()));
    EXPECT_OK(softmaxCrossEntropy(narrow.view(), labels.view(), -100,
                                  loss.view()));
    EXPECT_EQ(loss.bytes, wantLoss.bytes) << dtypeName(t);
    Buf wantGrad(t, {rows, v}), grad(t, {rows, v});
    EXPECT_OK(softmaxCrossEntropyBackward(wide.view(), labels.view(),
                                          rowGrad.view(), -100,
                                          wantGrad.view()));
    EXPECT_OK(softmaxCrossEntropyBackward(narrow.view(), labels.view(),
                                          rowGrad.view(), -100, grad.view()));
    EXPECT_EQ(grad.bytes, wantGrad.bytes) << dtypeName(t);
  }
  // The per-row value is the logits' type or f32, nothing else.
  Buf h = randomOf(DType::BF16, {rows, v}), f64(DType::F64, {rows}),
      f16(DType::F16, {rows});
  EXPECT_ERROR(softmaxCrossEntropy(h.view(), labels.view(), -100, f64.view()),
               "(or f32)");
  EXPECT_ERROR(softmaxCrossEntropy(h.view(), labels.view(), -100, f16.view()),
               "per-row bf16 (or f32) tensor");
}

} // namespace
