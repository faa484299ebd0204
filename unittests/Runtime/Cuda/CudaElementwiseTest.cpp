//===- CudaElementwiseTest.cpp - integer/f64 arithmetic, logic, compare ---===//
//
// The device unary/binary on integer, f64 and i1 types, compare, select,
// cast between every pair of types and the fused chain on mixed float
// inputs, each against the host kernel on the same random inputs. Integer
// results and casts must be bit-identical (a NaN may carry another
// payload).
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <algorithm>
#include <cstring>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

const DType kAllTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                           DType::I1,  DType::I8,  DType::I16, DType::I32,
                           DType::I64, DType::U8,  DType::U16, DType::U32,
                           DType::U64};
const DType kIntTypes[] = {DType::I8,  DType::I16, DType::I32, DType::I64,
                           DType::U8,  DType::U16, DType::U32, DType::U64};

/// Writes v (as an int64, truncated to the element's size) into element i of
/// an integer buffer.
void setInt(Buf &b, int64_t i, int64_t v) {
  size_t es = dtypeSize(b.dtype);
  std::memcpy(b.bytes.data() + i * es, &v, es); // little-endian low bytes
}

/// Random values of any type: integers random bits (so MIN, MAX, 0 and -1
/// turn up when planted), i1 0/1, floats a spread with the special values a
/// cast must handle (NaN, infinities, -0, values past every integer range).
Buf randomAny(DType t, std::vector<int64_t> shape) {
  Buf b(t, std::move(shape));
  int64_t n = b.count();
  if (t == DType::I1) {
    for (int64_t i = 0; i < n; ++i)
      b.bytes[i] = uint8_t(rng()() & 1);
    return b;
  }
  if (!isFloat(t)) {
    for (auto &byte : b.bytes)
      byte = uint8_t(rng()());
    return b;
  }
  const double specials[] = {NAN,   INFINITY, -INFINITY, -0.0,   0.5,
                             -0.5,  2.5,      -2.5,      1e20,   -1e20,
                             3e9,   -3e9,     255.9,     -128.5, 65504,
                             70000, 1e-30,    -129.0};
  std::uniform_real_distribution<double> wide(-400, 400);
  for (int64_t i = 0; i < n; ++i) {
    double v = i % 4 == 0 ? specials[(i / 4) % std::size(specials)]
                          : wide(rng());
    switch (t) {
    case DType::F64: b.data<double>()[i] = v; break;
    case DType::F32: b.data<float>()[i] = float(v); break;
    case DType::F16: b.data<uint16_t>()[i] = math::doubleToHalf(v); break;
    default: b.data<uint16_t>()[i] = math::doubleToBf16(v); break;
    }
  }
  return b;
}

/// Plants 0, -1, 1 and MIN (the division corner cases) in integer buffers.
void plantCorners(Buf &b) {
  int64_t n = b.count();
  size_t es = dtypeSize(b.dtype);
  for (int64_t i = 0; i + 4 <= n; i += 7) {
    setInt(b, i, 0);
    setInt(b, i + 1, -1);
    setInt(b, i + 2, 1);
    setInt(b, i + 3, 0);
    b.bytes[(i + 3) * es + es - 1] = 0x80; // MIN for signed types
  }
}

/// Bit-identical, except that any NaN matches any NaN: the GPU returns a
/// canonical NaN from arithmetic and conversions where x86 keeps the
/// operand's payload.
::testing::AssertionResult sameBytes(Buf got, Buf want) {
  if (got.bytes.size() != want.bytes.size())
    return ::testing::AssertionFailure() << "sizes differ";
  size_t es = dtypeSize(got.dtype);
  for (int64_t i = 0; i < got.count(); ++i) {
    if (std::memcmp(&got.bytes[i * es], &want.bytes[i * es], es) == 0)
      continue;
    if (isFloat(got.dtype) && std::isnan(valueAt(got, i)) &&
        std::isnan(valueAt(want, i)))
      continue;
    return ::testing::AssertionFailure()
           << "element " << i << " differs"
           << (isFloat(got.dtype) ? ": got " + std::to_string(valueAt(got, i)) +
                                        ", want " +
                                        std::to_string(valueAt(want, i))
                                  : std::string());
  }
  return ::testing::AssertionSuccess();
}

/// f64 elementwise results: libm vs CUDA's may differ in an ulp.
::testing::AssertionResult closeF64(Buf got, Buf want) {
  for (int64_t i = 0; i < got.count(); ++i)
    if (auto r = close(got.data<double>()[i], want.data<double>()[i], 1e-14,
                       1e-300);
        !r)
      return r << " at element " << i;
  return ::testing::AssertionSuccess();
}

