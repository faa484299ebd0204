//===- CudaMovementTest.cpp - layout, gather_nd, scatter_nd on the device -===//
//
// cumsum, reshape, concat, slice, broadcast, tile, trilu, gather_nd and
// scatter_nd against the host kernels on the same random inputs, all
// bit-identical: copies are, cumsum sums in the host's order, and the
// scatter reductions get integer-valued data (exact in any order).
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <memory>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// Random bytes (i1: 0/1) -- data movement does not look at values.
Buf randomBytes(DType t, std::vector<int64_t> shape) {
  Buf b(t, std::move(shape));
  for (auto &byte : b.bytes)
    byte = uint8_t(rng()() & (t == DType::I1 ? 1 : 0xff));
  return b;
}

/// Random integers in [lo, hi] stored in any numeric type: sums and
/// products of a few of them are exact in every float type, so results
/// that combine in another order still match bit for bit.
Buf randomNumbers(DType t, std::vector<int64_t> shape, int lo, int hi) {
  Buf b(t, std::move(shape));
  std::uniform_int_distribution<int> d(lo, hi);
  for (int64_t i = 0; i < b.count(); ++i) {
    float f = float(d(rng()));
    switch (t) {
    case DType::F32: b.data<float>()[i] = f; break;
    case DType::F64: b.data<double>()[i] = f; break;
    case DType::F16: b.data<uint16_t>()[i] = math::floatToHalf(f); break;
    case DType::BF16: b.data<uint16_t>()[i] = math::floatToBf16(f); break;
    case DType::I1: b.data<uint8_t>()[i] = uint8_t(d(rng()) & 1); break;
    case DType::I8: b.data<int8_t>()[i] = int8_t(d(rng())); break;
    case DType::I16: b.data<int16_t>()[i] = int16_t(d(rng())); break;
    case DType::I32: b.data<int32_t>()[i] = d(rng()); break;
    case DType::I64: b.data<int64_t>()[i] = d(rng()); break;
    default: b.data<uint8_t>()[i] = uint8_t(d(rng())); break; // u8
    }
  }
  return b;
}

const DType kMoveTypes[] = {DType::F32, DType::BF16, DType::I64, DType::I1};

TEST_F(CudaKernel, CumsumMatchesHostBitForBit) {
  std::vector<int64_t> shape = {4, 7, 5};
  for (DType t : {DType::F32, DType::BF16, DType::F64, DType::I32, DType::I64,
                  DType::I8})
    for (int64_t axis : {0, 1, 2, -1})
      for (bool exclusive : {false, true})
        for (bool reverse : {false, true}) {
          Buf in = randomNumbers(t, shape, -100, 100), want(t, shape);
          EXPECT_OK(cumsum(in.view(), axis, exclusive, reverse, want.view()));
          Dev din(in), dout(t, shape);
          EXPECT_OK(cu::cumsum(din.view(), axis, exclusive, reverse,
                               dout.view(), stream));
          sync();
          EXPECT_EQ(dout.download().bytes, want.bytes)
              << dtypeName(t) << " axis " << axis << " exclusive "
              << exclusive << " reverse " << reverse;
          // In place.
          EXPECT_OK(cu::cumsum(din.view(), axis, exclusive, reverse,
                               din.view(), stream));
          sync();
          EXPECT_EQ(din.download().bytes, want.bytes) << "in place";
        }
}

TEST_F(CudaKernel, ReshapeCopies) {
  Buf in = randomBytes(DType::I64, {6, 4});
  Dev din(in), dout(DType::I64, {3, 8});
  EXPECT_OK(cu::reshape(din.view(), dout.view(), stream));
  sync();
  EXPECT_EQ(dout.download().bytes, in.bytes);
  EXPECT_OK(cu::reshape(din.view(), din.view(), stream)); // aliased: no-op
  sync();
  EXPECT_EQ(din.download().bytes, in.bytes);
}

