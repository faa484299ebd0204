//===- CudaKernelsTest.cpp - device kernels against the host kernels ------===//
//
// lamina-cuda-tests (built when LAMINA_ENABLE_CUDA is on). The `CudaKernel`
// tests run each device kernel on random inputs and compare with the host
// kernel of the same name (or, for kernels the host has no counterpart of,
// a double-precision reference); they GTEST_SKIP when no CUDA device is
// visible. The `CudaChecks` tests exercise the argument checks, which
// return before touching the device, so they run everywhere.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

TEST_F(CudaKernel, UnaryMatchesHost) {
  const UnaryOp ops[] = {UnaryOp::Neg,  UnaryOp::Abs,        UnaryOp::Relu,
                         UnaryOp::Exp,  UnaryOp::Log,        UnaryOp::Sqrt,
                         UnaryOp::Reciprocal, UnaryOp::Tanh, UnaryOp::Erf,
                         UnaryOp::Sigmoid, UnaryOp::Gelu,    UnaryOp::GeluTanh,
                         UnaryOp::Cos,  UnaryOp::Sin,
                         UnaryOp::GeluDerivative, UnaryOp::GeluTanhDerivative};
  for (DType t : kFloatTypes)
    for (UnaryOp op : ops) {
      bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt;
      Buf in = randomOf(t, {37, 129}, positive ? 0.1f : -4, 4);
      Buf want(t, in.shape);
      EXPECT_OK(unary(op, in.view(), want.view()));
      Dev din(in), dout(t, in.shape);
      EXPECT_OK(cu::unary(op, din.view(), dout.view(), stream));
      sync();
      // The GELU slopes add terms of size ~1 that cancel near their zeros:
      // each side's f32 value is only within ~2.5e-6 of the exact one.
      bool cancels = op == UnaryOp::GeluDerivative ||
                     op == UnaryOp::GeluTanhDerivative;
      double abs = t == DType::F32 && cancels ? 5e-6 : absFor(t);
      EXPECT_TRUE(allClose(dout.download(), want, relFor(t), abs))
          << "op " << int(op) << " " << dtypeName(t);
    }
}

TEST_F(CudaKernel, BinaryBroadcastMatchesHost) {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                          BinaryOp::Div, BinaryOp::Pow, BinaryOp::Min,
                          BinaryOp::Max};
  struct Case {
    std::vector<int64_t> a, b, out;
  } cases[] = {{{8, 300}, {8, 300}, {8, 300}},
               {{64, 48}, {48}, {64, 48}},
               {{4, 1, 5}, {3, 1}, {4, 3, 5}},
               {{}, {2, 3}, {2, 3}}};
  for (DType t : {DType::F32, DType::BF16})
    for (const Case &c : cases)
      for (BinaryOp op : ops) {
        bool pow = op == BinaryOp::Pow;
        Buf a = randomOf(t, c.a, pow ? 0.1f : -2, 2), b = randomOf(t, c.b);
        Buf want(t, c.out);
        EXPECT_OK(binary(op, a.view(), b.view(), want.view()));
        Dev da(a), db(b), dout(t, c.out);
        EXPECT_OK(cu::binary(op, da.view(), db.view(), dout.view(), stream));
        sync();
        EXPECT_TRUE(allClose(dout.download(), want, relFor(t), absFor(t)))
            << "op " << int(op) << " " << dtypeName(t);
      }
}