struct Shapes {
  std::vector<int64_t> a, b, out;
};
const Shapes kBroadcastCases[] = {{{6, 50}, {6, 50}, {6, 50}},
                                  {{4, 1, 5}, {3, 1}, {4, 3, 5}},
                                  {{}, {2, 3}, {2, 3}},
                                  {{7, 1}, {1, 9}, {7, 9}}};

TEST_F(CudaKernel, IntegerAndF64UnaryMatchHost) {
  std::vector<DType> types(std::begin(kIntTypes), std::end(kIntTypes));
  types.push_back(DType::F64);
  for (DType t : types)
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu}) {
      Buf in = randomAny(t, {300});
      if (!isFloat(t))
        plantCorners(in);
      Buf want(t, in.shape);
      EXPECT_OK(unary(op, in.view(), want.view()));
      Dev din(in), dout(t, in.shape);
      EXPECT_OK(cu::unary(op, din.view(), dout.view(), stream));
      sync();
      EXPECT_TRUE(sameBytes(dout.download(), want))
          << "op " << int(op) << " " << dtypeName(t);
    }
  // f64 transcendental ops compute in double, as on the host.
  for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid,
                     UnaryOp::Gelu, UnaryOp::Sqrt}) {
    Buf in(DType::F64, {200});
    for (int64_t i = 0; i < 200; ++i)
      in.data<double>()[i] = (i - 100) / 25.0 + (op == UnaryOp::Sqrt ? 4 : 0);
    Buf want(DType::F64, {200});
    EXPECT_OK(unary(op, in.view(), want.view()));
    Dev din(in), dout(DType::F64, {200});
    EXPECT_OK(cu::unary(op, din.view(), dout.view(), stream));
    sync();
    EXPECT_TRUE(closeF64(dout.download(), want)) << "op " << int(op);
  }
}

TEST_F(CudaKernel, IntegerAndF64BinaryMatchHost) {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                          BinaryOp::Div, BinaryOp::Pow, BinaryOp::Min,
                          BinaryOp::Max};
  std::vector<DType> types(std::begin(kIntTypes), std::end(kIntTypes));
  types.push_back(DType::F64);
  for (DType t : types)
    for (const Shapes &c : kBroadcastCases)
      for (BinaryOp op : ops) {
        Buf a = randomAny(t, c.a), b = randomAny(t, c.b);
        if (!isFloat(t)) {
          plantCorners(a);
          plantCorners(b);
          if (op == BinaryOp::Pow) // keep exponents small: 0..7
            for (int64_t i = 0; i < b.count(); ++i)
              setInt(b, i, int64_t(rng()() % 8));
        }
        Buf want(t, c.out);
        EXPECT_OK(binary(op, a.view(), b.view(), want.view()));
        Dev da(a), db(b), dout(t, c.out);
        EXPECT_OK(cu::binary(op, da.view(), db.view(), dout.view(), stream));
        sync();
        if (t == DType::F64 && op == BinaryOp::Pow)
          EXPECT_TRUE(closeF64(dout.download(), want));
        else
          EXPECT_TRUE(sameBytes(dout.download(), want))
              << "op " << int(op) << " " << dtypeName(t) << " case "
              << (&c - kBroadcastCases);
      }
}

TEST_F(CudaKernel, LogicOpsMatchHost) {
  for (const Shapes &c : kBroadcastCases) {
    Buf a = randomAny(DType::I1, c.a), b = randomAny(DType::I1, c.b);
    for (BinaryOp op : {BinaryOp::And, BinaryOp::Or}) {
      Buf want(DType::I1, c.out);
      EXPECT_OK(binary(op, a.view(), b.view(), want.view()));
      Dev da(a), db(b), dout(DType::I1, c.out);
      EXPECT_OK(cu::binary(op, da.view(), db.view(), dout.view(), stream));
      sync();
      EXPECT_TRUE(sameBytes(dout.download(), want)) << "op " << int(op);
    }
    Buf want(DType::I1, c.a);
    EXPECT_OK(unary(UnaryOp::Not, a.view(), want.view()));
    Dev da(a);
    EXPECT_OK(cu::unary(UnaryOp::Not, da.view(), da.view(), stream)); // in place
    sync();
    EXPECT_TRUE(sameBytes(da.download(), want)) << "not";
  }
}

