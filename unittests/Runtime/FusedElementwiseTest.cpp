//===- FusedElementwiseTest.cpp - fused chains vs op-by-op kernels --------===//
//
// fusedElementwise must compute what the same unary/binary kernels compute
// one by one: bit for bit in f32 (the same Math.h functions, f32 between
// steps), and for f16/bf16 the f32 chain rounded once at the end; inputs
// of mixed float types as their casts to f32 then the f32 ops.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

FusedStep un(UnaryOp op, int a) { return {false, uint8_t(op), uint8_t(a), 0}; }
FusedStep bin(BinaryOp op, int a, int b) {
  return {true, uint8_t(op), uint8_t(a), uint8_t(b)};
}

std::vector<int64_t> broadcastOf(const std::vector<int64_t> &a,
                                 const std::vector<int64_t> &b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// The chain run op by op on f32 buffers with the unary/binary kernels; the
/// last register is returned.
Buf opByOp(std::vector<Buf> regs, const std::vector<FusedStep> &steps) {
  for (const FusedStep &st : steps) {
    Buf &a = regs[st.lhs];
    if (!st.isBinary) {
      Buf out(DType::F32, a.shape);
      EXPECT_OK(unary(UnaryOp(st.op), a.view(), out.view()));
      regs.push_back(std::move(out));
      continue;
    }
    Buf &b = regs[st.rhs];
    Buf out(DType::F32, broadcastOf(a.shape, b.shape));
    EXPECT_OK(binary(BinaryOp(st.op), a.view(), b.view(), out.view()));
    regs.push_back(std::move(out));
  }
  return std::move(regs.back());
}

/// Runs the chain fused and op by op on f32 inputs; expects equal bits.
void expectSameAsOpByOp(std::vector<Buf> inputs,
                        const std::vector<FusedStep> &steps,
                        std::vector<int64_t> shape) {
  std::vector<Tensor> views;
  for (Buf &b : inputs)
    views.push_back(b.view());
  Buf fused(DType::F32, shape);
  EXPECT_OK(fusedElementwise(views.data(), int(views.size()), steps.data(),
                             int(steps.size()), fused.view()));
  Buf want = opByOp(std::move(inputs), steps);
  ASSERT_EQ(want.shape, shape);
  for (int64_t i = 0; i < want.count(); ++i) {
    float w = want.data<float>()[i], g = fused.data<float>()[i];
    EXPECT_TRUE((std::isnan(w) && std::isnan(g)) ||
                std::memcmp(&w, &g, 4) == 0)
        << "element " << i << ": fused " << g << ", op by op " << w;
  }
}

TEST(RuntimeFused, EveryUnaryOpMatchesOpByOp) {
  const UnaryOp ops[] = {
      UnaryOp::Neg,  UnaryOp::Abs,        UnaryOp::Relu, UnaryOp::Exp,
      UnaryOp::Log,  UnaryOp::Sqrt,       UnaryOp::Reciprocal,
      UnaryOp::Tanh, UnaryOp::Erf,        UnaryOp::Sigmoid,
      UnaryOp::Gelu, UnaryOp::GeluTanh,   UnaryOp::Cos, UnaryOp::Sin,
      UnaryOp::GeluDerivative, UnaryOp::GeluTanhDerivative};
  for (UnaryOp op : ops) {
    // (x + b) then op: positive arguments for log and sqrt.
    std::vector<Buf> in;
    in.push_back(randomF32({3, 5, 7}, 0.1f, 2));
    in.push_back(randomF32({7}, 0.1f, 2));
    expectSameAsOpByOp(std::move(in),
                       {bin(BinaryOp::Add, 0, 1), un(op, 2)}, {3, 5, 7});
  }
}

TEST(RuntimeFused, EveryBinaryOpAndBroadcastMatchesOpByOp) {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                          BinaryOp::Div, BinaryOp::Pow, BinaryOp::Min,
                          BinaryOp::Max};
  for (BinaryOp op : ops) {
    // Four inputs broadcasting in every direction, the result register
    // read twice, and an input used by two steps.
    std::vector<Buf> in;
    in.push_back(randomF32({2, 3, 5, 7}, 0.5f, 2));
    in.push_back(randomF32({7}, 0.5f, 2));
    in.push_back(randomF32({3, 1, 1}, 0.5f, 2));
    in.push_back(randomF32({1}, 0.5f, 2));
    expectSameAsOpByOp(std::move(in),
                       {bin(op, 0, 1), bin(op, 4, 2), bin(BinaryOp::Mul, 5, 5),
                        bin(op, 3, 6), un(UnaryOp::Tanh, 7),
                        bin(BinaryOp::Add, 8, 1)},
                       {2, 3, 5, 7});
  }
}

