//===- ElementwiseTest.cpp - unary, binary, compare, select, cast ---------===//

#include "RuntimeTestUtil.h"

#include <climits>
#include <functional>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

double refUnary(UnaryOp op, double x) {
  switch (op) {
  case UnaryOp::Neg:
    return -x;
  case UnaryOp::Abs:
    return std::fabs(x);
  case UnaryOp::Relu:
    return x < 0 ? 0 : x;
  case UnaryOp::Exp:
    return std::exp(x);
  case UnaryOp::Log:
    return std::log(x);
  case UnaryOp::Sqrt:
    return std::sqrt(x);
  case UnaryOp::Reciprocal:
    return 1 / x;
  case UnaryOp::Tanh:
    return std::tanh(x);
  case UnaryOp::Erf:
    return std::erf(x);
  case UnaryOp::Sigmoid:
    return 1 / (1 + std::exp(-x));
  case UnaryOp::Gelu:
    return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
  case UnaryOp::GeluTanh:
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  case UnaryOp::Cos:
    return std::cos(x);
  case UnaryOp::Sin:
    return std::sin(x);
  case UnaryOp::GeluDerivative:
    return 0.5 * std::erfc(-x / std::sqrt(2.0)) +
           x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  case UnaryOp::GeluTanhDerivative: {
    double c = std::sqrt(2 / M_PI), a = 0.044715;
    double t = std::tanh(c * (x + a * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x);
  }
  case UnaryOp::Not:
    return x == 0;
  }
  return 0;
}

const UnaryOp kFloatUnary[] = {
    UnaryOp::Neg, UnaryOp::Abs,     UnaryOp::Relu,       UnaryOp::Exp,
    UnaryOp::Log, UnaryOp::Sqrt,    UnaryOp::Reciprocal, UnaryOp::Tanh,
    UnaryOp::Erf, UnaryOp::Sigmoid, UnaryOp::Gelu,       UnaryOp::GeluTanh,
    UnaryOp::Cos, UnaryOp::Sin, UnaryOp::GeluDerivative,
    UnaryOp::GeluTanhDerivative};

bool positiveOnly(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt;
}

TEST(RuntimeUnary, FloatOpsMatchReference) {
  for (UnaryOp op : kFloatUnary) {
    Buf in = randomF32({3, 7}, positiveOnly(op) ? 0.1f : -3, 3);
    Buf out(DType::F32, {3, 7});
    EXPECT_OK(unary(op, in.view(), out.view()));
    // The GELU slopes add terms of size ~1 that cancel near their zeros
    // (x ~ -2.4): a few f32 ulps of those terms, absolute.
    bool cancels =
        op == UnaryOp::GeluDerivative || op == UnaryOp::GeluTanhDerivative;
    for (int64_t i = 0; i < in.count(); ++i)
      EXPECT_TRUE(close(out.data<float>()[i], refUnary(op, in.data<float>()[i]),
                        2e-6, cancels ? 5e-7 : 1e-7))
          << "op " << int(op);
    // f64 computes in f64.
    Buf d(DType::F64, {3, 7}), dout(DType::F64, {3, 7});
    for (int64_t i = 0; i < in.count(); ++i)
      d.data<double>()[i] = in.data<float>()[i];
    EXPECT_OK(unary(op, d.view(), dout.view()));
    for (int64_t i = 0; i < in.count(); ++i)
      EXPECT_TRUE(close(dout.data<double>()[i],
                        refUnary(op, d.data<double>()[i]), 1e-14, 1e-300));
  }
}

TEST(RuntimeUnary, GeluDerivativesAreTheSlopes) {
  // Central differences of the f64 gelu kernels themselves.
  for (auto [gelu, slope] : {std::pair(UnaryOp::Gelu, UnaryOp::GeluDerivative),
                             std::pair(UnaryOp::GeluTanh,
                                       UnaryOp::GeluTanhDerivative)})
    for (double x : {-6.0, -2.5, -1.0, -0.3, 0.0, 0.4, 1.7, 5.0}) {
      const double h = 1e-6;
      Buf in = make(DType::F64, {3}, std::vector<double>{x - h, x + h, x});
      Buf y(DType::F64, {3}), d(DType::F64, {3});
      EXPECT_OK(unary(gelu, in.view(), y.view()));
      EXPECT_OK(unary(slope, in.view(), d.view()));
      double numeric = (y.data<double>()[1] - y.data<double>()[0]) / (2 * h);
      EXPECT_NEAR(d.data<double>()[2], numeric, 1e-8) << "x = " << x;
    }
}

TEST(RuntimeUnary, HalfComputesInFloatAndRounds) {
  std::vector<float> v = randomFloats(32, -3, 3);
  for (const auto &[t, toBits, fromBits] : kHalfFormats) {
    Buf in(t, {32}), out(t, {32});
    for (int i = 0; i < 32; ++i)
      in.data<uint16_t>()[i] = toBits(v[i]);
    EXPECT_OK(unary(UnaryOp::Tanh, in.view(), out.view()));
    for (int i = 0; i < 32; ++i) {
      float x = fromBits(in.data<uint16_t>()[i]);
      EXPECT_EQ(out.data<uint16_t>()[i], toBits(std::tanh(x)));
    }
  }
}

TEST(RuntimeUnary, IntegerAndBoolOps) {
  Buf in = make<int32_t>(DType::I32, {4}, {-5, 0, 7, INT_MIN});
  Buf out(DType::I32, {4});
  EXPECT_OK(unary(UnaryOp::Neg, in.view(), out.view()));
  EXPECT_EQ(out.values<int32_t>(), (std::vector<int32_t>{5, 0, -7, INT_MIN}));
  EXPECT_OK(unary(UnaryOp::Abs, in.view(), out.view()));
  EXPECT_EQ(out.values<int32_t>(), (std::vector<int32_t>{5, 0, 7, INT_MIN}));
  EXPECT_OK(unary(UnaryOp::Relu, in.view(), in.view())); // in place
  EXPECT_EQ(in.values<int32_t>(), (std::vector<int32_t>{0, 0, 7, 0}));
  Buf b = make<uint8_t>(DType::I1, {3}, {0, 1, 2}), nb(DType::I1, {3});
  EXPECT_OK(unary(UnaryOp::Not, b.view(), nb.view()));
  EXPECT_EQ(nb.values<uint8_t>(), (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_ERROR(unary(UnaryOp::Exp, out.view(), out.view()), "not defined");
  Buf f(DType::F32, {4});
  EXPECT_ERROR(unary(UnaryOp::Not, f.view(), f.view()), "needs i1");
  EXPECT_ERROR(unary(UnaryOp::Neg, b.view(), b.view()), "not defined");
  EXPECT_ERROR(unary(UnaryOp::Neg, f.view(), out.view()), "differs");
}

double refBinary(BinaryOp op, double a, double b) {
  switch (op) {
  case BinaryOp::Add:
    return a + b;
  case BinaryOp::Sub:
    return a - b;
  case BinaryOp::Mul:
    return a * b;
  case BinaryOp::Div:
    return a / b;
  case BinaryOp::Pow:
    return std::pow(a, b);
  case BinaryOp::Min:
    return std::min(a, b);
  case BinaryOp::Max:
    return std::max(a, b);
  default:
    return 0;
  }
}

/// Runs op on random f32 operands of the given shapes and checks every
/// result element against the naive broadcast reference.
void checkBroadcast(BinaryOp op, std::vector<int64_t> as,
                    std::vector<int64_t> bs, std::vector<int64_t> os) {
  Buf a = randomF32(as, 0.5f, 2), b = randomF32(bs, 0.5f, 2),
      out(DType::F32, os);
  EXPECT_OK(binary(op, a.view(), b.view(), out.view()));
  for (int64_t i = 0; i < out.count(); ++i) {
    std::vector<int64_t> idx = unravel(i, os);
    double want = refBinary(op, a.data<float>()[broadcastIndex(idx, as)],
                            b.data<float>()[broadcastIndex(idx, bs)]);
    ASSERT_TRUE(close(out.data<float>()[i], want, 1e-6)) << "at " << i;
  }
}

TEST(RuntimeBinary, BroadcastingShapes) {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                          BinaryOp::Div, BinaryOp::Pow, BinaryOp::Min,
                          BinaryOp::Max};
  for (BinaryOp op : ops) {
    checkBroadcast(op, {2, 3, 4}, {2, 3, 4}, {2, 3, 4});
    checkBroadcast(op, {2, 3, 4}, {4}, {2, 3, 4});
    checkBroadcast(op, {2, 1, 4}, {3, 1}, {2, 3, 4});
    checkBroadcast(op, {1}, {2, 3}, {2, 3});
    checkBroadcast(op, {}, {5}, {5});
    checkBroadcast(op, {3, 1, 5}, {1, 4, 1}, {3, 4, 5});
    checkBroadcast(op, {1, 1}, {1}, {1, 1});
    checkBroadcast(op, {0, 3}, {3}, {0, 3});
  }
}

TEST(RuntimeBinary, RejectsBadShapesAndTypes) {
  Buf a(DType::F32, {2, 3}), b(DType::F32, {4}), c(DType::F32, {3});
  Buf big(DType::F32, {4, 2, 3}), ints(DType::I32, {3}),
      out(DType::F32, {2, 3});
  EXPECT_ERROR(binary(BinaryOp::Add, a.view(), b.view(), out.view()),
               "does not broadcast");
  EXPECT_ERROR(binary(BinaryOp::Add, a.view(), c.view(), big.view()),
               "not the broadcast");
  EXPECT_ERROR(binary(BinaryOp::Add, a.view(), ints.view(), out.view()),
               "types differ");
  EXPECT_ERROR(binary(BinaryOp::And, a.view(), c.view(), out.view()),
               "need i1");
}

TEST(RuntimeBinary, IntegersAndLogic) {
  Buf a = make<int32_t>(DType::I32, {2, 2}, {7, -7, 5, INT_MIN});
  Buf b = make<int32_t>(DType::I32, {2}, {2, -1});
  Buf out(DType::I32, {2, 2});
  EXPECT_OK(binary(BinaryOp::Div, a.view(), b.view(), out.view()));
  EXPECT_EQ(out.values<int32_t>(), (std::vector<int32_t>{3, 7, 2, INT_MIN}));
  Buf z = make<int32_t>(DType::I32, {1}, {0});
  EXPECT_OK(binary(BinaryOp::Div, a.view(), z.view(), out.view()));
  EXPECT_EQ(out.values<int32_t>(), (std::vector<int32_t>(4, 0)));
  Buf p = make<int32_t>(DType::I32, {2}, {3, 2}), pr(DType::I32, {2});
  EXPECT_OK(binary(BinaryOp::Pow, p.view(), p.view(), pr.view()));
  EXPECT_EQ(pr.values<int32_t>(), (std::vector<int32_t>{27, 4}));
  EXPECT_OK(binary(BinaryOp::Pow, p.view(), b.view(), pr.view()));
  EXPECT_EQ(pr.values<int32_t>(), (std::vector<int32_t>{9, 0}));
  Buf c = make<int8_t>(DType::I8, {2}, {100, -100}), c2(DType::I8, {2});
  EXPECT_OK(binary(BinaryOp::Add, c.view(), c.view(), c2.view()));
  EXPECT_EQ(c2.values<int8_t>(), (std::vector<int8_t>{-56, 56}));
  Buf u = make<uint64_t>(DType::U64, {2}, {1, 5}), u2(DType::U64, {2});
  EXPECT_OK(binary(BinaryOp::Sub, u.view(), u.view(), u2.view()));
  EXPECT_EQ(u2.values<uint64_t>(), (std::vector<uint64_t>{0, 0}));
  Buf x = make<uint8_t>(DType::I1, {2, 1}, {0, 1});
  Buf y = make<uint8_t>(DType::I1, {2}, {0, 1});
  Buf r(DType::I1, {2, 2});
  EXPECT_OK(binary(BinaryOp::And, x.view(), y.view(), r.view()));
  EXPECT_EQ(r.values<uint8_t>(), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_OK(binary(BinaryOp::Or, x.view(), y.view(), r.view()));
  EXPECT_EQ(r.values<uint8_t>(), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_ERROR(binary(BinaryOp::Add, x.view(), y.view(), r.view()),
               "arithmetic on i1");
}

TEST(RuntimeBinary, HalfAndInPlace) {
  Buf a(DType::F16, {3}), b(DType::F16, {3});
  float av[] = {1.5f, -2.25f, 1000.0f}, bv[] = {0.25f, 4.0f, 0.1f};
  for (int i = 0; i < 3; ++i) {
    a.data<uint16_t>()[i] = math::floatToHalf(av[i]);
    b.data<uint16_t>()[i] = math::floatToHalf(bv[i]);
  }
  EXPECT_OK(binary(BinaryOp::Mul, a.view(), b.view(), a.view()));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(
        a.data<uint16_t>()[i],
        math::floatToHalf(av[i] * math::halfToFloat(math::floatToHalf(bv[i]))));
  Buf f = f32({2, 2}, {1, 2, 3, 4}), row = f32({2}, {10, 20});
  EXPECT_OK(binary(BinaryOp::Add, f.view(), row.view(), f.view()));
  EXPECT_EQ(f.values<float>(), (std::vector<float>{11, 22, 13, 24}));
}

TEST(RuntimeBinary, ThreadsGiveTheSameResult) {
  Buf a = randomF32({300, 1100}), b = randomF32({1100});
  Buf one(DType::F32, {300, 1100}), many(DType::F32, {300, 1100});
  Buf twice(DType::F32, {300, 1100});
  setNumThreads(1);
  EXPECT_EQ(getNumThreads(), 1);
  EXPECT_OK(binary(BinaryOp::Mul, a.view(), b.view(), one.view()));
  setNumThreads(4);
  EXPECT_OK(binary(BinaryOp::Mul, a.view(), b.view(), many.view()));
  // Equal shapes collapse to one long run, which is split into pieces.
  EXPECT_OK(binary(BinaryOp::Add, a.view(), a.view(), twice.view()));
  setNumThreads(0);
  EXPECT_GE(getNumThreads(), 1);
  EXPECT_EQ(one.bytes, many.bytes);
  for (int64_t i = 0; i < twice.count(); ++i)
    ASSERT_EQ(twice.data<float>()[i], 2 * a.data<float>()[i]);
  for (int64_t i = 0; i < one.count(); i += 977)
    EXPECT_EQ(one.data<float>()[i],
              a.data<float>()[i] * b.data<float>()[i % 1100]);
}

TEST(RuntimeCompare, BroadcastsAndNaN) {
  Buf a = f32({2, 3}, {1, 2, NAN, 4, 5, 6}), b = f32({3}, {2, 2, 2});
  Buf out(DType::I1, {2, 3});
  using V = std::vector<uint8_t>;
  EXPECT_OK(compare(CompareOp::Equal, a.view(), b.view(), out.view()));
  EXPECT_EQ(out.values<uint8_t>(), (V{0, 1, 0, 0, 0, 0}));
  EXPECT_OK(compare(CompareOp::Greater, a.view(), b.view(), out.view()));
  EXPECT_EQ(out.values<uint8_t>(), (V{0, 0, 0, 1, 1, 1}));
  EXPECT_OK(compare(CompareOp::GreaterEqual, a.view(), b.view(), out.view()));
  EXPECT_EQ(out.values<uint8_t>(), (V{0, 1, 0, 1, 1, 1}));
  EXPECT_OK(compare(CompareOp::Less, a.view(), b.view(), out.view()));
  EXPECT_EQ(out.values<uint8_t>(), (V{1, 0, 0, 0, 0, 0}));
  EXPECT_OK(compare(CompareOp::LessEqual, a.view(), b.view(), out.view()));
  EXPECT_EQ(out.values<uint8_t>(), (V{1, 1, 0, 0, 0, 0}));
  Buf i = i64({3, 1}, {1, 2, 3}), j = i64({2}, {2, 3}), r(DType::I1, {3, 2});
  EXPECT_OK(compare(CompareOp::Less, i.view(), j.view(), r.view()));
  EXPECT_EQ(r.values<uint8_t>(), (V{1, 1, 0, 1, 0, 0}));
  Buf p = make<uint8_t>(DType::I1, {2}, {1, 0}), q(DType::I1, {2});
  EXPECT_OK(compare(CompareOp::Equal, p.view(), p.view(), q.view()));
  EXPECT_EQ(q.values<uint8_t>(), (V{1, 1}));
  EXPECT_ERROR(compare(CompareOp::Less, a.view(), b.view(), a.view()),
               "must be i1");
}

TEST(RuntimeSelect, BroadcastsAllThree) {
  Buf c = make<uint8_t>(DType::I1, {2, 1, 1}, {1, 0});
  Buf a = randomF32({3, 1}), b = randomF32({4});
  Buf out(DType::F32, {2, 3, 4});
  EXPECT_OK(select(c.view(), a.view(), b.view(), out.view()));
  for (int64_t i = 0; i < out.count(); ++i) {
    std::vector<int64_t> idx = unravel(i, out.shape);
    float want =
        idx[0] == 0 ? a.data<float>()[idx[1]] : b.data<float>()[idx[2]];
    EXPECT_EQ(out.data<float>()[i], want);
  }
  Buf hc = make<uint8_t>(DType::I1, {3}, {0, 1, 0});
  Buf ha = make<uint16_t>(DType::F16, {3}, {1, 2, 3});
  Buf hb = make<uint16_t>(DType::F16, {1}, {9}), hr(DType::F16, {3});
  EXPECT_OK(select(hc.view(), ha.view(), hb.view(), hr.view()));
  EXPECT_EQ(hr.values<uint16_t>(), (std::vector<uint16_t>{9, 2, 9}));
  Buf la = i64({3}, {1, 2, 3}), lr(DType::I64, {3});
  EXPECT_OK(select(hc.view(), la.view(), la.view(), lr.view()));
  EXPECT_EQ(lr.values<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_ERROR(select(la.view(), la.view(), la.view(), lr.view()),
               "must be i1");
}

TEST(RuntimeCast, FloatToIntTruncatesAndSaturates) {
  Buf f = f32({8}, {-1.7f, 2.9f, NAN, 1e10f, -1e10f, -0.5f, 2147483520.0f,
                    -2147483648.0f});
  Buf i(DType::I32, {8});
  EXPECT_OK(cast(f.view(), i.view()));
  EXPECT_EQ(i.values<int32_t>(),
            (std::vector<int32_t>{-1, 2, 0, INT_MAX, INT_MIN, 0, 2147483520,
                                  INT_MIN}));
  Buf u(DType::U8, {8});
  EXPECT_OK(cast(f.view(), u.view()));
  EXPECT_EQ(u.values<uint8_t>(),
            (std::vector<uint8_t>{0, 2, 0, 255, 0, 0, 255, 0}));
  Buf l(DType::I64, {8});
  EXPECT_OK(cast(f.view(), l.view()));
  EXPECT_EQ(l.data<int64_t>()[3], 10000000000);
}

TEST(RuntimeCast, ToAndFromBool) {
  Buf f = f32({5}, {0.0f, -0.0f, 0.1f, NAN, -3});
  Buf b(DType::I1, {5});
  EXPECT_OK(cast(f.view(), b.view()));
  EXPECT_EQ(b.values<uint8_t>(), (std::vector<uint8_t>{0, 0, 1, 1, 1}));
  Buf back(DType::F32, {5});
  EXPECT_OK(cast(b.view(), back.view()));
  EXPECT_EQ(back.values<float>(), (std::vector<float>{0, 0, 1, 1, 1}));
  Buf n = i64({3}, {0, 256, -1}), nb(DType::I1, {3});
  EXPECT_OK(cast(n.view(), nb.view()));
  EXPECT_EQ(nb.values<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
}

TEST(RuntimeCast, IntegersWrapAndFloatsRound) {
  Buf n = i64({3}, {300, -1, 65536 + 7}), b(DType::I8, {3}), w(DType::U16, {3});
  EXPECT_OK(cast(n.view(), b.view()));
  EXPECT_EQ(b.values<int8_t>(), (std::vector<int8_t>{44, -1, 7}));
  EXPECT_OK(cast(n.view(), w.view()));
  EXPECT_EQ(w.values<uint16_t>(), (std::vector<uint16_t>{300, 65535, 7}));
  Buf d = make<double>(DType::F64, {2}, {1.0 + 0x1p-11 + 0x1p-40, 0.1});
  Buf h(DType::F16, {2}), bf(DType::BF16, {2}), f(DType::F32, {2});
  EXPECT_OK(cast(d.view(), h.view()));
  EXPECT_EQ(h.data<uint16_t>()[0], 0x3c01); // rounded once, not via f32
  EXPECT_OK(cast(d.view(), bf.view()));
  EXPECT_EQ(bf.data<uint16_t>()[1], math::floatToBf16(0.1f));
  EXPECT_OK(cast(h.view(), f.view()));
  EXPECT_EQ(f.data<float>()[0], 1.0f + 0x1p-10f);
  Buf big = i64({1}, {65519}), bh(DType::F16, {1});
  EXPECT_OK(cast(big.view(), bh.view()));
  EXPECT_EQ(bh.data<uint16_t>()[0], 0x7bff);
}

TEST(RuntimeCast, EveryPairKeepsSmallValues) {
  const DType all[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                       DType::I1,  DType::I8,  DType::I16, DType::I32,
                       DType::I64, DType::U8,  DType::U16, DType::U32,
                       DType::U64};
  Buf src = f32({4}, {0, 1, 5, 100});
  for (DType from : all) {
    Buf a(from, {4});
    EXPECT_OK(cast(src.view(), a.view()));
    for (DType to : all) {
      Buf b(to, {4}), back(DType::F32, {4});
      EXPECT_OK(cast(a.view(), b.view()));
      EXPECT_OK(cast(b.view(), back.view()));
      bool boolean = from == DType::I1 || to == DType::I1;
      std::vector<float> want = boolean ? std::vector<float>{0, 1, 1, 1}
                                        : std::vector<float>{0, 1, 5, 100};
      EXPECT_EQ(back.values<float>(), want)
          << dtypeName(from) << " -> " << dtypeName(to);
    }
  }
  Buf a(DType::F32, {4}), b(DType::F32, {3});
  EXPECT_ERROR(cast(a.view(), b.view()), "another shape");
}

} // namespace