TEST_F(CudaKernel, ConcatMatchesHost) {
  struct Case {
    std::vector<std::vector<int64_t>> inputs;
    int64_t axis;
    std::vector<int64_t> out;
  } cases[] = {{{{2, 3, 4}, {2, 5, 4}, {2, 1, 4}}, 1, {2, 9, 4}},
               {{{3, 2}, {3, 7}}, -1, {3, 9}},
               {{{2, 2}, {0, 2}, {5, 2}}, 0, {7, 2}}, // an empty input
               {{{4}, {4}}, 0, {8}}};
  for (DType t : kMoveTypes)
    for (const Case &c : cases) {
      std::vector<Buf> ins;
      for (const auto &s : c.inputs)
        ins.push_back(randomBytes(t, s));
      std::vector<Tensor> hv;
      for (Buf &b : ins)
        hv.push_back(b.view());
      Buf want(t, c.out);
      EXPECT_OK(concat(hv.data(), int(hv.size()), c.axis, want.view()));
      std::vector<std::unique_ptr<Dev>> dins;
      std::vector<Tensor> dv;
      for (Buf &b : ins) {
        dins.push_back(std::make_unique<Dev>(b));
        dv.push_back(dins.back()->view());
      }
      Dev dout(t, c.out);
      EXPECT_OK(cu::concat(dv.data(), int(dv.size()), c.axis, dout.view(),
                           stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes)
          << dtypeName(t) << " case " << (&c - cases);
    }
}

TEST_F(CudaKernel, SliceMatchesHost) {
  struct Case {
    std::vector<int64_t> in, starts, sizes, steps;
  } cases[] = {{{10, 8}, {2, 0}, {3, 8}, {1, 1}},
               {{10, 8}, {9, 7}, {5, 4}, {-2, -2}}, // reversed, strided
               {{3, 4, 5}, {0, 3, 4}, {3, 4, 5}, {1, -1, -1}},
               {{6, 5}, {1, 0}, {0, 5}, {1, 1}}}; // empty
  for (DType t : kMoveTypes)
    for (const Case &c : cases) {
      Buf in = randomBytes(t, c.in), want(t, c.sizes);
      EXPECT_OK(slice(in.view(), c.starts.data(), c.sizes.data(),
                      c.steps.data(), want.view()));
      Dev din(in), dout(t, c.sizes);
      EXPECT_OK(cu::slice(din.view(), c.starts.data(), c.sizes.data(),
                          c.steps.data(), dout.view(), stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes)
          << dtypeName(t) << " case " << (&c - cases);
    }
}

TEST_F(CudaKernel, WideCopiesMatchHost) {
  // Slices and concats along the last dim move 16-, 8- or 4-byte units
  // when row pieces, offsets and pointers allow (q/k/v out of a fused
  // projection and back), else elements; every width against the host.
  struct Case {
    std::vector<int64_t> in, starts, sizes;
  } slices[] = {{{6, 48}, {0, 16}, {6, 16}}, // bf16: 16-byte units
                {{6, 20}, {0, 4}, {6, 12}},  // bf16: 8-byte units
                {{6, 48}, {0, 1}, {6, 16}},  // misaligned start: elements
                {{5, 18}, {0, 0}, {5, 9}},   // odd row piece
                {{2, 6, 40}, {1, 0, 8}, {1, 5, 24}}};
  for (DType t : {DType::BF16, DType::F32, DType::I64, DType::I1})
    for (const Case &c : slices) {
      std::vector<int64_t> steps(c.in.size(), 1);
      Buf in = randomBytes(t, c.in), want(t, c.sizes);
      EXPECT_OK(slice(in.view(), c.starts.data(), c.sizes.data(), steps.data(),
                      want.view()));
      Dev din(in), dout(t, c.sizes);
      EXPECT_OK(cu::slice(din.view(), c.starts.data(), c.sizes.data(),
                          steps.data(), dout.view(), stream));
      MisalignedDev mout(t, c.sizes);
      EXPECT_OK(cu::slice(din.view(), c.starts.data(), c.sizes.data(),
                          steps.data(), mout.view(), stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes)
          << dtypeName(t) << " slice " << (&c - slices);
      EXPECT_EQ(mout.download().bytes, want.bytes)
          << dtypeName(t) << " misaligned slice " << (&c - slices);
    }
  for (DType t : {DType::BF16, DType::F32, DType::U8})
    for (int64_t w : {16, 12, 3}) {
      // Three pieces [5, w], [5, 2w], [5, w] -> [5, 4w]; the middle one
      // also misaligned by an element.
      std::vector<int64_t> out = {5, 4 * w};
      Buf a = randomBytes(t, {5, w}), b = randomBytes(t, {5, 2 * w}),
          c = randomBytes(t, {5, w}), want(t, out);
      Tensor hv[] = {a.view(), b.view(), c.view()};
      EXPECT_OK(concat(hv, 3, 1, want.view()));
      Dev da(a), db(b), dc(c), dout(t, out), dout2(t, out);
      MisalignedDev mb(b);
      Tensor dv[] = {da.view(), db.view(), dc.view()};
      Tensor mv[] = {da.view(), mb.view(), dc.view()};
      EXPECT_OK(cu::concat(dv, 3, 1, dout.view(), stream));
      EXPECT_OK(cu::concat(mv, 3, 1, dout2.view(), stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes)
          << dtypeName(t) << " w " << w;
      EXPECT_EQ(dout2.download().bytes, want.bytes)
          << dtypeName(t) << " misaligned, w " << w;
    }
}

TEST_F(CudaKernel, BroadcastAndTileMatchHost) {
  struct Case {
    std::vector<int64_t> in, out;
  } bcases[] = {{{3, 1}, {2, 3, 4}}, {{}, {5, 2}}, {{1, 4}, {6, 4}}};
  for (DType t : kMoveTypes)
    for (const Case &c : bcases) {
      Buf in = randomBytes(t, c.in), want(t, c.out);
      EXPECT_OK(broadcast(in.view(), want.view()));
      Dev din(in), dout(t, c.out);
      EXPECT_OK(cu::broadcast(din.view(), dout.view(), stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes) << dtypeName(t);
    }
  struct TileCase {
    std::vector<int64_t> in, repeats, out;
  } tcases[] = {{{2, 3}, {2, 3}, {4, 9}},
                {{2, 1, 3}, {1, 4, 1}, {2, 4, 3}},
                {{1, 2, 1, 2, 1}, {2, 1, 3, 1, 2}, {2, 2, 3, 2, 2}}};
  for (DType t : kMoveTypes)
    for (const TileCase &c : tcases) {
      Buf in = randomBytes(t, c.in), want(t, c.out);
      EXPECT_OK(tile(in.view(), c.repeats.data(), want.view()));
      Dev din(in), dout(t, c.out);
      EXPECT_OK(cu::tile(din.view(), c.repeats.data(), dout.view(), stream));
      sync();
      EXPECT_EQ(dout.download().bytes, want.bytes) << dtypeName(t);
    }
}

TEST_F(CudaKernel, TriluMatchesHost) {
  for (DType t : kMoveTypes)
    for (int64_t k : {-2, 0, 1, 9})
      for (bool upper : {false, true}) {
        Buf in = randomBytes(t, {3, 5, 7}), want(t, {3, 5, 7});
        EXPECT_OK(trilu(in.view(), k, upper, want.view()));
        Dev din(in), dout(t, {3, 5, 7});
        EXPECT_OK(cu::trilu(din.view(), k, upper, dout.view(), stream));
        EXPECT_OK(cu::trilu(din.view(), k, upper, din.view(), stream));
        sync();
        EXPECT_EQ(dout.download().bytes, want.bytes)
            << dtypeName(t) << " k " << k << " upper " << upper;
        EXPECT_EQ(din.download().bytes, want.bytes) << "in place";
      }
}

TEST_F(CudaKernel, GatherNDMatchesHost) {
  struct Case {
    std::vector<int64_t> data, indices;
    int64_t batchDims;
  } cases[] = {{{5, 4, 3}, {6, 1}, 0},
               {{5, 4, 3}, {2, 3, 2}, 0},
               {{5, 4, 3}, {7, 3}, 0},
               {{2, 6, 3}, {2, 4, 1}, 1}};
  for (DType t : kMoveTypes)
    for (const Case &c : cases)
      for (DType it : {DType::I32, DType::I64}) {
        Buf data = randomBytes(t, c.data);
        Buf idx(it, c.indices);
        int64_t k = c.indices.back();
        for (int64_t i = 0; i < idx.count(); ++i) {
          int64_t size = c.data[c.batchDims + i % k];
          int64_t v = int64_t(rng()() % (2 * size)) - size; // negatives too
          if (it == DType::I64)
            idx.data<int64_t>()[i] = v;
          else
            idx.data<int32_t>()[i] = int32_t(v);
        }
        std::vector<int64_t> out(c.indices.begin(), c.indices.end() - 1);
        out.insert(out.end(), c.data.begin() + c.batchDims + k, c.data.end());
        Buf want(t, out);
        EXPECT_OK(gatherND(data.view(), idx.view(), c.batchDims, want.view()));
        Dev dd(data), di(idx), dout(t, out);
        EXPECT_OK(cu::gatherND(dd.view(), di.view(), c.batchDims, dout.view(),
                               stream));
        sync();
        EXPECT_EQ(dout.download().bytes, want.bytes)
            << dtypeName(t) << " case " << (&c - cases);
      }
  // A bad index is reported by deviceStatus.
  Buf data = randomBytes(DType::F32, {5, 4});
  Dev dd(data), dbad(i64({3, 1}, {0, 5, 1})), dout(DType::F32, {3, 4});
  EXPECT_OK(cu::gatherND(dd.view(), dbad.view(), 0, dout.view(), stream));
  EXPECT_ERROR(cu::deviceStatus(stream),
               "gather_nd: index 5 at position 1 is out of range for a dim "
               "of size 5");
}

/// scatter_nd of `t` with `reduction` on data [8, 3] by 20 tuples (many
/// duplicates) vs the host.
void checkScatter(cudaStream_t stream, DType t, ScatterReduction r,
                  std::vector<int64_t> dataShape, int64_t k) {
  int64_t tuples = 20;
  Buf data = r == ScatterReduction::None ? randomBytes(t, dataShape)
             : r == ScatterReduction::Mul ? randomNumbers(t, dataShape, 1, 3)
                                          : randomNumbers(t, dataShape, -9, 9);
  Buf idx(DType::I64, {tuples, k});
  for (int64_t i = 0; i < idx.count(); ++i) {
    int64_t size = dataShape[i % k];
    idx.data<int64_t>()[i] = int64_t(rng()() % size) - (i % 3 ? 0 : size);
  }
  std::vector<int64_t> ushape = {tuples};
  ushape.insert(ushape.end(), dataShape.begin() + k, dataShape.end());
  Buf upd = r == ScatterReduction::None  ? randomBytes(t, ushape)
            : r == ScatterReduction::Mul ? randomNumbers(t, ushape, -2, 2)
                                         : randomNumbers(t, ushape, -9, 9);
  Buf want(t, dataShape);
  EXPECT_OK(scatterND(data.view(), idx.view(), upd.view(), r, want.view()));
  Dev dd(data), di(idx), du(upd), dout(t, dataShape);
  EXPECT_OK(
      cu::scatterND(dd.view(), di.view(), du.view(), r, dout.view(), stream));
  EXPECT_OK(cu::deviceStatus(stream));
  // Integer-valued floats: exact whatever order duplicates combine in.
  EXPECT_EQ(dout.download().bytes, want.bytes)
      << dtypeName(t) << " reduction " << int(r) << " k " << k;
}

TEST_F(CudaKernel, ScatterNDMatchesHost) {
  for (int64_t k : {1, 2}) {
    for (DType t : {DType::F32, DType::BF16, DType::I64, DType::I1, DType::I8})
      checkScatter(stream, t, ScatterReduction::None, {8, 3}, k);
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::I32,
                    DType::I64, DType::I8, DType::U8})
      checkScatter(stream, t, ScatterReduction::Add, {8, 3}, k);
    for (DType t : {DType::F32, DType::F16, DType::I32, DType::I16})
      checkScatter(stream, t, ScatterReduction::Mul, {8, 3}, k);
    for (ScatterReduction r : {ScatterReduction::Max, ScatterReduction::Min})
      for (DType t : {DType::F32, DType::BF16, DType::F64, DType::I64,
                      DType::I16, DType::I1})
        checkScatter(stream, t, r, {8, 3}, k);
  }
  // A bad index: its tuple is skipped, the error comes from deviceStatus.
  Buf data(DType::F32, {4, 2});
  Dev dd(data), di(i64({2, 1}, {1, 4})), du(randomF32({2, 2})),
      dout(DType::F32, {4, 2});
  EXPECT_OK(cu::scatterND(dd.view(), di.view(), du.view(),
                          ScatterReduction::None, dout.view(), stream));
  EXPECT_ERROR(cu::deviceStatus(stream), "scatter_nd: index 4 at position 1");
}

//===----------------------------------------------------------------------===//
// Argument checks: no device needed
//===----------------------------------------------------------------------===//

TEST(CudaChecks, MovementChecksMatchHost) {
  int64_t s23[] = {2, 3}, s32[] = {3, 2}, s6[] = {6}, s21[] = {2, 1};
  float dummy[6];
  Tensor f{dummy, DType::F32, 2, s23}, ft{dummy, DType::F32, 2, s32};
  Tensor f6{dummy, DType::F32, 1, s6}, b{dummy, DType::I1, 2, s23};
  Tensor i{dummy, DType::I64, 2, s21};
  cudaStream_t s = nullptr;
  EXPECT_ERROR(cu::cumsum(b, 0, false, false, b, s), "not defined on i1");
  EXPECT_ERROR(cu::cumsum(f, 2, false, false, f, s), "axis out of range");
  EXPECT_ERROR(cu::reshape(f, b, s), "another element type");
  Tensor two[] = {f, ft};
  EXPECT_ERROR(cu::concat(two, 2, 0, f, s), "does not fit result");
  int64_t starts[] = {0, 2}, sizes[] = {2, 3}, steps[] = {1, 1};
  EXPECT_ERROR(cu::slice(f, starts, sizes, steps, f, s),
               "indexed out of bounds");
  EXPECT_ERROR(cu::broadcast(ft, f, s), "does not broadcast");
  int64_t repeats[] = {1, 2};
  EXPECT_ERROR(cu::tile(f, repeats, f, s), "times repeats");
  EXPECT_ERROR(cu::trilu(f6, 0, true, f6, s), "needs rank >= 2");
  EXPECT_ERROR(cu::gatherND(f, i, 2, f, s), "do not index");
  EXPECT_ERROR(cu::scatterND(b, i, b, ScatterReduction::Add, b, s),
               "add/mul are not defined on i1");
}

} // namespace
