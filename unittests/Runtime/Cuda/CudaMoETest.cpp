//===- CudaMoETest.cpp - top-k and the experts on CUDA against the host ---===//

#include "CudaTestUtil.h"

#include "lamina/Runtime/Kernels.h"

#include <gtest/gtest.h>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

TEST_F(CudaKernel, TopKMatchesHost) {
  // Ties and a NaN: ONNX's order (NaN first, lower index first on ties).
  Buf in = randomF32({7, 6});
  in.data<float>()[3] = in.data<float>()[4];
  in.data<float>()[8] = std::nanf("");
  for (int64_t k : {1, 2, 6}) {
    Buf wantV(DType::F32, {7, k}), wantI(DType::I64, {7, k});
    EXPECT_OK(topk(in.view(), k, wantV.view(), wantI.view()));
    Dev din(in), v(DType::F32, {7, k}), i(DType::I64, {7, k});
    EXPECT_OK(cu::topk(din.view(), k, v.view(), i.view(), stream));
    sync();
    EXPECT_EQ(i.download().bytes, wantI.bytes) << "k " << k;
    EXPECT_EQ(v.download().bytes, wantV.bytes) << "k " << k;
  }
}

// 9 tokens, hidden 8, 4 experts of width 6, top-2; expert 3 sees no token
// and one pair goes to no expert (index -1).
TEST_F(CudaKernel, MixtureOfExpertsMatchesHost) {
  const int64_t T = 9, H = 8, E = 4, I = 6, k = 2;
  std::vector<int64_t> picks = {0, 1, 1, 2, 2,  0, 1, 0, 0,
                                2, 2, 1, 1, -1, 0, 1, 2, 0};
  Buf x = randomF32({T, H}), idx = i64({T, k}, picks),
      w = randomF32({T, k}, 0.1f, 1),
      gu = randomF32({E, 2 * I, H}, -0.5f, 0.5f),
      dn = randomF32({E, H, I}, -0.5f, 0.5f), gy = randomF32({T, H});
  Buf want(DType::F32, {T, H});
  EXPECT_OK(
      moe(x.view(), idx.view(), w.view(), gu.view(), dn.view(), want.view()));
  Dev dx(x), di(idx), dw(w), dgu(gu), ddn(dn), dgy(gy), y(DType::F32, {T, H});
  EXPECT_OK(cu::moe(dx.view(), di.view(), dw.view(), dgu.view(), ddn.view(),
                    y.view(), stream));
  sync();
  EXPECT_TRUE(allClose(y.download(), want, 1e-5, 1e-6));

  Buf gx(DType::F32, {T, H}), gw(DType::F32, {T, k}),
      ggu(DType::F32, {E, 2 * I, H}), gdn(DType::F32, {E, H, I});
  EXPECT_OK(moeBackward(x.view(), idx.view(), w.view(), gu.view(), dn.view(),
                        gy.view(), gx.view(), gw.view(), ggu.view(),
                        gdn.view()));
  Dev cgx(DType::F32, {T, H}), cgw(DType::F32, {T, k}),
      cggu(DType::F32, {E, 2 * I, H}), cgdn(DType::F32, {E, H, I});
  EXPECT_OK(cu::moeBackward(dx.view(), di.view(), dw.view(), dgu.view(),
                            ddn.view(), dgy.view(), cgx.view(), cgw.view(),
                            cggu.view(), cgdn.view(), stream));
  sync();
  EXPECT_TRUE(allClose(cgx.download(), gx, 1e-5, 1e-6)) << "input";
  EXPECT_TRUE(allClose(cgw.download(), gw, 1e-5, 1e-6)) << "weights";
  EXPECT_TRUE(allClose(cggu.download(), ggu, 1e-5, 1e-6)) << "gate_up";
  EXPECT_TRUE(allClose(cgdn.download(), gdn, 1e-5, 1e-6)) << "down";
  // The expert no token picked: zero gradients.
  std::vector<float> unused = cggu.download().values<float>();
  EXPECT_TRUE(std::all_of(unused.end() - 2 * I * H, unused.end(),
                          [](float v) { return v == 0.0f; }));
}

