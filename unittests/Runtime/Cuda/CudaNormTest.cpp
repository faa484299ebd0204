//===- CudaNormTest.cpp - layer and RMS norms and their gradients ---------===//
//
// The norms have two kernel families (NN.cu): the packed kernels (rows of
// n <= 4096, n a multiple of 4, every tensor 4-element aligned: the row in
// registers, the backward summing the parameter gradients as it goes) and
// the one-block-a-row kernels (every other call, and all of them under
// LAMINA_CUDA_NORM=rows). Each test runs twice, the second time with
// LAMINA_CUDA_NORM=rows; PackedAndRowKernelsMatchReference picks shapes
// that reach every block size and pack count, and the fallbacks.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <cmath>
#include <cstdlib>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// LAMINA_CUDA_NORM for a scope (the runtime reads it at each call):
/// `rows` when `rows`, else unset.
struct NormKernels {
  explicit NormKernels(bool rows) {
    if (rows)
      setenv("LAMINA_CUDA_NORM", "rows", 1);
    else
      unsetenv("LAMINA_CUDA_NORM");
  }
  ~NormKernels() { unsetenv("LAMINA_CUDA_NORM"); }
};

TEST_F(CudaKernel, NormBackwardMatchesHostTwins) {
  for (bool rowKernels : {false, true}) {
    NormKernels kernels(rowKernels);
    // The norms' backward against the host kernels the lowering calls on the
    // host (the references above check the math).
    int64_t rows = 40, n = 300;
    Buf x = randomF32({rows, n}, -3, 3), g = randomF32({n}),
        dy = randomF32({rows, n}), r = randomF32({rows, n});
    // With and without an addend (the residual's gradient) on gradInput.
    for (int variant = 0; variant < 4; ++variant) {
      bool rms = variant & 1, add = variant & 2;
      Buf hx(DType::F32, {rows, n}), hg(DType::F32, {n}), hb(DType::F32, {n});
      Tensor hgv = hg.view(), hbv = hb.view(), hr = r.view();
      EXPECT_OK(rms ? rmsNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                      hx.view(), &hgv, add ? &hr : nullptr)
                    : layerNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                        hx.view(), &hgv, &hbv,
                                        add ? &hr : nullptr));
      Dev dx(x), dgm(g), ddy(dy), dr(r), ddx(DType::F32, {rows, n}),
          ddg(DType::F32, {n}), ddb(DType::F32, {n});
      Tensor gv = ddg.view(), bv = ddb.view(), rv = dr.view();
      EXPECT_OK(rms ? cu::rmsNormBackward(dx.view(), dgm.view(), ddy.view(), 1,
                                          1e-5, ddx.view(), &gv,
                                          add ? &rv : nullptr, stream)
                    : cu::layerNormBackward(dx.view(), dgm.view(), ddy.view(),
                                            1, 1e-5, ddx.view(), &gv, &bv,
                                            add ? &rv : nullptr, stream));
      sync();
      EXPECT_TRUE(allClose(ddx.download(), hx, 1e-4, 1e-5)) << rms << add;
      EXPECT_TRUE(allClose(ddg.download(), hg, 1e-4, 1e-4)) << rms;
      if (!rms) {
        EXPECT_TRUE(allClose(ddb.download(), hb, 1e-4, 1e-4));
      }
    }
  }
}