TEST_F(CudaKernel, CastRoundsAsHost) {
  for (DType from : kFloatTypes)
    for (DType to : kFloatTypes) {
      Buf in = randomOf(from, {1000}, -70000, 70000);
      Buf want(to, {1000});
      EXPECT_OK(cast(in.view(), want.view()));
      Dev din(in), dout(to, {1000});
      EXPECT_OK(cu::cast(din.view(), dout.view(), stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes)
          << dtypeName(from) << " -> " << dtypeName(to);
    }
}

TEST_F(CudaKernel, FusedChainMatchesUnfusedHost) {
  // gelu(x * w + b), w and b broadcast over rows.
  Buf x = randomF32({32, 96}), w = randomF32({96}), b = randomF32({96});
  Buf t1(DType::F32, {32, 96}), t2(DType::F32, {32, 96}),
      want(DType::F32, {32, 96});
  EXPECT_OK(binary(BinaryOp::Mul, x.view(), w.view(), t1.view()));
  EXPECT_OK(binary(BinaryOp::Add, t1.view(), b.view(), t2.view()));
  EXPECT_OK(unary(UnaryOp::Gelu, t2.view(), want.view()));
  Dev dx(x), dw(w), db(b), dout(DType::F32, {32, 96});
  Tensor ins[] = {dx.view(), dw.view(), db.view()};
  cu::FusedStep steps[] = {{true, uint8_t(BinaryOp::Mul), 0, 1},
                           {true, uint8_t(BinaryOp::Add), 3, 2},
                           {false, uint8_t(UnaryOp::Gelu), 4, 0}};
  EXPECT_OK(cu::fusedElementwise(ins, 3, steps, 3, dout.view(), nullptr, stream));
  sync();
  EXPECT_TRUE(allClose(dout.download(), want, 1e-5, 1e-6));
}

TEST_F(CudaKernel, SoftmaxMatchesHost) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  } cases[] = {{{6, 1000}, 1}, {{3, 50, 7}, 1}, {{5, 33}, -1}, {{4, 2}, 0}};
  for (DType t : kFloatTypes)
    for (const Case &c : cases)
      for (bool log : {false, true}) {
        Buf in = randomOf(t, c.shape, -6, 6), want(t, c.shape);
        EXPECT_OK(log ? logSoftmax(in.view(), c.axis, want.view())
                      : softmax(in.view(), c.axis, want.view()));
        Dev din(in), dout(t, c.shape);
        EXPECT_OK(log ? cu::logSoftmax(din.view(), c.axis, dout.view(), stream)
                      : cu::softmax(din.view(), c.axis, dout.view(), stream));
        sync();
        EXPECT_TRUE(allClose(dout.download(), want, relFor(t), absFor(t)))
            << dtypeName(t) << (log ? " log" : "");
      }
}

TEST_F(CudaKernel, SoftmaxBackwardMatchesHost) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  } cases[] = {{{6, 1000}, 1}, {{3, 50, 7}, 1}, {{4, 2}, 0}};
  for (DType t : kFloatTypes)
    for (const Case &c : cases)
      for (bool log : {false, true}) {
        Buf y = randomOf(t, c.shape, log ? -6 : 0, log ? 0 : 1),
            g = randomOf(t, c.shape, -2, 2), want(t, c.shape);
        EXPECT_OK(log ? logSoftmaxBackward(y.view(), g.view(), c.axis,
                                           want.view())
                      : softmaxBackward(y.view(), g.view(), c.axis,
                                        want.view()));
        // In place over the incoming gradient, as the lowering may plan it.
        Dev dy(y), dg(g);
        EXPECT_OK(log ? cu::logSoftmaxBackward(dy.view(), dg.view(), c.axis,
                                               dg.view(), stream)
                      : cu::softmaxBackward(dy.view(), dg.view(), c.axis,
                                            dg.view(), stream));
        sync();
        // y here is any [0, 1) row, not a softmax, so the row sum of y g
        // the two sides add in different orders reaches ~20 over 1000
        // elements: a few f32 ulps of it, times y.
        double abs = t == DType::F32 ? 1e-5 : absFor(t);
        EXPECT_TRUE(allClose(dg.download(), want, relFor(t), abs))
            << dtypeName(t) << (log ? " log" : "");
      }
}