TEST_F(CudaKernel, CompareMatchesHost) {
  const CompareOp ops[] = {CompareOp::Equal, CompareOp::Greater,
                           CompareOp::GreaterEqual, CompareOp::Less,
                           CompareOp::LessEqual};
  for (DType t : {DType::F32, DType::BF16, DType::F64, DType::I64, DType::I32,
                  DType::U8, DType::I1})
    for (const Shapes &c : kBroadcastCases)
      for (CompareOp op : ops) {
        Buf a = randomAny(t, c.a), b = randomAny(t, c.b);
        if (t == DType::I32 || t == DType::I64) // some equal pairs
          for (int64_t i = 0; i < a.count(); i += 3)
            setInt(a, i, int64_t(i % 5));
        if (t == DType::I32 || t == DType::I64)
          for (int64_t i = 0; i < b.count(); i += 2)
            setInt(b, i, int64_t(i % 5));
        Buf want(DType::I1, c.out);
        EXPECT_OK(compare(op, a.view(), b.view(), want.view()));
        Dev da(a), db(b), dout(DType::I1, c.out);
        EXPECT_OK(cu::compare(op, da.view(), db.view(), dout.view(), stream));
        sync();
        EXPECT_TRUE(sameBytes(dout.download(), want))
            << "op " << int(op) << " " << dtypeName(t) << " case "
            << (&c - kBroadcastCases);
      }
}

TEST_F(CudaKernel, SelectMatchesHost) {
  struct Case {
    std::vector<int64_t> cond, a, b, out;
  } cases[] = {{{5, 40}, {5, 40}, {5, 40}, {5, 40}},
               {{1, 9}, {7, 9}, {}, {7, 9}}, // causal-mask style
               {{3, 1, 4}, {2, 1}, {1, 4}, {3, 2, 4}}};
  for (DType t : {DType::F32, DType::BF16, DType::I64, DType::I1})
    for (const Case &c : cases) {
      Buf cond = randomAny(DType::I1, c.cond), a = randomAny(t, c.a),
          b = randomAny(t, c.b), want(t, c.out);
      EXPECT_OK(select(cond.view(), a.view(), b.view(), want.view()));
      Dev dc(cond), da(a), db(b), dout(t, c.out);
      EXPECT_OK(cu::select(dc.view(), da.view(), db.view(), dout.view(),
                           stream));
      sync();
      EXPECT_TRUE(sameBytes(dout.download(), want))
          << dtypeName(t) << " case " << (&c - cases);
    }
}

TEST_F(CudaKernel, CastBetweenAllTypesMatchesHost) {
  for (DType from : kAllTypes)
    for (DType to : kAllTypes) {
      Buf in = randomAny(from, {517});
      Buf want(to, {517});
      EXPECT_OK(cast(in.view(), want.view()));
      Dev din(in), dout(to, {517});
      EXPECT_OK(cu::cast(din.view(), dout.view(), stream));
      sync();
      EXPECT_TRUE(sameBytes(dout.download(), want))
          << dtypeName(from) << " -> " << dtypeName(to);
    }
}

TEST_F(CudaKernel, FusedMixedInputTypesMatchHost) {
  // graph-fuse-elementwise's absorbed casts: each input its own float type
  // (widened on load), the result any of them (one rounding on store).
  // x [32, 96] and h [32, 1] of every type, an f32 bias [96], a bf16 scalar.
  const DType types[] = {DType::F32, DType::F16, DType::BF16};
  cu::FusedStep steps[] = {{true, uint8_t(BinaryOp::Mul), 0, 1},
                           {true, uint8_t(BinaryOp::Add), 4, 2},
                           {false, uint8_t(UnaryOp::Tanh), 5, 0},
                           {true, uint8_t(BinaryOp::Sub), 6, 3}};
  for (DType tx : types)
    for (DType th : types)
      for (DType tr : types) {
        Buf x = randomOf(tx, {32, 96}), b = randomF32({96}),
            h = randomOf(th, {32, 1}), c = randomOf(DType::BF16, {1});
        Tensor hostIns[] = {x.view(), b.view(), h.view(), c.view()};
        Buf want(tr, {32, 96});
        EXPECT_OK(fusedElementwise(hostIns, 4, steps, 4, want.view()));
        Dev dx(x), db(b), dh(h), dc(c), dout(tr, {32, 96});
        Tensor ins[] = {dx.view(), db.view(), dh.view(), dc.view()};
        EXPECT_OK(cu::fusedElementwise(ins, 4, steps, 4, dout.view(), nullptr, stream));
        sync();
        EXPECT_TRUE(allClose(dout.download(), want, relFor(tr), absFor(tr)))
            << dtypeName(tx) << " x, " << dtypeName(th) << " h -> "
            << dtypeName(tr);
      }
}