TEST_F(CudaKernel, NormsIntoNarrowResultsMatchHost) {
  for (bool rowKernels : {false, true}) {
    NormKernels kernels(rowKernels);
    // f32 input, bf16/f16 result (graph-fold-matmul-casts' narrowed norms).
    std::vector<int64_t> shape = {64, 768}, pshape = {768};
    Buf x = randomF32(shape, -3, 3), g = randomF32(pshape),
        b = randomF32(pshape);
    Dev dx(x), dg(g), db(b);
    for (DType r : {DType::BF16, DType::F16})
      for (bool rms : {false, true}) {
        Buf want(r, shape);
        Dev dout(r, shape);
        Tensor bv = b.view(), dbv = db.view();
        EXPECT_OK(
            rms ? rmsNorm(x.view(), g.view(), -1, 1e-6, want.view())
                : layerNorm(x.view(), g.view(), &bv, -1, 1e-5, want.view()));
        EXPECT_OK(rms ? cu::rmsNorm(dx.view(), dg.view(), -1, 1e-6, dout.view(),
                                    stream)
                      : cu::layerNorm(dx.view(), dg.view(), &dbv, -1, 1e-5,
                                      dout.view(), stream));
        sync();
        EXPECT_TRUE(allClose(dout.download(), want, relFor(r), absFor(r)))
            << dtypeName(r) << " rms " << rms;
      }
  }
}

TEST_F(CudaKernel, NormsMatchHost) {
  for (bool rowKernels : {false, true}) {
    NormKernels kernels(rowKernels);
    for (DType t : kFloatTypes)
      for (std::vector<int64_t> shape :
           {std::vector<int64_t>{64, 768}, std::vector<int64_t>{2, 3, 40}}) {
        std::vector<int64_t> pshape = {shape.back()};
        Buf x = randomOf(t, shape, -3, 3), g = randomOf(t, pshape),
            b = randomOf(t, pshape);
        Dev dx(x), dg(g), db(b), dout(t, shape);
        for (bool bias : {true, false}) {
          Buf want(t, shape);
          Tensor bv = b.view(), dbv = db.view();
          EXPECT_OK(layerNorm(x.view(), g.view(), bias ? &bv : nullptr, -1,
                              1e-5, want.view()));
          EXPECT_OK(cu::layerNorm(dx.view(), dg.view(), bias ? &dbv : nullptr,
                                  -1, 1e-5, dout.view(), stream));
          sync();
          EXPECT_TRUE(
              allClose(dout.download(), want, relFor(t), 1e-5 + absFor(t)))
              << "layer_norm " << dtypeName(t);
        }
        Buf want(t, shape);
        EXPECT_OK(rmsNorm(x.view(), g.view(), -1, 1e-6, want.view()));
        EXPECT_OK(
            cu::rmsNorm(dx.view(), dg.view(), -1, 1e-6, dout.view(), stream));
        sync();
        EXPECT_TRUE(
            allClose(dout.download(), want, relFor(t), 1e-5 + absFor(t)))
            << "rms_norm " << dtypeName(t);
      }
  }
}

/// A row's mean (0 for RMS) and 1/std (1/rms), in double.
void refMoments(bool rms, const float *xr, int64_t n, double eps, double &mean,
                double &rstd) {
  mean = 0;
  if (!rms) {
    for (int64_t i = 0; i < n; ++i)
      mean += xr[i];
    mean /= n;
  }
  double var = 0;
  for (int64_t i = 0; i < n; ++i)
    var += (xr[i] - mean) * (xr[i] - mean);
  rstd = 1 / std::sqrt(var / n + eps);
}

/// Double-precision layer / RMS norm gradients over rows of n.
void refNormBackward(bool rms, const std::vector<float> &x,
                     const std::vector<float> &g, const std::vector<float> &dy,
                     int64_t n, double eps, std::vector<double> &dx,
                     std::vector<double> &dg, std::vector<double> &db) {
  int64_t rows = int64_t(x.size()) / n;
  dx.assign(x.size(), 0);
  dg.assign(n, 0);
  db.assign(n, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &x[r * n], *dyr = &dy[r * n];
    double mean, rstd;
    refMoments(rms, xr, n, eps, mean, rstd);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      double xhat = (xr[i] - mean) * rstd, dxhat = double(dyr[i]) * g[i];
      s1 += dxhat;
      s2 += dxhat * xhat;
      dg[i] += dyr[i] * xhat;
      db[i] += dyr[i];
    }
    s1 /= n;
    s2 /= n;
    for (int64_t i = 0; i < n; ++i) {
      double xhat = (xr[i] - mean) * rstd, dxhat = double(dyr[i]) * g[i];
      dx[r * n + i] = rstd * (dxhat - (rms ? 0 : s1) - xhat * s2);
    }
  }
}

