//===- FoldTest.cpp - graph op folding and shape helpers ------------------===//

#include "lamina/Dialect/Graph/IR/Literal.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Matchers.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
class FoldTest : public ::testing::Test {
protected:
  FoldTest() : b(&ctx) {
    ctx.loadDialect<GraphDialect, func::FuncDialect>();
    module = ModuleOp::create(b.getUnknownLoc());
    b.setInsertionPointToEnd(module->getBody());
  }
  Value ints(ArrayRef<int64_t> values, ArrayRef<int64_t> shape) {
    auto type = RankedTensorType::get(shape, b.getI64Type());
    return ConstantOp::create(b, b.getUnknownLoc(),
                              DenseElementsAttr::get(type, values));
  }
  SmallVector<int64_t> valuesOf(Value v) {
    DenseElementsAttr attr;
    EXPECT_TRUE(matchPattern(v, m_Constant(&attr)));
    SmallVector<int64_t> out;
    for (const APInt &x : attr.getValues<APInt>())
      out.push_back(x.getSExtValue());
    return out;
  }
  MLIRContext ctx;
  OpBuilder b;
  OwningOpRef<ModuleOp> module;
};
} // namespace

TEST(BroadcastShapes, NumpyRules) {
  EXPECT_EQ(*broadcastShapes({2, 1, 3}, {4, 1}), (SmallVector<int64_t>{2, 4, 3}));
  EXPECT_EQ(*broadcastShapes({}, {5}), (SmallVector<int64_t>{5}));
  EXPECT_FALSE(broadcastShapes({2, 3}, {4}).has_value());
}

TEST_F(FoldTest, ShapeArithmeticFolds) {
  // Gather(shape, 1) * 2 + Concat: what exporters emit around Reshape.
  Value shape = ints({4, 16, 64}, {3});
  Value dim = b.createOrFold<GatherOp>(b.getUnknownLoc(), shape, ints({1}, {}),
                                       0, /*padding_idx=*/nullptr);
  EXPECT_EQ(valuesOf(dim), (SmallVector<int64_t>{16}));
  Value twice = b.createOrFold<MulOp>(b.getUnknownLoc(), dim, ints({2}, {}));
  EXPECT_EQ(valuesOf(twice), (SmallVector<int64_t>{32}));
  Value row = b.createOrFold<ReshapeOp>(
      b.getUnknownLoc(), RankedTensorType::get({1}, b.getI64Type()), twice);
  Value cat = b.createOrFold<ConcatOp>(b.getUnknownLoc(),
                                       ValueRange{ints({-1}, {1}), row}, 0);
  EXPECT_EQ(valuesOf(cat), (SmallVector<int64_t>{-1, 32}));
}

TEST_F(FoldTest, BroadcastingAndSelect) {
  Value a = ints({1, 2, 3, 4, 5, 6}, {2, 3});
  Value row = ints({10, 20, 30}, {3});
  Value sum = b.createOrFold<AddOp>(b.getUnknownLoc(), a, row);
  EXPECT_EQ(valuesOf(sum), (SmallVector<int64_t>{11, 22, 33, 14, 25, 36}));
  Value gt = b.createOrFold<GreaterOp>(b.getUnknownLoc(), a, ints({3}, {}));
  Value sel = b.createOrFold<SelectOp>(b.getUnknownLoc(), gt, a, ints({0}, {}));
  EXPECT_EQ(valuesOf(sel), (SmallVector<int64_t>{0, 0, 0, 4, 5, 6}));
}

TEST_F(FoldTest, SliceTransposeReduce) {
  Value a = ints({0, 1, 2, 3, 4, 5}, {2, 3});
  Value t = b.createOrFold<TransposeOp>(b.getUnknownLoc(), a,
                                        ArrayRef<int64_t>{1, 0});
  EXPECT_EQ(valuesOf(t), (SmallVector<int64_t>{0, 3, 1, 4, 2, 5}));
  // Reverse each row: start 2, step -1.
  Value s = b.createOrFold<SliceOp>(b.getUnknownLoc(), a,
                                    ArrayRef<int64_t>{0, 2}, ArrayRef<int64_t>{2, 3},
                                    ArrayRef<int64_t>{1, -1});
  EXPECT_EQ(valuesOf(s), (SmallVector<int64_t>{2, 1, 0, 5, 4, 3}));
  Value p = b.createOrFold<ReduceProdOp>(b.getUnknownLoc(), ints({2, 3, 4}, {3}),
                                         ArrayRef<int64_t>{0}, false);
  EXPECT_EQ(valuesOf(p), (SmallVector<int64_t>{24}));
}

TEST_F(FoldTest, IntegerDivisionByZeroStays) {
  Value q = b.createOrFold<DivOp>(b.getUnknownLoc(), ints({7}, {1}), ints({0}, {1}));
  EXPECT_FALSE(matchPattern(q, m_Constant()));
  Value r = b.createOrFold<DivOp>(b.getUnknownLoc(), ints({-7}, {1}), ints({2}, {1}));
  EXPECT_EQ(valuesOf(r), (SmallVector<int64_t>{-3})); // truncates like ONNX
}

TEST_F(FoldTest, LargeNonSplatIsNotFolded) {
  int64_t n = kMaxFoldElements + 1;
  SmallVector<int64_t> big(n, 0);
  big[0] = 1;
  Value a = ints(big, {n});
  Value neg = b.createOrFold<NegOp>(b.getUnknownLoc(), a.getType(), a);
  EXPECT_FALSE(matchPattern(neg, m_Constant()));
}