TEST(RuntimeFused, ConstantSquareAndCubeAsBinaryDoes) {
  for (float e : {2.0f, 3.0f, 0.5f}) {
    std::vector<Buf> in;
    in.push_back(randomF32({4, 9}, 0.5f, 2));
    in.push_back(f32({1}, {e}));
    expectSameAsOpByOp(std::move(in),
                       {bin(BinaryOp::Pow, 0, 1), un(UnaryOp::Neg, 2)},
                       {4, 9});
  }
}

TEST(RuntimeFused, LargeAndThreaded) {
  // Many blocks per run and rows split over threads; an input that only
  // broadcasts along rows ([64, 1]).
  std::vector<Buf> in;
  in.push_back(randomF32({64, 1000}));
  in.push_back(randomF32({1000}));
  in.push_back(randomF32({64, 1}));
  expectSameAsOpByOp(std::move(in),
                     {bin(BinaryOp::Mul, 0, 1), bin(BinaryOp::Sub, 3, 2),
                      un(UnaryOp::GeluTanh, 4), bin(BinaryOp::Max, 5, 0)},
                     {64, 1000});
}

TEST(RuntimeFused, BlocksSpanShortRows) {
  // Rows of 19 and 7: a block of 256 starts and ends inside rows, and an
  // input broadcast along the middle dim ([3, 1, 7]) is gathered per row.
  std::vector<Buf> in;
  in.push_back(randomF32({37, 19}));
  in.push_back(randomF32({19}));
  in.push_back(randomF32({37, 1}));
  expectSameAsOpByOp(std::move(in),
                     {bin(BinaryOp::Add, 0, 1), bin(BinaryOp::Mul, 3, 2),
                      un(UnaryOp::Sigmoid, 4)},
                     {37, 19});
  std::vector<Buf> mid;
  mid.push_back(randomF32({3, 40, 7}));
  mid.push_back(randomF32({3, 1, 7}));
  expectSameAsOpByOp(std::move(mid),
                     {bin(BinaryOp::Sub, 0, 1), un(UnaryOp::Exp, 2)},
                     {3, 40, 7});
}

TEST(RuntimeFused, InPlaceOverAnInputOfTheResultShape) {
  Buf x = randomF32({5, 300}), b = randomF32({300});
  Buf want(DType::F32, {5, 300}), t(DType::F32, {5, 300});
  EXPECT_OK(binary(BinaryOp::Add, x.view(), b.view(), t.view()));
  EXPECT_OK(unary(UnaryOp::Sigmoid, t.view(), want.view()));
  Tensor ins[] = {x.view(), b.view()};
  FusedStep steps[] = {bin(BinaryOp::Add, 0, 1), un(UnaryOp::Sigmoid, 2)};
  EXPECT_OK(fusedElementwise(ins, 2, steps, 2, x.view()));
  EXPECT_EQ(x.values<float>(), want.values<float>());
}

TEST(RuntimeFused, HalfTypesStayFloatBetweenSteps) {
  std::vector<float> xv = randomFloats(60, -3, 3), bv = randomFloats(6);
  for (const auto &[t, toBits, fromBits] : kHalfFormats) {
    Buf x(t, {10, 6}), b(t, {6}), out(t, {10, 6});
    std::vector<Buf> wide;
    wide.emplace_back(DType::F32, std::vector<int64_t>{10, 6});
    wide.emplace_back(DType::F32, std::vector<int64_t>{6});
    for (int i = 0; i < 60; ++i) {
      x.data<uint16_t>()[i] = toBits(xv[i]);
      wide[0].data<float>()[i] = fromBits(x.data<uint16_t>()[i]);
    }
    for (int i = 0; i < 6; ++i) {
      b.data<uint16_t>()[i] = toBits(bv[i]);
      wide[1].data<float>()[i] = fromBits(b.data<uint16_t>()[i]);
    }
    std::vector<FusedStep> steps = {bin(BinaryOp::Mul, 0, 1),
                                    un(UnaryOp::Exp, 2),
                                    bin(BinaryOp::Sub, 3, 0)};
    Tensor ins[] = {x.view(), b.view()};
    EXPECT_OK(fusedElementwise(ins, 2, steps.data(), 3, out.view()));
    // The f32 chain on the widened inputs, rounded once.
    Buf want = opByOp(std::move(wide), steps);
    for (int i = 0; i < 60; ++i)
      EXPECT_EQ(out.data<uint16_t>()[i], toBits(want.data<float>()[i]))
          << dtypeName(t) << " element " << i;
  }
}

/// A buffer of type t (f32, f16 or bf16) with random values.
Buf randomFloat(DType t, std::vector<int64_t> shape) {
  Buf f = randomF32(shape, -3, 3);
  if (t == DType::F32)
    return f;
  Buf b(t, std::move(shape));
  EXPECT_OK(cast(f.view(), b.view()));
  return b;
}