TEST_F(CudaKernel, NormBackwardMatchesReference) {
  for (bool rowKernels : {false, true}) {
    NormKernels kernels(rowKernels);
    for (bool rms : {false, true}) {
      int64_t rows = 96, n = 256;
      Buf x = randomF32({rows, n}, -3, 3), g = randomF32({n}),
          dy = randomF32({rows, n});
      std::vector<double> dx, dg, db;
      refNormBackward(rms, x.values<float>(), g.values<float>(),
                      dy.values<float>(), n, 1e-5, dx, dg, db);
      Dev ddx_in(x), dgm(g), ddy(dy), ddx(DType::F32, {rows, n}),
          ddg(DType::F32, {n}), ddb(DType::F32, {n});
      Tensor gv = ddg.view(), bv = ddb.view();
      if (rms)
        EXPECT_OK(cu::rmsNormBackward(ddx_in.view(), dgm.view(), ddy.view(), 1,
                                      1e-5, ddx.view(), &gv, stream));
      else
        EXPECT_OK(cu::layerNormBackward(ddx_in.view(), dgm.view(), ddy.view(),
                                        1, 1e-5, ddx.view(), &gv, &bv, stream));
      sync();
      Buf gx = ddx.download(), gg = ddg.download(), gb = ddb.download();
      for (int64_t i = 0; i < rows * n; ++i)
        ASSERT_TRUE(close(gx.data<float>()[i], dx[i], 1e-4, 1e-5)) << i;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(close(gg.data<float>()[i], dg[i], 1e-4, 1e-4)) << i;
        if (!rms) {
          ASSERT_TRUE(close(gb.data<float>()[i], db[i], 1e-4, 1e-4)) << i;
        }
      }
    }
  }
}

TEST_F(CudaKernel, NormParamGradsOverRowChunksMatchReference) {
  for (bool rowKernels : {false, true}) {
    NormKernels kernels(rowKernels);
    // Many rows: the parameter gradients sum chunks of rows in one pass and
    // the chunk sums in a second (in order: the same bits every run). 1000
    // rows are 3 chunks of 334 (the last short), 513 rows 2 of 257; n = 40
    // leaves the second column block part empty.
    for (int64_t rows : {1000, 513})
      for (bool rms : {false, true}) {
        int64_t n = 40;
        Buf x = randomF32({rows, n}, -3, 3), g = randomF32({n}),
            dy = randomF32({rows, n});
        std::vector<double> dx, dg, db;
        refNormBackward(rms, x.values<float>(), g.values<float>(),
                        dy.values<float>(), n, 1e-5, dx, dg, db);
        Dev dxin(x), dgm(g), ddy(dy), ddx(DType::F32, {rows, n});
        Buf first[2];
        for (int run = 0; run < 2; ++run) {
          Dev ddg(DType::F32, {n}), ddb(DType::F32, {n});
          Tensor gv = ddg.view(), bv = ddb.view();
          if (rms)
            EXPECT_OK(cu::rmsNormBackward(dxin.view(), dgm.view(), ddy.view(),
                                          1, 1e-5, ddx.view(), &gv, nullptr,
                                          stream));
          else
            EXPECT_OK(cu::layerNormBackward(dxin.view(), dgm.view(), ddy.view(),
                                            1, 1e-5, ddx.view(), &gv, &bv,
                                            nullptr, stream));
          sync();
          Buf gg = ddg.download(), gb = ddb.download();
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(close(gg.data<float>()[i], dg[i], 1e-4, 1e-3))
                << rows << " rows, rms " << rms << ", column " << i;
            if (!rms) {
              ASSERT_TRUE(close(gb.data<float>()[i], db[i], 1e-4, 1e-3))
                  << rows << " rows, column " << i;
            }
          }
          if (run == 0) {
            first[0] = gg;
            first[1] = gb;
          } else {
            EXPECT_EQ(gg.bytes, first[0].bytes) << "not deterministic";
            EXPECT_EQ(gb.bytes, first[1].bytes) << "not deterministic";
          }
        }
      }
  }
}

