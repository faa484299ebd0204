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