TEST_F(CudaKernel, SoftmaxCrossEntropyMatchesReference) {
  int64_t rows = 16, v = 1000;
  Buf logits = randomF32({rows, v}, -5, 5);
  Buf labels(DType::I64, {rows});
  for (int64_t r = 0; r < rows; ++r)
    labels.data<int64_t>()[r] = (r * 137) % v;
  labels.data<int64_t>()[3] = -100; // ignored
  float scale = 1.0f / rows;
  Buf rowGrad(DType::F32, {rows});
  for (int64_t r = 0; r < rows; ++r)
    rowGrad.data<float>()[r] = scale;
  Dev dl(logits), dlab(labels), drow(rowGrad), dloss(DType::F32, {rows}),
      dgrad(DType::F32, {rows, v});
  EXPECT_OK(cu::softmaxCrossEntropy(dl.view(), dlab.view(), -100, dloss.view(),
                                    stream));
  EXPECT_OK(cu::softmaxCrossEntropyBackward(dl.view(), dlab.view(),
                                            drow.view(), -100, dgrad.view(),
                                            stream));
  sync();
  Buf loss = dloss.download(), grad = dgrad.download();
  // The host twins the lowering calls on the host.
  Buf hl(DType::F32, {rows}), hd(DType::F32, {rows, v});
  EXPECT_OK(softmaxCrossEntropy(logits.view(), labels.view(), -100, hl.view()));
  EXPECT_OK(softmaxCrossEntropyBackward(logits.view(), labels.view(),
                                        rowGrad.view(), -100, hd.view()));
  EXPECT_TRUE(allClose(loss, hl, 1e-5, 1e-6));
  EXPECT_TRUE(allClose(grad, hd, 1e-5, 1e-7));
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = logits.data<float>() + r * v;
    int64_t label = labels.data<int64_t>()[r];
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < v; ++i)
      mx = std::max(mx, double(x[i]));
    for (int64_t i = 0; i < v; ++i)
      sum += std::exp(x[i] - mx);
    double lse = mx + std::log(sum);
    bool ignored = label == -100;
    EXPECT_TRUE(close(loss.data<float>()[r], ignored ? 0 : lse - x[label],
                      1e-5, 1e-6))
        << "row " << r;
    for (int64_t i = 0; i < v; ++i) {
      double want =
          ignored ? 0 : (std::exp(x[i] - lse) - (i == label)) * scale;
      ASSERT_TRUE(close(grad.data<float>()[r * v + i], want, 1e-5, 1e-8))
          << r << "," << i;
    }
  }
  // A label out of range is reported by deviceStatus.
  labels.data<int64_t>()[5] = v;
  Dev dbad(labels);
  EXPECT_OK(cu::softmaxCrossEntropy(dl.view(), dbad.view(), -100, dloss.view(),
                                    stream));
  EXPECT_ERROR(cu::deviceStatus(stream), "label 1000 at position 5");
  EXPECT_OK(cu::deviceStatus(stream)); // cleared
  // Cleared in stream order: an error right after a reported one is not
  // wiped by the first one's reset.
  EXPECT_OK(cu::softmaxCrossEntropy(dl.view(), dbad.view(), -100, dloss.view(),
                                    stream));
  EXPECT_ERROR(cu::deviceStatus(stream), "label 1000 at position 5");
  EXPECT_OK(cu::softmaxCrossEntropy(dl.view(), dbad.view(), -100, dloss.view(),
                                    stream));
  EXPECT_ERROR(cu::deviceStatus(stream), "label 1000 at position 5");
}

TEST_F(CudaKernel, CrossEntropyOnePassMatchesHost) {
  // The one-read maximum and sum (rescaled as the maximum grows) against
  // the host's two passes: rows of 4-element loads and not (v = 1001),
  // -inf logits (masked classes add nothing), a row whose maximum comes
  // last, a NaN row and a +inf row (both NaN, as two passes give), and the
  // gradient stored as f32, bf16 and f16 (f32 logits).
  for (int64_t v : {1000, 1001}) {
    int64_t rows = 8;
    Buf logits = randomF32({rows, v}, -6, 6), labels(DType::I64, {rows});
    float *x = logits.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      labels.data<int64_t>()[r] = (r * 131 + 7) % v;
    for (int64_t i = 0; i < v; i += 3)
      x[1 * v + i] = -INFINITY;
    labels.data<int64_t>()[1] = 1; // not a masked class
    for (int64_t i = 0; i < v; ++i)
      x[2 * v + i] = float(i) * 0.05f; // increasing: rescaled at every step
    x[4 * v + 17] = NAN;
    x[5 * v + 3] = INFINITY;
    Buf rowGrad = randomF32({rows}, 0.5f, 1);
    Buf hl(DType::F32, {rows}), hg(DType::F32, {rows, v});
    EXPECT_OK(softmaxCrossEntropy(logits.view(), labels.view(), -100,
                                  hl.view()));
    EXPECT_OK(softmaxCrossEntropyBackward(logits.view(), labels.view(),
                                          rowGrad.view(), -100, hg.view()));
    Dev dl(logits), dlab(labels), drow(rowGrad), dloss(DType::F32, {rows});
    EXPECT_OK(cu::softmaxCrossEntropy(dl.view(), dlab.view(), -100,
                                      dloss.view(), stream));
    sync();
    EXPECT_TRUE(allClose(dloss.download(), hl, 1e-5, 1e-6)) << "v " << v;
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      Buf want(t, {rows, v});
      EXPECT_OK(cast(hg.view(), want.view()));
      Dev dg(t, {rows, v});
      EXPECT_OK(cu::softmaxCrossEntropyBackward(dl.view(), dlab.view(),
                                                drow.view(), -100, dg.view(),
                                                stream));
      sync();
      EXPECT_TRUE(allClose(dg.download(), want, relFor(t), 1e-7))
          << "v " << v << " " << dtypeName(t);
    }
  }
}

