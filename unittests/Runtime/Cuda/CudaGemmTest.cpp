//===- CudaGemmTest.cpp - cuBLASLt matmul epilogues against the host ------===//
//
// cu::matmulEpilogue (the bias epilogue, or its fallback add; the addend as
// C with beta = 1) against the host's matmulEpilogue, over the paths of
// Gemm.cpp: one call, strided batches, the shared rhs folded into m, one
// call per broadcast batch (the addend offset per batch), transposes, the
// result written over the addend, k = 0; and the grouped GEMM of the
// experts (GroupedGemm.cpp). Skipped without a GPU.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <memory>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

struct Case {
  std::vector<int64_t> a, b; // as stored
  bool ta, tb;
};

const Case kCases[] = {
    {{17, 32}, {32, 8}, false, false},
    {{32, 17}, {8, 32}, true, true},
    {{2, 3, 17, 32}, {2, 3, 32, 8}, false, false}, // strided batched
    {{4, 17, 32}, {32, 8}, false, false},          // shared rhs: folded
    {{4, 32, 17}, {8, 32}, true, true},            // shared rhs, per batch
    {{2, 1, 5, 8}, {3, 8, 4}, false, false},       // broadcast batch
};

std::vector<int64_t> resultShape(const Case &c) {
  int ra = int(c.a.size()), rb = int(c.b.size());
  int64_t bs[8];
  int br = 0;
  EXPECT_TRUE(broadcastShape(c.a.data(), ra - 2, c.b.data(), rb - 2, bs, &br));
  std::vector<int64_t> out(bs, bs + br);
  out.push_back(c.a[ra - (c.ta ? 1 : 2)]);
  out.push_back(c.b[rb - (c.tb ? 2 : 1)]);
  return out;
}

TEST_F(CudaKernel, MatmulEpilogueMatchesHost) {
  // Operand type -> result type (and the bias's and addend's).
  const std::pair<DType, DType> types[] = {{DType::F32, DType::F32},
                                           {DType::BF16, DType::F32},
                                           {DType::BF16, DType::BF16},
                                           {DType::F16, DType::F16}};
  for (auto [t, r] : types)
    for (const Case &c : kCases)
      for (int terms = 1; terms < 4; ++terms) { // bias, addend, both
        bool withBias = terms & 1, withAddend = terms & 2;
        std::vector<int64_t> out = resultShape(c);
        Buf a = randomOf(t, c.a), b = randomOf(t, c.b);
        Buf bias = randomOf(r, {out.back()}), addend = randomOf(r, out);
        Buf want(r, out);
        Tensor hb = bias.view(), ha = addend.view();
        EXPECT_OK(matmulEpilogue(a.view(), b.view(), withBias ? &hb : nullptr,
                                 withAddend ? &ha : nullptr, want.view(), c.ta,
                                 c.tb));
        Dev da(a), db(b), dbias(bias), dadd(addend), dout(r, out);
        Tensor vb = dbias.view(), va = dadd.view();
        // With an addend, also written over it (C = D).
        for (bool inPlace : {false, true}) {
          if (inPlace && !withAddend)
            continue;
          Tensor result = inPlace ? va : dout.view();
          EXPECT_OK(cu::matmulEpilogue(da.view(), db.view(),
                                       withBias ? &vb : nullptr,
                                       withAddend ? &va : nullptr, result,
                                       c.ta, c.tb, stream));
          sync();
          Buf got = inPlace ? dadd.download() : dout.download();
          EXPECT_TRUE(allClose(got, want, relFor(r),
                               r == DType::F32 ? 1e-4 : 5e-2))
              << dtypeName(t) << " -> " << dtypeName(r) << " case "
              << (&c - kCases) << " terms " << terms << " in place "
              << inPlace;
        }
      }
}

TEST_F(CudaKernel, MatmulEpilogueEmptyKAndErrors) {
  // k = 0: the result is addend + bias.
  Buf a(DType::F32, {2, 0}), b(DType::F32, {0, 3});
  Buf bias = f32({3}, {1, 2, 3}), addend = f32({2, 3}, {10, 20, 30, 40, 50, 60});
  Dev da(a), db(b), dbias(bias), dadd(addend), dout(DType::F32, {2, 3});
  Tensor vb = dbias.view(), va = dadd.view();
  EXPECT_OK(cu::matmulEpilogue(da.view(), db.view(), &vb, &va, dout.view(),
                               false, false, stream));
  sync();
  EXPECT_EQ(dout.download().values<float>(),
            (std::vector<float>{11, 22, 33, 41, 52, 63}));
  // A bias of another type than the result (cuBLASLt reads it in D's type).
  Buf x = randomOf(DType::BF16, {2, 4}), y = randomOf(DType::BF16, {4, 3});
  Dev dx(x), dy(y), dr(DType::BF16, {2, 3});
  EXPECT_ERROR(cu::matmulEpilogue(dx.view(), dy.view(), &vb, nullptr,
                                  dr.view(), false, false, stream),
               "is not a row");
}

} // namespace

namespace {
// groupedMatmul: every transpose pair, sizes differing per problem, and
// problems with no rows or k = 0 left as they were; each against the host
// matmul.
TEST_F(CudaKernel, GroupedMatmulMatchesHost) {
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  const Case cases[] = {{5, 7, 3, false, false}, {4, 6, 9, true, false},
                        {8, 3, 5, false, true},  {3, 5, 4, true, true},
                        {0, 6, 4, false, true},  {2, 3, 0, false, false}};
  std::vector<Buf> lhs, rhs, want;
  std::vector<std::unique_ptr<Dev>> dl, dr, dc;
  std::vector<cu::GemmProblem> problems;
  for (const Case &c : cases) {
    lhs.push_back(randomF32(c.ta ? std::vector<int64_t>{c.k, c.m}
                                 : std::vector<int64_t>{c.m, c.k}));
    rhs.push_back(randomF32(c.tb ? std::vector<int64_t>{c.n, c.k}
                                 : std::vector<int64_t>{c.k, c.n}));
    Buf result = randomF32({c.m, c.n});
    dc.push_back(std::make_unique<Dev>(result));
    if (c.m && c.k)
      EXPECT_OK(matmul(lhs.back().view(), rhs.back().view(), result.view(),
                       c.ta, c.tb));
    want.push_back(std::move(result)); // k = 0: untouched
    dl.push_back(std::make_unique<Dev>(lhs.back()));
    dr.push_back(std::make_unique<Dev>(rhs.back()));
    problems.push_back({static_cast<const float *>(dl.back()->ptr),
                        static_cast<const float *>(dr.back()->ptr),
                        static_cast<float *>(dc.back()->ptr), c.m, c.n, c.k,
                        c.ta, c.tb});
  }
  EXPECT_OK(cu::groupedMatmul(problems, stream));
  sync();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(allClose(dc[i]->download(), want[i], 1e-5, 1e-6))
        << "problem " << i;
}
} // namespace