/// Double-precision layer (b may be empty) or RMS norm of rows of n.
std::vector<double> refNorm(bool rms, const std::vector<float> &x,
                            const std::vector<float> &g,
                            const std::vector<float> &b, int64_t n,
                            double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / size_t(n); ++r) {
    const float *xr = &x[r * n];
    double mean, rstd;
    refMoments(rms, xr, n, eps, mean, rstd);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = (xr[i] - mean) * rstd * g[i] + (b.empty() ? 0.0 : b[i]);
  }
  return y;
}

TEST_F(CudaKernel, PackedAndRowKernelsMatchReference) {
  // n = 256: one pack a thread of 128; 768: two; 2048: four; 3000 and
  // 4096: four of 256 threads (3000: 750 packs, the last threads' fourth
  // empty); 302 (not a multiple of 4) and 4100 (above 4096): the row
  // kernels whatever LAMINA_CUDA_NORM says. 203 rows are 26 chunks of 8 in
  // the packed backward, the last of 3.
  struct Case {
    int64_t rows, n;
  } cases[] = {{203, 256}, {9, 768}, {11, 2048}, {5, 3000},
               {4, 4096},  {7, 302}, {3, 4100}};
  for (bool rowKernels : {false, true})
    for (const Case &c : cases)
      for (bool rms : {false, true}) {
        NormKernels kernels(rowKernels);
        std::string what = std::string(rowKernels ? "rows " : "packed ") +
                           (rms ? "rms_norm " : "layer_norm ") +
                           std::to_string(c.rows) + "x" + std::to_string(c.n);
        Buf x = randomF32({c.rows, c.n}, -3, 3), g = randomF32({c.n}),
            b = randomF32({c.n}), dy = randomF32({c.rows, c.n}),
            add = randomF32({c.rows, c.n});
        std::vector<float> noBias;
        std::vector<double> want =
            refNorm(rms, x.values<float>(), g.values<float>(),
                    rms ? noBias : b.values<float>(), c.n, 1e-5);
        Dev dx(x), dg(g), db(b), dout(DType::F32, {c.rows, c.n});
        Tensor dbv = db.view();
        EXPECT_OK(rms ? cu::rmsNorm(dx.view(), dg.view(), -1, 1e-5, dout.view(),
                                    stream)
                      : cu::layerNorm(dx.view(), dg.view(), &dbv, -1, 1e-5,
                                      dout.view(), stream));
        sync();
        Buf y = dout.download();
        for (int64_t i = 0; i < c.rows * c.n; ++i)
          ASSERT_TRUE(close(y.data<float>()[i], want[i], 1e-4, 1e-5))
              << what << " forward, element " << i;

        std::vector<double> rdx, rdg, rdb;
        refNormBackward(rms, x.values<float>(), g.values<float>(),
                        dy.values<float>(), c.n, 1e-5, rdx, rdg, rdb);
        Dev ddy(dy), dadd(add), ddx(DType::F32, {c.rows, c.n}),
            ddg(DType::F32, {c.n}), ddb(DType::F32, {c.n});
        Tensor gv = ddg.view(), bv = ddb.view(), av = dadd.view();
        EXPECT_OK(rms ? cu::rmsNormBackward(dx.view(), dg.view(), ddy.view(), 1,
                                            1e-5, ddx.view(), &gv, &av, stream)
                      : cu::layerNormBackward(dx.view(), dg.view(), ddy.view(),
                                              1, 1e-5, ddx.view(), &gv, &bv,
                                              &av, stream));
        sync();
        Buf gx = ddx.download(), gg = ddg.download(), gb = ddb.download();
        for (int64_t i = 0; i < c.rows * c.n; ++i)
          ASSERT_TRUE(close(gx.data<float>()[i], rdx[i] + add.data<float>()[i],
                            1e-4, 1e-5))
              << what << " dx, element " << i;
        for (int64_t i = 0; i < c.n; ++i) {
          ASSERT_TRUE(close(gg.data<float>()[i], rdg[i], 1e-4, 1e-4))
              << what << " dg, column " << i;
          if (!rms) {
            ASSERT_TRUE(close(gb.data<float>()[i], rdb[i], 1e-4, 1e-4))
                << what << " db, column " << i;
          }
        }
      }
}