TEST_F(CudaKernel, CrossEntropyOfNarrowLogitsMatchesHost) {
  // bf16/f16 logits (graph-fuse-epilogues' narrow logits) with an f32 loss
  // and loss gradient, rows of 4-element loads and not, an ignored row.
  for (DType t : {DType::BF16, DType::F16})
    for (int64_t v : {1000, 1001}) {
      int64_t rows = 6;
      Buf logits = randomOf(t, {rows, v}, -6, 6), labels(DType::I64, {rows});
      for (int64_t r = 0; r < rows; ++r)
        labels.data<int64_t>()[r] = (r * 131 + 7) % v;
      labels.data<int64_t>()[3] = -100;
      Buf rowGrad = randomF32({rows}, 0.5f, 1);
      Buf hl(DType::F32, {rows}), hg(t, {rows, v});
      EXPECT_OK(softmaxCrossEntropy(logits.view(), labels.view(), -100,
                                    hl.view()));
      EXPECT_OK(softmaxCrossEntropyBackward(logits.view(), labels.view(),
                                            rowGrad.view(), -100, hg.view()));
      Dev dl(logits), dlab(labels), drow(rowGrad), dloss(DType::F32, {rows}),
          dg(t, {rows, v});
      EXPECT_OK(cu::softmaxCrossEntropy(dl.view(), dlab.view(), -100,
                                        dloss.view(), stream));
      EXPECT_OK(cu::softmaxCrossEntropyBackward(dl.view(), dlab.view(),
                                                drow.view(), -100, dg.view(),
                                                stream));
      sync();
      std::string what = std::string(dtypeName(t)) + " v " + std::to_string(v);
      EXPECT_TRUE(allClose(dloss.download(), hl, 1e-5, 1e-6)) << what;
      EXPECT_TRUE(allClose(dg.download(), hg, relFor(t), 1e-7)) << what;
    }
}

TEST_F(CudaKernel, ReduceMatchesHost) {
  std::vector<int64_t> shape = {4, 5, 66};
  struct Case {
    std::vector<int64_t> axes;
    bool keepdims;
  } cases[] = {{{0}, false}, {{2}, false}, {{0, 2}, true},
               {{1}, true},  {{0, 1, 2}, false}, {{}, false}};
  for (DType t : {DType::F32, DType::BF16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max,
                        ReduceOp::Prod})
      for (const Case &c : cases) {
        Buf in = randomOf(t, shape, op == ReduceOp::Prod ? 0.9f : -2,
                          op == ReduceOp::Prod ? 1.1f : 2);
        std::vector<int64_t> out;
        for (int d = 0; d < 3; ++d) {
          bool red = std::find(c.axes.begin(), c.axes.end(), d) != c.axes.end();
          if (!red || c.keepdims)
            out.push_back(red ? 1 : shape[d]);
        }
        Buf want(t, out);
        EXPECT_OK(reduce(op, in.view(), c.axes.data(), int(c.axes.size()),
                         c.keepdims, want.view()));
        Dev din(in), dout(t, out);
        EXPECT_OK(cu::reduce(op, din.view(), c.axes.data(), int(c.axes.size()),
                             c.keepdims, dout.view(), stream));
        sync();
        // Sums of up to 1320 terms in another order.
        EXPECT_TRUE(allClose(dout.download(), want, relFor(t) * 10,
                             t == DType::F32 ? 1e-4 : 5e-2))
            << "op " << int(op) << " " << dtypeName(t) << " axes "
            << c.axes.size();
      }
}

TEST_F(CudaKernel, ReduceNarrowIntoF32MatchesHost) {
  // bf16/f16 input, f32 result (the accumulator unrounded), both paths.
  std::vector<int64_t> shape = {64, 300};
  for (DType t : {DType::BF16, DType::F16})
    for (int64_t axis : {0, 1})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        Buf in = randomOf(t, shape);
        std::vector<int64_t> out = {shape[1 - axis]};
        Buf want(DType::F32, out);
        EXPECT_OK(reduce(op, in.view(), &axis, 1, false, want.view()));
        Dev din(in), dout(DType::F32, out);
        EXPECT_OK(cu::reduce(op, din.view(), &axis, 1, false, dout.view(),
                             stream));
        sync();
        EXPECT_TRUE(allClose(dout.download(), want, 1e-5, 1e-4))
            << dtypeName(t) << " axis " << axis << " op " << int(op);
      }
}