TEST_F(CudaKernel, FusedSumIsTheDeviceReduceOfTheChain) {
  // graph-fuse-elementwise's bias gradient: the chain with a sum over the
  // leading dims must give the bits the device's own unfused path gives
  // (the f32 chain, reduce(Sum), cast): whole column vectors or not, rows
  // split in chunks (600 and 2048 rows) or not, a broadcast input, and a
  // chain keeping more step results than the kernel does (run unfused).
  // Against the host: within the order's rounding.
  using Steps = std::vector<cu::FusedStep>;
  Steps gelu = {{false, uint8_t(UnaryOp::GeluDerivative), 0, 0},
                {true, uint8_t(BinaryOp::Mul), 3, 1},
                {true, uint8_t(BinaryOp::Add), 4, 2}};
  Steps keeps = {{false, uint8_t(UnaryOp::Exp), 0, 0},
                 {false, uint8_t(UnaryOp::Neg), 0, 0},
                 {false, uint8_t(UnaryOp::Tanh), 0, 0},
                 {false, uint8_t(UnaryOp::Abs), 0, 0},
                 {false, uint8_t(UnaryOp::Sigmoid), 0, 0},
                 {true, uint8_t(BinaryOp::Add), 3, 4},
                 {true, uint8_t(BinaryOp::Add), 5, 6},
                 {true, uint8_t(BinaryOp::Add), 7, 8},
                 {true, uint8_t(BinaryOp::Mul), 9, 10}};
  struct Case {
    std::vector<int64_t> shape;
    int sumRank;
    const Steps *steps;
  };
  for (const Case &c : {Case{{4, 33, 96}, 1, &gelu}, Case{{600, 6}, 1, &gelu},
                        Case{{2048, 12}, 1, &gelu}, Case{{3, 5, 7}, 2, &gelu},
                        Case{{64, 20}, 1, &keeps}})
    for (DType tr : {DType::BF16, DType::F32}) {
      std::vector<int64_t> cols(c.shape.end() - c.sumRank, c.shape.end());
      Buf p = randomF32(c.shape), d = randomOf(DType::BF16, c.shape),
          b = randomF32(cols);
      Dev dp(p), dd(d), db(b), out(tr, c.shape), sum(DType::F32, cols),
          chain(DType::F32, c.shape), want(tr, c.shape),
          wantSum(DType::F32, cols);
      Tensor ins[] = {dp.view(), dd.view(), db.view()};
      int n = int(c.steps->size());
      Tensor sumView = sum.view();
      EXPECT_OK(cu::fusedElementwise(ins, 3, c.steps->data(), n, out.view(),
                                     &sumView, stream));
      std::vector<int64_t> axes;
      for (size_t a = 0; a + size_t(c.sumRank) < c.shape.size(); ++a)
        axes.push_back(int64_t(a));
      EXPECT_OK(cu::fusedElementwise(ins, 3, c.steps->data(), n, chain.view(),
                                     nullptr, stream));
      EXPECT_OK(cu::reduce(ReduceOp::Sum, chain.view(), axes.data(),
                           int(axes.size()), false, wantSum.view(), stream));
      EXPECT_OK(cu::cast(chain.view(), want.view(), stream));
      sync();
      std::string what = dtypeName(tr) + std::string(" [") +
                         std::to_string(c.shape[0]) + ", ...]";
      EXPECT_TRUE(sameBytes(out.download(), want.download())) << what;
      Buf got = sum.download();
      EXPECT_TRUE(sameBytes(got, wantSum.download())) << what << " sum";
      Tensor hostIns[] = {p.view(), d.view(), b.view()};
      Buf hostChain(DType::F32, c.shape), hostSum(DType::F32, cols);
      EXPECT_OK(fusedElementwise(hostIns, 3, c.steps->data(), n,
                                 hostChain.view()));
      EXPECT_OK(reduce(ReduceOp::Sum, hostChain.view(), axes.data(),
                       int(axes.size()), false, hostSum.view()));
      EXPECT_TRUE(allClose(got, hostSum, 1e-4, 1e-4)) << what << " vs host";
    }
}