TEST(RuntimeFused, MixedInputTypesEqualCastsAndOpsOneByOne) {
  // What graph-fuse-elementwise makes of cast(f32 chain(cast(x), b, cast(h))):
  // inputs of their own types, the f32 chain, one rounding on store. It
  // must equal the casts and f32 ops run one by one, bit for bit, for
  // every result type; the f32 input is dense, broadcast or a scalar.
  const DType types[] = {DType::F32, DType::F16, DType::BF16};
  std::vector<FusedStep> steps = {bin(BinaryOp::Mul, 0, 1),
                                  bin(BinaryOp::Add, 4, 2),
                                  un(UnaryOp::Exp, 5),
                                  bin(BinaryOp::Sub, 6, 3),
                                  un(UnaryOp::GeluTanh, 7)};
  for (std::vector<int64_t> bShape : {std::vector<int64_t>{10, 6},
                                      std::vector<int64_t>{6},
                                      std::vector<int64_t>{1}})
    for (DType tx : types)
      for (DType th : types)
        for (DType tr : types) {
          Buf x = randomFloat(tx, {10, 6}), b = randomF32(bShape),
              h = randomFloat(th, {10, 1}), c = randomFloat(DType::BF16, {6});
          Tensor ins[] = {x.view(), b.view(), h.view(), c.view()};
          Buf fused(tr, {10, 6});
          EXPECT_OK(fusedElementwise(ins, 4, steps.data(), int(steps.size()),
                                     fused.view()));
          // Op by op: widen with cast, the f32 ops, narrow with cast.
          std::vector<Buf> wide;
          for (Buf *in : {&x, &b, &h, &c}) {
            Buf w(DType::F32, in->shape);
            EXPECT_OK(cast(in->view(), w.view()));
            wide.push_back(std::move(w));
          }
          Buf chain = opByOp(std::move(wide), steps);
          Buf want(tr, {10, 6});
          EXPECT_OK(cast(chain.view(), want.view()));
          EXPECT_EQ(fused.bytes, want.bytes)
              << dtypeName(tx) << " x, " << dtypeName(th) << " h -> "
              << dtypeName(tr) << ", b of " << bShape.size() << " dims";
        }
}

TEST(RuntimeFused, RejectsWhatTheDeviceRejects) {
  Buf a = randomF32({4}), r(DType::F32, {4});
  Tensor ins[] = {a.view(), a.view(), a.view(), a.view(), a.view()};
  FusedStep ok[] = {un(UnaryOp::Exp, 0)};
  EXPECT_ERROR(fusedElementwise(ins, 5, ok, 1, r.view()), "1..4 inputs");
  EXPECT_ERROR(fusedElementwise(ins, 1, ok, 0, r.view()), "1..16 steps");
  FusedStep many[17];
  for (int i = 0; i < 17; ++i)
    many[i] = un(UnaryOp::Neg, i);
  EXPECT_ERROR(fusedElementwise(ins, 1, many, 17, r.view()), "steps");
  FusedStep undefined[] = {bin(BinaryOp::Add, 0, 1)};
  EXPECT_ERROR(fusedElementwise(ins, 1, undefined, 1, r.view()),
               "undefined register");
  FusedStep notOp[] = {un(UnaryOp::Not, 0)};
  EXPECT_ERROR(fusedElementwise(ins, 1, notOp, 1, r.view()), "unsupported op");
  FusedStep andOp[] = {bin(BinaryOp::And, 0, 0)};
  EXPECT_ERROR(fusedElementwise(ins, 1, andOp, 1, r.view()), "unsupported op");
  // Inputs of another float type than the result are widened; others are
  // not kernel types.
  Buf h(DType::F16, {4});
  Tensor mixed[] = {h.view()};
  EXPECT_OK(fusedElementwise(mixed, 1, ok, 1, r.view()));
  Buf d(DType::F64, {4}), i4(DType::I32, {4});
  Tensor f64In[] = {d.view()}, intIn[] = {i4.view()};
  EXPECT_ERROR(fusedElementwise(f64In, 1, ok, 1, r.view()),
               "is not supported");
  EXPECT_ERROR(fusedElementwise(intIn, 1, ok, 1, r.view()),
               "is not supported (f32, f16, bf16 only)");
  Buf wide = randomF32({5});
  Tensor wrong[] = {wide.view()};
  EXPECT_ERROR(fusedElementwise(wrong, 1, ok, 1, r.view()),
               "does not broadcast");
  Buf i(DType::I32, {4});
  Tensor ints[] = {i.view()};
  EXPECT_ERROR(fusedElementwise(ints, 1, ok, 1, i.view()), "f32, f16, bf16");
  // A scalar input stretched to the whole result, as on the device.
  Buf s = f32({1}, {0.5f});
  Tensor scalar[] = {s.view()};
  EXPECT_OK(fusedElementwise(scalar, 1, ok, 1, r.view()));
  EXPECT_EQ(r.values<float>(), std::vector<float>(4, std::exp(0.5f)));
}

} // namespace