TEST_F(CudaKernel, TransposeMatchesHost) {
  struct Case {
    std::vector<int64_t> shape, perm;
  } cases[] = {{{3, 4, 5}, {2, 0, 1}},
               {{2, 33, 65}, {0, 2, 1}},
               {{70, 40}, {1, 0}},
               {{2, 3, 4, 5}, {0, 2, 1, 3}}};
  for (DType t : {DType::F32, DType::BF16, DType::I64, DType::I1})
    for (const Case &c : cases) {
      Buf in(t, c.shape);
      for (auto &byte : in.bytes)
        byte = uint8_t(rng()() & (t == DType::I1 ? 1 : 0xff));
      std::vector<int64_t> out(c.shape.size());
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = c.shape[c.perm[i]];
      Buf want(t, out);
      EXPECT_OK(transpose(in.view(), c.perm.data(), want.view()));
      Dev din(in), dout(t, out);
      EXPECT_OK(cu::transpose(din.view(), c.perm.data(), dout.view(), stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes) << dtypeName(t);
    }
}

TEST_F(CudaKernel, GatherMatchesHost) {
  // The embedding lookup: [vocab, dim] by [batch, seq] token ids.
  for (DType t : {DType::F32, DType::BF16}) {
    Buf table = randomOf(t, {50, 16});
    Buf ids(DType::I32, {3, 7});
    for (int64_t i = 0; i < ids.count(); ++i)
      ids.data<int32_t>()[i] = int32_t(rng()() % 100) - 50; // negatives too
    Buf want(t, {3, 7, 16});
    EXPECT_OK(gather(table.view(), ids.view(), 0, want.view()));
    Dev dt(table), di(ids), dout(t, {3, 7, 16});
    EXPECT_OK(cu::gather(dt.view(), di.view(), 0, dout.view(), stream));
    sync();
    EXPECT_EQ(dout.download().bytes, want.bytes);
  }
  // Another axis, i64 indices.
  Buf data = randomF32({4, 10, 3});
  Buf idx = i64({5}, {9, 0, -1, 3, 3});
  Buf want(DType::F32, {4, 5, 3});
  EXPECT_OK(gather(data.view(), idx.view(), 1, want.view()));
  Dev dd(data), di(idx), dout(DType::F32, {4, 5, 3});
  EXPECT_OK(cu::gather(dd.view(), di.view(), 1, dout.view(), stream));
  sync();
  EXPECT_EQ(dout.download().bytes, want.bytes);
  // Out of range: reported by deviceStatus.
  Dev dbad(i64({5}, {0, 1, 10, 2, 3}));
  EXPECT_OK(cu::gather(dd.view(), dbad.view(), 1, dout.view(), stream));
  EXPECT_ERROR(cu::deviceStatus(stream),
               "gather: index 10 at position 2 is out of range for a dim of "
               "size 10");
}

TEST_F(CudaKernel, ScatterAddMatchesHost) {
  // The embedding gradient: duplicates accumulate.
  for (DType t : {DType::F32, DType::BF16}) {
    int64_t vocab = 20, dim = 8, tokens = 30;
    Buf zeros(t, {vocab, dim});
    Buf ids(DType::I64, {tokens, 1});
    for (int64_t i = 0; i < tokens; ++i)
      ids.data<int64_t>()[i] = int64_t(rng()() % vocab);
    Buf upd = randomOf(t, {tokens, dim});
    Buf want(t, {vocab, dim});
    EXPECT_OK(scatterND(zeros.view(), ids.view(), upd.view(),
                        ScatterReduction::Add, want.view()));
    Dev dz(zeros), di(ids), du(upd), dout(t, {vocab, dim});
    EXPECT_OK(cu::scatterND(dz.view(), di.view(), du.view(),
                            ScatterReduction::Add, dout.view(), stream));
    sync();
    EXPECT_TRUE(allClose(dout.download(), want, relFor(t), absFor(t) * 5))
        << dtypeName(t);
  }
}

TEST_F(CudaKernel, MatmulMatchesHost) {
  struct Case {
    std::vector<int64_t> a, b; // as stored
    bool ta, tb;
  } cases[] = {
      {{17, 33}, {33, 9}, false, false},
      {{33, 17}, {33, 9}, true, false},
      {{17, 33}, {9, 33}, false, true},
      {{33, 17}, {9, 33}, true, true},
      {{2, 3, 17, 33}, {2, 3, 33, 9}, false, false}, // strided batched
      {{4, 17, 33}, {33, 9}, false, false},          // shared rhs: folded
      {{4, 33, 17}, {9, 33}, true, true},            // shared rhs, per batch
      {{2, 1, 5, 7}, {3, 7, 4}, false, false},       // broadcast batch
  };
  for (DType t : kFloatTypes)
    for (const Case &c : cases) {
      Buf a = randomOf(t, c.a), b = randomOf(t, c.b);
      int ra = int(c.a.size()), rb = int(c.b.size());
      int64_t m = c.a[ra - (c.ta ? 1 : 2)], n = c.b[rb - (c.tb ? 2 : 1)];
      int64_t bs[8];
      int br = 0;
      ASSERT_TRUE(
          broadcastShape(c.a.data(), ra - 2, c.b.data(), rb - 2, bs, &br));
      std::vector<int64_t> out(bs, bs + br);
      out.push_back(m);
      out.push_back(n);
      Buf want(t, out);
      EXPECT_OK(matmul(a.view(), b.view(), want.view(), c.ta, c.tb));
      Dev da(a), db(b), dout(t, out);
      EXPECT_OK(cu::matmul(da.view(), db.view(), dout.view(), c.ta, c.tb,
                           stream));
      sync();
      // f32: another summation order over k = 33 terms of size ~4.
      EXPECT_TRUE(allClose(dout.download(), want, relFor(t),
                           t == DType::F32 ? 1e-4 : 5e-2))
          << dtypeName(t) << " case " << (&c - cases);
    }
}

/// Host reference and device result of reduce(op) over `axes` of `in`.
struct ReducePair {
  Buf want, got;
};
ReducePair reduceBoth(ReduceOp op, const Buf &in, std::vector<int64_t> axes,
                      cudaStream_t stream) {
  std::vector<int64_t> out;
  for (int d = 0; d < int(in.shape.size()); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end())
      out.push_back(in.shape[d]);
  Buf want(in.dtype, out);
  Buf host = in;
  EXPECT_OK(reduce(op, host.view(), axes.data(), int(axes.size()), false,
                   want.view()));
  Dev din(in), dout(in.dtype, out);
  EXPECT_OK(cu::reduce(op, din.view(), axes.data(), int(axes.size()), false,
                       dout.view(), stream));
  EXPECT_OK(cu::deviceStatus(stream));
  return {std::move(want), dout.download()};
}

TEST_F(CudaKernel, ReduceLeadingAxesInChunksMatchesHost) {
  // Kept innermost dims with many reduced rows: the rows split into chunks
  // (Reduce.cu, outerChunks) whose partials a second pass combines.
  struct Case {
    std::vector<int64_t> shape, axes;
  } cases[] = {
      {{8192, 40}, {0}},           // 32 chunks; columns not a multiple of 32
      {{3, 1537, 33}, {0, 1}},     // merged rows, a short last chunk
      {{1000, 7, 65}, {0}},        // merged kept dims, 3 chunks
      {{3, 50, 200, 33}, {0, 2}},  // two reduced dims between kept ones
      {{4, 1024, 768}, {0, 1}},    // a bias gradient: 16 chunks
      {{513, 1}, {0}},             // one output, 2 chunks
      {{600, 1032}, {0}},          // 16-byte loads, a partial column block
      {{2, 300, 264}, {0, 1}},     // 16-byte loads (bf16: 8 | 264), one chunk
  };
  for (DType t : kFloatTypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max,
                        ReduceOp::Prod})
      for (const Case &c : cases) {
        bool prod = op == ReduceOp::Prod;
        Buf in = randomOf(t, c.shape, prod ? 0.95f : -2, prod ? 1.05f : 2);
        ReducePair r = reduceBoth(op, in, c.axes, stream);
        int64_t count = 1;
        for (int64_t a : c.axes)
          count *= c.shape[size_t(a)];
        std::string what = std::string(dtypeName(t)) + " op " +
                           std::to_string(int(op)) + " case " +
                           std::to_string(&c - cases);
        if (op == ReduceOp::Max) { // exact in any order
          EXPECT_EQ(r.got.bytes, r.want.bytes) << what;
          continue;
        }
        // The host sums each column serially in f32: its own rounding error
        // grows with the count (~1e-3 absolute over 8192 terms of [-2, 2]).
        double rel = t == DType::F32 ? (prod ? 1e-3 : 1e-4) : 2e-2;
        double abs = t == DType::F32 ? 2e-7 * double(count) + 1e-5 : 5e-2;
        EXPECT_TRUE(allClose(r.got, r.want, rel, abs)) << what;
      }
}