TEST_F(CudaKernel, FusedSumWithoutStepsIsReduceAndCast) {
  // The identity chain (a norm's input gradient): the device's reduce and
  // cast bits, rows in chunks or not.
  for (int64_t rows : {40, 1500}) {
    Buf x = randomF32({rows, 36});
    Dev dx(x), got(DType::BF16, {rows, 36}), sum(DType::F32, {36}),
        want(DType::BF16, {rows, 36}), wantSum(DType::F32, {36});
    Tensor ins[] = {dx.view()}, sumView = sum.view();
    EXPECT_OK(cu::fusedElementwise(ins, 1, nullptr, 0, got.view(), &sumView,
                                   stream));
    int64_t axis = 0;
    EXPECT_OK(cu::reduce(ReduceOp::Sum, dx.view(), &axis, 1, false,
                         wantSum.view(), stream));
    EXPECT_OK(cu::cast(dx.view(), want.view(), stream));
    sync();
    EXPECT_TRUE(sameBytes(got.download(), want.download())) << rows;
    EXPECT_TRUE(sameBytes(sum.download(), wantSum.download())) << rows;
  }
}

TEST_F(CudaKernel, CastPacksMatchHost) {
  // Float pairs cast W elements per thread through vector loads; a length
  // that is no multiple of W has a tail, misaligned pointers fall back.
  const DType floats[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
  for (DType from : floats)
    for (DType to : floats)
      for (int64_t n : {64, 1037}) {
        Buf in = randomAny(from, {n}), want(to, {n});
        EXPECT_OK(cast(in.view(), want.view()));
        Dev din(in), dout(to, {n});
        MisalignedDev min(in), mout(to, {n});
        EXPECT_OK(cu::cast(din.view(), dout.view(), stream));
        EXPECT_OK(cu::cast(min.view(), mout.view(), stream));
        sync();
        EXPECT_TRUE(sameBytes(dout.download(), want))
            << dtypeName(from) << " -> " << dtypeName(to) << " n " << n;
        EXPECT_TRUE(sameBytes(mout.download(), want))
            << "misaligned " << dtypeName(from) << " -> " << dtypeName(to);
      }
}

TEST_F(CudaKernel, FusedLayoutsMatchHostBitForBit) {
  // The fused kernel's index paths: dense inputs (vector loads when
  // aligned), a broadcast bias (collapsed to rank 2), a column, a scalar,
  // and dims that do not collapse; 4 elements per thread with a tail when
  // n % 4 != 0; operands from inputs, the previous step and older steps.
  // Mul/Add/Sub/Max/Neg round exactly once, so the device must match the
  // host bit for bit.
  cu::FusedStep steps[] = {{true, uint8_t(BinaryOp::Mul), 0, 1},
                           {true, uint8_t(BinaryOp::Add), 4, 2},
                           {true, uint8_t(BinaryOp::Max), 5, 3},
                           {false, uint8_t(UnaryOp::Neg), 6, 0},
                           {true, uint8_t(BinaryOp::Sub), 7, 0},
                           // Reads steps 1 and 0 again: kept in shared
                           // memory (not the previous step, not an input).
                           {true, uint8_t(BinaryOp::Mul), 8, 5},
                           {true, uint8_t(BinaryOp::Add), 4, 9}};
  struct Case {
    std::vector<int64_t> x, b, h, c;
  } cases[] = {{{32, 96}, {96}, {32, 1}, {1}},
               {{7, 13}, {7, 13}, {1, 13}, {7, 1}}, // n % 4 == 3
               {{3, 5, 7}, {5, 1}, {3, 1, 7}, {3, 5, 7}},
               {{2, 1, 9}, {1, 9}, {2, 1, 1}, {}},
               {{1}, {1}, {1}, {1}}};
  for (DType tx : {DType::F32, DType::BF16})
    for (DType tr : {DType::F32, DType::BF16, DType::F16})
      for (const Case &c : cases) {
        Buf x = randomOf(tx, c.x), b = randomF32(c.b),
            h = randomOf(DType::F16, c.h), k = randomOf(tx, c.c);
        Tensor hostIns[] = {x.view(), b.view(), h.view(), k.view()};
        Buf want(tr, c.x);
        EXPECT_OK(fusedElementwise(hostIns, 4, steps, 7, want.view()));
        Dev dx(x), db(b), dh(h), dk(k), dout(tr, c.x);
        MisalignedDev mx(x), mout(tr, c.x);
        Tensor ins[] = {dx.view(), db.view(), dh.view(), dk.view()};
        EXPECT_OK(cu::fusedElementwise(ins, 4, steps, 7, dout.view(), nullptr, stream));
        ins[0] = mx.view();
        EXPECT_OK(cu::fusedElementwise(ins, 4, steps, 7, mout.view(), nullptr, stream));
        sync();
        EXPECT_TRUE(sameBytes(dout.download(), want))
            << dtypeName(tx) << " -> " << dtypeName(tr) << " case "
            << (&c - cases);
        EXPECT_TRUE(sameBytes(mout.download(), want))
            << "misaligned " << dtypeName(tx) << " -> " << dtypeName(tr)
            << " case " << (&c - cases);
      }
}

TEST_F(CudaKernel, IntegerAndF64ReduceMatchHost) {
  std::vector<int64_t> shape = {4, 5, 6};
  struct Case {
    std::vector<int64_t> axes;
    bool keepdims;
  } cases[] = {{{0}, false}, {{2}, false}, {{0, 2}, true}, {{1}, true},
               {{0, 1, 2}, false}};
  for (DType t : {DType::I32, DType::I64, DType::I8, DType::U8, DType::F64,
                  DType::I1})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max,
                        ReduceOp::Prod})
      for (const Case &c : cases) {
        if (t == DType::I1 && op != ReduceOp::Max)
          continue;
        Buf in = randomAny(t, shape);
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
        EXPECT_OK(cu::reduce(op, din.view(), c.axes.data(),
                             int(c.axes.size()), c.keepdims, dout.view(),
                             stream));
        sync();
        if (t == DType::F64)
          EXPECT_TRUE(closeF64(dout.download(), want));
        else
          EXPECT_TRUE(sameBytes(dout.download(), want))
              << "op " << int(op) << " " << dtypeName(t) << " axes "
              << c.axes.size();
      }
  // An empty reduction gives the identity (mean: 0 for integers).
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max,
                      ReduceOp::Prod}) {
    Buf in(DType::I64, {0, 3}), want(DType::I64, {3});
    int64_t axis = 0;
    EXPECT_OK(reduce(op, in.view(), &axis, 1, false, want.view()));
    Dev din(in), dout(DType::I64, {3});
    EXPECT_OK(cu::reduce(op, din.view(), &axis, 1, false, dout.view(),
                         stream));
    sync();
    EXPECT_TRUE(sameBytes(dout.download(), want)) << "op " << int(op);
  }
}