TEST(RuntimeFused, SumIsTheReduceOfTheF32ChainAndTheResultItsCast) {
  // graph-fuse-elementwise's bias gradient: the chain with a sum over the
  // leading dims must give the bits of the f32 chain's reduce(Sum) and of
  // its cast -- for every result type, columns in whole kernel blocks or
  // not, broadcast inputs, one row, and a step result read twice.
  std::vector<FusedStep> steps = {un(UnaryOp::GeluDerivative, 0),
                                  bin(BinaryOp::Mul, 3, 1),
                                  bin(BinaryOp::Add, 4, 2),
                                  bin(BinaryOp::Mul, 5, 3)};
  struct Case {
    std::vector<int64_t> shape;
    int sumRank;
  };
  for (const Case &c : {Case{{3, 37, 300}, 1}, Case{{2, 4, 8}, 2},
                        Case{{1, 5}, 1}, Case{{600, 6}, 1}})
    for (DType tr : {DType::F32, DType::F16, DType::BF16}) {
      std::vector<int64_t> cols(c.shape.end() - c.sumRank, c.shape.end());
      Buf p = randomF32(c.shape), d = randomFloat(DType::BF16, c.shape),
          b = randomF32(cols);
      Tensor ins[] = {p.view(), d.view(), b.view()};
      Buf got(tr, c.shape), sum(DType::F32, cols);
      Tensor sumView = sum.view();
      EXPECT_OK(fusedElementwise(ins, 3, steps.data(), int(steps.size()),
                                 got.view(), &sumView));
      Buf chain(DType::F32, c.shape), want(tr, c.shape),
          wantSum(DType::F32, cols);
      EXPECT_OK(fusedElementwise(ins, 3, steps.data(), int(steps.size()),
                                 chain.view()));
      std::vector<int64_t> axes;
      for (size_t a = 0; a + size_t(c.sumRank) < c.shape.size(); ++a)
        axes.push_back(int64_t(a));
      EXPECT_OK(reduce(ReduceOp::Sum, chain.view(), axes.data(),
                       int(axes.size()), false, wantSum.view()));
      EXPECT_OK(cast(chain.view(), want.view()));
      EXPECT_EQ(got.bytes, want.bytes) << dtypeName(tr);
      EXPECT_EQ(sum.bytes, wantSum.bytes) << dtypeName(tr) << " sum of "
                                          << c.shape.size() << " dims";
    }
}

TEST(RuntimeFused, NoStepsWithASumNarrowsAndSumsTheInput) {
  // A norm's input gradient, read on by the residual path: its bias
  // gradient and bf16 copy from one read.
  Buf x = randomF32({300, 24}), got(DType::BF16, {300, 24}),
      want(DType::BF16, {300, 24}), sum(DType::F32, {24}),
      wantSum(DType::F32, {24});
  Tensor ins[] = {x.view()}, sumView = sum.view();
  EXPECT_OK(fusedElementwise(ins, 1, nullptr, 0, got.view(), &sumView));
  int64_t axis = 0;
  EXPECT_OK(reduce(ReduceOp::Sum, x.view(), &axis, 1, false, wantSum.view()));
  EXPECT_OK(cast(x.view(), want.view()));
  EXPECT_EQ(got.bytes, want.bytes);
  EXPECT_EQ(sum.bytes, wantSum.bytes);
  // Without a sum, or on two inputs, a chain needs a step.
  EXPECT_ERROR(fusedElementwise(ins, 1, nullptr, 0, got.view()), "1..16 steps");
  Tensor two[] = {x.view(), x.view()};
  EXPECT_ERROR(fusedElementwise(two, 2, nullptr, 0, got.view(), &sumView),
               "1..16 steps");
}

TEST(RuntimeFused, RejectsASumThatIsNotOverTheLeadingDims) {
  Buf a = randomF32({4, 8}), r(DType::BF16, {4, 8});
  Tensor ins[] = {a.view()};
  FusedStep ok[] = {un(UnaryOp::Exp, 0)};
  Buf rows(DType::F32, {4}), all(DType::F32, {4, 8}), half(DType::BF16, {8});
  Tensor bad[] = {rows.view(), all.view(), half.view()};
  for (Tensor &s : bad)
    EXPECT_ERROR(fusedElementwise(ins, 1, ok, 1, r.view(), &s),
                 "is not f32 of the trailing dims");
}