TEST_F(CudaKernel, ReduceLeadingAxesIsDeterministic) {
  // The chunking depends on the shape alone: the same bits every run, and
  // on a second stream.
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  // 2048 columns take the 16-byte loads (Reduce.cu, reduceOuterVecKernel),
  // 2048 + 3 the scalar kernel.
  for (DType t : {DType::F32, DType::BF16})
  for (int64_t cols : {int64_t(2048), int64_t(2048 + 3)}) {
    Buf in = randomOf(t, {8192, cols});
    ReducePair first = reduceBoth(ReduceOp::Sum, in, {0}, stream);
    for (int run = 0; run < 3; ++run) {
      ReducePair again =
          reduceBoth(ReduceOp::Sum, in, {0}, run % 2 ? other : stream);
      EXPECT_EQ(again.got.bytes, first.got.bytes) << dtypeName(t);
    }
    EXPECT_TRUE(allClose(first.got, first.want,
                         t == DType::F32 ? 1e-4 : 2e-2,
                         t == DType::F32 ? 2e-3 : 5e-2));
  }
  cudaStreamDestroy(other);
}

TEST_F(CudaKernel, ReduceWideLoadsKeepTheScalarOrder) {
  // The same rows reduced from a 16-byte aligned copy (reduceOuterVecKernel)
  // and from one shifted by one element (the scalar kernel): the same bits,
  // since both combine each output's rows in the same order.
  for (DType t : kFloatTypes)
    for (auto shape : {std::vector<int64_t>{8192, 256},
                       std::vector<int64_t>{300, 1032}}) {
      Buf in = randomOf(t, shape);
      size_t es = dtypeSize(t), n = in.bytes.size();
      Buf shifted(t, {int64_t(n / es) + 1});
      std::memcpy(shifted.bytes.data() + es, in.bytes.data(), n);
      Dev din(in), dshift(shifted);
      Tensor aligned = din.view();
      Tensor unaligned{static_cast<char *>(dshift.ptr) + es, t,
                       int(shape.size()), shape.data()};
      std::vector<int64_t> out{shape[1]};
      Dev a(t, out), b(t, out);
      int64_t axis = 0;
      ASSERT_OK(cu::reduce(ReduceOp::Sum, aligned, &axis, 1, false, a.view(),
                           stream));
      ASSERT_OK(cu::reduce(ReduceOp::Sum, unaligned, &axis, 1, false,
                           b.view(), stream));
      ASSERT_OK(cu::deviceStatus(stream));
      EXPECT_EQ(a.download().bytes, b.download().bytes)
          << dtypeName(t) << " " << shape[0] << "x" << shape[1];
    }
}