TEST_F(CudaKernel, NormSettingSelectsTheKernelFamily) {
  // LAMINA_CUDA_NORM=rows takes other kernels for a shape the packed ones
  // take: the parameter gradients, summed in another order, differ in
  // their last bits (each family is checked against the references above).
  int64_t rows = 203, n = 256;
  Buf x = randomF32({rows, n}, -3, 3), g = randomF32({n}),
      dy = randomF32({rows, n});
  Dev dx(x), dg(g), ddy(dy), ddx(DType::F32, {rows, n});
  Buf sums[2];
  for (bool rowKernels : {false, true}) {
    NormKernels kernels(rowKernels);
    Dev ddg(DType::F32, {n}), ddb(DType::F32, {n});
    Tensor gv = ddg.view(), bv = ddb.view();
    EXPECT_OK(cu::layerNormBackward(dx.view(), dg.view(), ddy.view(), 1, 1e-5,
                                    ddx.view(), &gv, &bv, nullptr, stream));
    sync();
    sums[rowKernels] = ddg.download();
  }
  EXPECT_NE(sums[0].bytes, sums[1].bytes);
}

TEST_F(CudaKernel, PackedNormsOfNarrowRowsMatchHost) {
  // bf16 and f16 rows in the packed kernels (8-byte packs), forward and
  // backward, against the host kernels.
  std::vector<int64_t> shape = {12, 1024}, pshape = {1024};
  for (DType t : {DType::BF16, DType::F16})
    for (bool rms : {false, true}) {
      Buf x = randomOf(t, shape, -3, 3), g = randomOf(t, pshape),
          b = randomOf(t, pshape), dy = randomOf(t, shape);
      Buf want(t, shape), hdx(t, shape), hdg(t, pshape), hdb(t, pshape);
      Tensor bv = b.view(), hgv = hdg.view(), hbv = hdb.view();
      EXPECT_OK(
          rms ? rmsNorm(x.view(), g.view(), -1, 1e-5, want.view())
              : layerNorm(x.view(), g.view(), &bv, -1, 1e-5, want.view()));
      EXPECT_OK(rms ? rmsNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                      hdx.view(), &hgv)
                    : layerNormBackward(x.view(), g.view(), dy.view(), 1, 1e-5,
                                        hdx.view(), &hgv, &hbv));
      Dev dx(x), dg(g), db(b), ddy(dy), dout(t, shape), ddx(t, shape),
          ddg(t, pshape), ddb(t, pshape);
      Tensor dbv = db.view(), dgv = ddg.view(), dbgv = ddb.view();
      EXPECT_OK(
          rms ? cu::rmsNorm(dx.view(), dg.view(), -1, 1e-5, dout.view(), stream)
              : cu::layerNorm(dx.view(), dg.view(), &dbv, -1, 1e-5, dout.view(),
                              stream));
      EXPECT_OK(rms ? cu::rmsNormBackward(dx.view(), dg.view(), ddy.view(), 1,
                                          1e-5, ddx.view(), &dgv, nullptr,
                                          stream)
                    : cu::layerNormBackward(dx.view(), dg.view(), ddy.view(), 1,
                                            1e-5, ddx.view(), &dgv, &dbgv,
                                            nullptr, stream));
      sync();
      std::string what = std::string(dtypeName(t)) + (rms ? " rms" : " layer");
      EXPECT_TRUE(allClose(dout.download(), want, relFor(t), absFor(t)))
          << what;
      EXPECT_TRUE(allClose(ddx.download(), hdx, relFor(t), absFor(t))) << what;
      // 12 rows of values up to ~3 summed: a 2e-2 bound on the narrow sums.
      EXPECT_TRUE(allClose(ddg.download(), hdg, relFor(t), 2e-2)) << what;
      if (!rms) {
        EXPECT_TRUE(allClose(ddb.download(), hdb, relFor(t), 2e-2)) << what;
      }
    }
}