// Expert parallelism's layout over 2 ranks (blocks of T k rows): the
// dispatch, the combine and its gradient, the rows' experts, equal to the
// host kernels bit for bit but for the sums' rounding. The same picks as
// above: expert 3 sees no token, one pair goes nowhere.
TEST_F(CudaKernel, ExpertParallelRowsMatchHost) {
  const int64_t T = 9, H = 8, E = 4, R = 2, k = 2, C = T * k;
  std::vector<int64_t> picks = {0, 1, 1, 2, 2,  0, 1, 0, 0,
                                2, 2, 1, 1, -1, 0, 1, 2, 0};
  Buf x = randomF32({T, H}), idx = i64({T, k}, picks),
      w = randomF32({T, k}, 0.1f, 1), rows = randomF32({R * C, H}),
      gy = randomF32({T, H});
  Dev dx(x), di(idx), dw(w), drows(rows), dgy(gy);

  Buf wantRows(DType::F32, {R * C, H}), wantCounts(DType::I64, {R, E / R});
  EXPECT_OK(moeDispatch(x.view(), idx.view(), E, R, wantRows.view(),
                        wantCounts.view()));
  Dev gotRows(DType::F32, {R * C, H}), gotCounts(DType::I64, {R, E / R});
  EXPECT_OK(cu::moeDispatch(dx.view(), di.view(), E, R, gotRows.view(),
                            gotCounts.view(), stream));
  sync();
  EXPECT_EQ(gotRows.download().bytes, wantRows.bytes);
  EXPECT_EQ(gotCounts.download().bytes, wantCounts.bytes);

  Buf want(DType::F32, {T, H});
  EXPECT_OK(moeCombine(rows.view(), idx.view(), w.view(), E, R, want.view()));
  Dev y(DType::F32, {T, H});
  EXPECT_OK(cu::moeCombine(drows.view(), di.view(), dw.view(), E, R, y.view(),
                           stream));
  sync();
  EXPECT_TRUE(allClose(y.download(), want, 1e-6, 1e-7));

  Buf gr(DType::F32, {R * C, H}), gw(DType::F32, {T, k});
  EXPECT_OK(moeCombineBackward(rows.view(), idx.view(), w.view(), gy.view(), E,
                               R, gr.view(), gw.view()));
  Dev cgr(randomF32({R * C, H})), cgw(DType::F32, {T, k});
  EXPECT_OK(cu::moeCombineBackward(drows.view(), di.view(), dw.view(),
                                   dgy.view(), E, R, cgr.view(), cgw.view(),
                                   stream));
  sync();
  // The rows no pair reads: zero, though the buffer held values.
  EXPECT_EQ(cgr.download().bytes, gr.bytes);
  EXPECT_TRUE(allClose(cgw.download(), gw, 1e-5, 1e-6));

  Buf counts = i64({R, E / R}, {3, 4, 0, 5}), experts(DType::I64, {R * C, 1});
  EXPECT_OK(moeRowExperts(counts.view(), experts.view()));
  Dev dcounts(counts), dexperts(DType::I64, {R * C, 1});
  EXPECT_OK(cu::moeRowExperts(dcounts.view(), dexperts.view(), stream));
  sync();
  EXPECT_EQ(dexperts.download().bytes, experts.bytes);

  // More rows for a rank than its block: refused by name.
  Dev small(DType::F32, {R * 2, H}), c2(DType::I64, {R, E / R});
  Status s = cu::moeDispatch(dx.view(), di.view(), E, R, small.view(),
                             c2.view(), stream);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("moe_dispatch:"), std::string::npos)
      << s.message();
}

TEST_F(CudaKernel, MixtureOfExpertsRefusesWhatItCannotRun) {
  Buf x = randomF32({2, 4}), idx = i64({2, 1}, {0, 5}), w = randomF32({2, 1}),
      gu = randomF32({2, 6, 4}), dn = randomF32({2, 4, 3});
  Dev dx(x), di(idx), dw(w), dgu(gu), ddn(dn), y(DType::F32, {2, 4});
  Status s = cu::moe(dx.view(), di.view(), dw.view(), dgu.view(), ddn.view(),
                     y.view(), stream);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expert index 5 of token 1"), std::string::npos)
      << s.message();
}

} // namespace