/// cu::matmul of a x b (as stored) into a new device buffer, compared with
/// the host matmul; returns the device result.
Buf matmulChecked(DType t, const Buf &a, const Buf &b, bool ta, bool tb,
                  cudaStream_t stream, const std::string &what) {
  int ra = int(a.shape.size()), rb = int(b.shape.size());
  int64_t m = a.shape[size_t(ra - (ta ? 1 : 2))];
  int64_t k = a.shape[size_t(ra - (ta ? 2 : 1))];
  int64_t n = b.shape[size_t(rb - (tb ? 2 : 1))];
  int64_t bs[8];
  int br = 0;
  EXPECT_TRUE(broadcastShape(a.shape.data(), ra - 2, b.shape.data(), rb - 2,
                             bs, &br));
  std::vector<int64_t> out(bs, bs + br);
  out.push_back(m);
  out.push_back(n);
  Buf want(t, out), ha = a, hb = b;
  EXPECT_OK(matmul(ha.view(), hb.view(), want.view(), ta, tb));
  Dev da(a), db(b), dout(t, out);
  EXPECT_OK(cu::matmul(da.view(), db.view(), dout.view(), ta, tb, stream));
  EXPECT_OK(cu::deviceStatus(stream));
  Buf got = dout.download();
  // Another summation order over k terms of [-1, 1] products.
  EXPECT_TRUE(allClose(got, want, t == DType::F32 ? 1e-5 : 1e-2,
                       t == DType::F32 ? 3e-6 * double(k) : 5e-2))
      << what;
  return got;
}

TEST_F(CudaKernel, MatmulPlanCacheAcrossShapes) {
  // Interleaved shapes, types and transposes, each seen several times: every
  // call after the first of a shape reuses its cached plan, which must hold
  // nothing of the previous call's data. A plan reused for the same inputs
  // gives the same bits.
  struct Case {
    std::vector<int64_t> a, b;
    bool ta, tb;
  } cases[] = {
      {{64, 4096}, {4096, 48}, false, false}, // long k: split-k workspace
      {{4, 128, 96}, {96, 80}, false, false}, // folded batch
      {{4, 96, 128}, {4, 80, 96}, true, true}, // strided batched
      {{130, 70}, {50, 70}, false, true},
      {{2, 1, 5, 7}, {3, 7, 4}, false, false}, // per batch, odd alignments
  };
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  for (int round = 0; round < 3; ++round)
    for (DType t : kFloatTypes)
      for (const Case &c : cases) {
        std::string what = std::string(dtypeName(t)) + " case " +
                           std::to_string(&c - cases) + " round " +
                           std::to_string(round);
        Buf a = randomOf(t, c.a, -1, 1), b = randomOf(t, c.b, -1, 1);
        // Alternate streams: the shared workspace is ordered by its event.
        cudaStream_t s = round == 1 ? other : stream;
        Buf first = matmulChecked(t, a, b, c.ta, c.tb, s, what);
        Buf again = matmulChecked(t, a, b, c.ta, c.tb, s, what);
        EXPECT_EQ(again.bytes, first.bytes) << what;
      }
  cudaStreamDestroy(other);
}