TEST_F(CudaKernel, NormBackwardOfNarrowGradientsMatchesHost) {
  // An f32 input's result gradient in bf16/f16 (a product stored narrow):
  // widened on load, in both kernel families, against the host kernels
  // (which equal the gradients of the widened copy: NNTest). n = 1024 takes
  // the packed kernels, 300 the packed ones with partial packs, 301 the
  // one-block-a-row ones.
  for (bool rowKernels : {false, true}) {
    NormKernels kernels(rowKernels);
    for (int64_t n : {1024, 300, 301})
      for (DType t : {DType::BF16, DType::F16})
        for (int variant = 0; variant < 4; ++variant) {
          bool rms = variant & 1, add = variant & 2;
          int64_t rows = 24;
          Buf x = randomF32({rows, n}, -3, 3), g = randomF32({n}),
              dy = randomOf(t, {rows, n}), r = randomF32({rows, n});
          Buf hx(DType::F32, {rows, n}), hg(DType::F32, {n}),
              hb(DType::F32, {n});
          Tensor hgv = hg.view(), hbv = hb.view(), hr = r.view();
          EXPECT_OK(rms ? rmsNormBackward(x.view(), g.view(), dy.view(), 1,
                                          1e-5, hx.view(), &hgv,
                                          add ? &hr : nullptr)
                        : layerNormBackward(x.view(), g.view(), dy.view(), 1,
                                            1e-5, hx.view(), &hgv, &hbv,
                                            add ? &hr : nullptr));
          Dev dx(x), dgm(g), ddy(dy), dr(r), ddx(DType::F32, {rows, n}),
              ddg(DType::F32, {n}), ddb(DType::F32, {n});
          Tensor gv = ddg.view(), bv = ddb.view(), rv = dr.view();
          EXPECT_OK(rms ? cu::rmsNormBackward(dx.view(), dgm.view(), ddy.view(),
                                              1, 1e-5, ddx.view(), &gv,
                                              add ? &rv : nullptr, stream)
                        : cu::layerNormBackward(dx.view(), dgm.view(),
                                                ddy.view(), 1, 1e-5, ddx.view(),
                                                &gv, &bv, add ? &rv : nullptr,
                                                stream));
          sync();
          std::string what = std::string(dtypeName(t)) + " n " +
                             std::to_string(n) + (rms ? " rms" : " layer") +
                             (add ? " addend" : "") +
                             (rowKernels ? " rows" : "");
          EXPECT_TRUE(allClose(ddx.download(), hx, 1e-4, 1e-5)) << what;
          EXPECT_TRUE(allClose(ddg.download(), hg, 1e-4, 1e-4)) << what;
          if (!rms) {
            EXPECT_TRUE(allClose(ddb.download(), hb, 1e-4, 1e-4)) << what;
          }
        }
  }
}

TEST_F(CudaKernel, MisalignedNormsTakeTheRowKernels) {
  // A row one element off 4-element alignment cannot be loaded in packs.
  std::vector<int64_t> shape = {6, 512}, pshape = {512};
  Buf x = randomF32(shape, -3, 3), g = randomF32(pshape), b = randomF32(pshape);
  Buf want(DType::F32, shape);
  Tensor bv = b.view();
  EXPECT_OK(layerNorm(x.view(), g.view(), &bv, -1, 1e-5, want.view()));
  MisalignedDev dx(x), dout(DType::F32, shape);
  Dev dg(g), db(b);
  Tensor dbv = db.view();
  EXPECT_OK(
      cu::layerNorm(dx.view(), dg.view(), &dbv, -1, 1e-5, dout.view(), stream));
  sync();
  EXPECT_TRUE(allClose(dout.download(), want, 1e-5, 1e-5));
}

} // namespace