//===----------------------------------------------------------------------===//
// Argument checks: no device needed
//===----------------------------------------------------------------------===//

TEST(CudaChecks, ElementwiseChecksMatchHost) {
  int64_t s23[] = {2, 3}, s32[] = {3, 2};
  float dummy[6];
  Tensor f{dummy, DType::F32, 2, s23}, ft{dummy, DType::F32, 2, s32};
  Tensor b{dummy, DType::I1, 2, s23}, i{dummy, DType::I32, 2, s23};
  cudaStream_t s = nullptr;
  EXPECT_ERROR(cu::unary(UnaryOp::Not, f, f, s), "not needs i1");
  EXPECT_ERROR(cu::unary(UnaryOp::Neg, b, b, s), "is not defined on");
  EXPECT_ERROR(cu::binary(BinaryOp::Add, b, b, b, s), "arithmetic on i1");
  EXPECT_ERROR(cu::binary(BinaryOp::And, i, i, i, s), "and/or need i1");
  EXPECT_ERROR(cu::binary(BinaryOp::Add, f, i, f, s), "operand types differ");
  EXPECT_ERROR(cu::compare(CompareOp::Less, f, f, f, s),
               "result must be i1");
  EXPECT_ERROR(cu::compare(CompareOp::Less, f, ft, b, s),
               "does not broadcast");
  EXPECT_ERROR(cu::select(f, f, f, f, s), "condition must be i1");
  EXPECT_ERROR(cu::select(b, f, i, f, s), "operand types differ");
  EXPECT_ERROR(cu::cast(f, ft, s), "has another shape");
  // fusedElementwise: inputs of any kernel float type, nothing else.
  cu::FusedStep exp[] = {{false, uint8_t(UnaryOp::Exp), 0, 0}};
  EXPECT_ERROR(cu::fusedElementwise(&i, 1, exp, 1, f, nullptr, s),
               "is not supported (f32, f16, bf16 only)");
  int64_t axis = 0;
  EXPECT_ERROR(cu::reduce(ReduceOp::Sum, b, &axis, 1, true, b, s),
               "only max is defined on i1");
}

} // namespace