TEST_F(CudaKernel, MatmulAtArenaOffsets) {
  // Views into one allocation at offsets aligned to 64 (the arena's
  // alignment), 16 and 8 bytes, not cuBLASLt's default assumption of 256:
  // the plan asks only for algorithms that accept the actual alignment.
  for (DType t : kFloatTypes) {
    int64_t m = 33, k = 65, n = 17;
    Buf a = randomOf(t, {m, k}, -1, 1), b = randomOf(t, {k, n}, -1, 1);
    Buf want(t, {m, n});
    EXPECT_OK(matmul(a.view(), b.view(), want.view(), false, false));
    auto up = [](size_t v) { return (v + 63) / 64 * 64; };
    size_t offA = 64, offB = up(offA + a.bytes.size()) + 16;
    size_t cBytes = want.bytes.size();
    size_t offC = up(offB + b.bytes.size()) + 8;
    Buf packed(DType::I8, {int64_t(offC + cBytes)});
    std::copy(a.bytes.begin(), a.bytes.end(), packed.bytes.begin() + offA);
    std::copy(b.bytes.begin(), b.bytes.end(), packed.bytes.begin() + offB);
    Dev d(packed);
    char *base = static_cast<char *>(d.ptr);
    int64_t sa[] = {m, k}, sb[] = {k, n}, sc[] = {m, n};
    Tensor ta{base + offA, t, 2, sa}, tb{base + offB, t, 2, sb};
    Tensor tc{base + offC, t, 2, sc};
    EXPECT_OK(cu::matmul(ta, tb, tc, false, false, stream));
    sync();
    Buf all = d.download(), got(t, {m, n});
    std::copy(all.bytes.begin() + offC, all.bytes.begin() + offC + cBytes,
              got.bytes.begin());
    EXPECT_TRUE(allClose(got, want, t == DType::F32 ? 1e-5 : 1e-2,
                         t == DType::F32 ? 3e-6 * double(k) : 5e-2))
        << dtypeName(t);
  }
}

//===----------------------------------------------------------------------===//
// Argument checks: no device needed
//===----------------------------------------------------------------------===//

TEST(CudaChecks, RejectMismatchedViewsBeforeLaunching) {
  int64_t s23[] = {2, 3}, s32[] = {3, 2}, s3[] = {3};
  float dummy[6];
  Tensor a{dummy, DType::F32, 2, s23}, b{dummy, DType::F32, 2, s32};
  Tensor i32{dummy, DType::I32, 2, s23}, v3{dummy, DType::F32, 1, s3};
  cudaStream_t s = nullptr;
  EXPECT_ERROR(cu::unary(UnaryOp::Exp, a, b, s), "differs from input");
  EXPECT_ERROR(cu::unary(UnaryOp::Exp, i32, i32, s), "is not defined on");
  EXPECT_ERROR(cu::binary(BinaryOp::Add, a, b, a, s), "does not broadcast");
  EXPECT_ERROR(cu::softmax(a, 2, a, s), "axis out of range");
  EXPECT_ERROR(cu::layerNorm(a, a, nullptr, -1, 1e-5, a, s),
               "parameter [2,3]xf32 should be [3]xf32");
  EXPECT_ERROR(cu::matmul(a, a, a, false, false, s), "shapes do not match");
  EXPECT_ERROR(cu::gather(a, a, 0, a, s), "indices must be i32 or i64");
  EXPECT_ERROR(cu::scatterND(a, i32, a, ScatterReduction::None, a, s),
               "do not match indices");
  EXPECT_ERROR(cu::softmaxCrossEntropy(a, v3, -100, v3, s),
               "labels must be i32 or i64");
  int64_t perm[] = {0, 0};
  EXPECT_ERROR(cu::transpose(a, perm, b, s), "not a permutation");
  int64_t axes[] = {5};
  EXPECT_ERROR(cu::reduce(ReduceOp::Sum, a, axes, 1, false, v3, s),
               "out of range or repeated");
  cu::FusedStep bad[] = {{true, uint8_t(BinaryOp::Add), 0, 7}};
  EXPECT_ERROR(cu::fusedElementwise(&a, 1, bad, 1, a, nullptr, s),
               "undefined register");
}

TEST(CudaChecks, DeviceCountIsZeroOrMore) {
  // No driver or no device is 0, never an error.
  EXPECT_GE(cu::deviceCount(), 0);
}

} // namespace
