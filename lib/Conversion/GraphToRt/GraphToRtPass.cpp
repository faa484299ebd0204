//===- GraphToRtPass.cpp - bufferize graph functions onto an arena --------===//
//
// A dialect conversion per function: tensors become memrefs, the signature
// gains the arena, and one pattern per op family (GraphToRt.h) replaces each
// op by views of its results at the offsets of the function's BufferPlan and
// an rt.call of its kernel. See the pass description in
// include/lamina/Conversion/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "BufferPlan.h"

#include "lamina/Conversion/GraphToRt/GraphToRt.h"
#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Transforms/DialectConversion.h"

namespace lamina {
#define GEN_PASS_DEF_CONVERTGRAPHTORT
#include "lamina/Conversion/Passes.h.inc"
} // namespace lamina

using namespace mlir;
using namespace lamina;

namespace {
/// A static tensor becomes a memref of its shape; every other type (the
/// group rank's scalars, the arena, memrefs) stays.
class BufferTypeConverter : public TypeConverter {
public:
  BufferTypeConverter() {
    addConversion([](Type type) { return type; });
    addConversion([](RankedTensorType type) -> Type {
      return MemRefType::get(type.getShape(), type.getElementType());
    });
  }
};

/// What one function's patterns share: the plan they read, the arena that
/// the signature pattern adds, the calls they emit.
struct LoweringState {
  const BufferPlan &plan;
  Value arena;
  int64_t numCalls = 0;
};

/// Replaces the function's signature: the arena first, then the arguments
/// as memrefs (their attributes kept); the plan's sizes as attributes.
class FuncSignaturePattern : public OpConversionPattern<func::FuncOp> {
public:
  FuncSignaturePattern(const TypeConverter &converter, MLIRContext *ctx,
                       LoweringState &state)
      : OpConversionPattern(converter, ctx), state(state) {}

  LogicalResult
  matchAndRewrite(func::FuncOp func, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    const TypeConverter &converter = *getTypeConverter();
    TypeConverter::SignatureConversion signature(func.getNumArguments());
    signature.addInputs(ir::rt::ArenaType::get(func.getContext()));
    for (auto [i, type] : llvm::enumerate(func.getArgumentTypes()))
      signature.addInputs(i, converter.convertType(type));
    SmallVector<Type> results;
    if (failed(converter.convertTypes(func.getResultTypes(), results)))
      return failure();
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      argAttrs.push_back(func.getArgAttrDict(i));

    Block *entry = rewriter.applySignatureConversion(&func.getBody().front(),
                                                     signature, &converter);
    state.arena = entry->getArgument(0);
    // An added argument has no location of its own: the function's.
    state.arena.setLoc(func.getLoc());
    rewriter.modifyOpInPlace(func, [&] {
      func.removeArgAttrsAttr();
      func.removeResAttrsAttr();
      func.setFunctionType(
          rewriter.getFunctionType(signature.getConvertedTypes(), results));
      for (auto [i, attrs] : llvm::enumerate(argAttrs))
        func.setArgAttrs(i + 1, attrs);
      func->setAttr(ir::rt::kArenaBytesAttr,
                    rewriter.getI64IntegerAttr(state.plan.getArenaBytes()));
      func->setAttr(ir::rt::kTensorBytesAttr,
                    rewriter.getI64IntegerAttr(state.plan.getTensorBytes()));
    });
    return success();
  }

private:
  LoweringState &state;
};

/// The arena views of an op's results at their planned offsets.
SmallVector<Value> createResultViews(OpBuilder &b, Operation *op,
                                     const TypeConverter &converter,
                                     const LoweringState &state) {
  SmallVector<Value> views;
  for (Value result : op->getResults())
    views.push_back(ir::rt::ViewOp::create(
        b, op->getLoc(), converter.convertType(result.getType()), state.arena,
        b.getI64IntegerAttr(state.plan.getOffset(result))));
  return views;
}

/// Replaces an op by the views of its results and one rt.call of its
/// kernel with its operands' buffers, then the views; each subclass says
/// which call.
class KernelCallPattern : public ConversionPattern {
public:
  template <typename... Args>
  KernelCallPattern(LoweringState &state, Args &&...args)
      : ConversionPattern(std::forward<Args>(args)...), state(state) {}

  LogicalResult
  matchAndRewrite(Operation *op, ArrayRef<ValueRange> operands,
                  ConversionPatternRewriter &rewriter) const final {
    std::optional<KernelCall> call = getCall(op, rewriter);
    if (!call)
      return rewriter.notifyMatchFailure(op, "no kernel of this family");
    SmallVector<Value> buffers;
    for (auto [value, converted] :
         llvm::zip_equal(op->getOperands(), operands)) {
      if (!isa<RankedTensorType>(value.getType()))
        continue; // the group rank's scalar: the call computes it
      // A folded transpose has no buffer: read the one it transposes.
      Value stored = state.plan.getStoredValue(value).first;
      buffers.push_back(stored == value ? converted.front()
                                        : rewriter.getRemappedValue(stored));
    }
    SmallVector<Value> views =
        createResultViews(rewriter, op, *getTypeConverter(), state);
    buffers.append(views);
    ir::rt::CallOp::create(rewriter, op->getLoc(), call->callee,
                           rewriter.getArrayAttr(call->args),
                           describeOrigin(op), buffers);
    ++state.numCalls;
    rewriter.replaceOp(op, views);
    return success();
  }

protected:
  virtual std::optional<KernelCall> getCall(Operation *op,
                                            Builder &b) const = 0;

  LoweringState &state;
};

/// Every op of one family (any op type: the family's function is the
/// matcher).
class FamilyPattern : public KernelCallPattern {
public:
  FamilyPattern(const TypeConverter &converter, MLIRContext *ctx,
                LoweringState &state, const KernelFamily &family)
      : KernelCallPattern(state, converter, MatchAnyOpTypeTag(),
                          /*benefit=*/1, ctx),
        family(family) {
    setDebugName(family.name);
  }

protected:
  std::optional<KernelCall> getCall(Operation *op, Builder &b) const override {
    return family.call(op, b);
  }

private:
  const KernelFamily &family;
};

/// A matmul, reading an operand of folded transposes untransposed with
/// BLAS's transposition flag.
class MatMulPattern : public KernelCallPattern {
public:
  MatMulPattern(const TypeConverter &converter, MLIRContext *ctx,
                LoweringState &state, StringRef opName)
      : KernelCallPattern(state, converter, opName, /*benefit=*/1, ctx) {}

protected:
  std::optional<KernelCall> getCall(Operation *op, Builder &b) const override {
    const BufferPlan &plan = state.plan;
    return getMatMulCall(op, b, plan.getStoredValue(op->getOperand(0)).second,
                         plan.getStoredValue(op->getOperand(1)).second);
  }
};

/// What the plan computes without a kernel: a folded transpose and the
/// group rank's scalars vanish (their readers' calls take their place), a
/// view reshape becomes its view. Before the families, which would call
/// the transpose and reshape kernels.
class NoCallPattern : public ConversionPattern {
public:
  NoCallPattern(const TypeConverter &converter, MLIRContext *ctx,
                LoweringState &state, StringRef opName)
      : ConversionPattern(converter, opName, /*benefit=*/2, ctx), state(state) {
  }

  LogicalResult
  matchAndRewrite(Operation *op, ArrayRef<ValueRange>,
                  ConversionPatternRewriter &rewriter) const override {
    const BufferPlan &plan = state.plan;
    if (plan.isFoldedTranspose(op) || plan.isGroupRankScalar(op)) {
      rewriter.eraseOp(op);
      return success();
    }
    if (!plan.isViewReshape(op))
      return failure();
    rewriter.replaceOp(
        op, createResultViews(rewriter, op, *getTypeConverter(), state));
    return success();
  }

private:
  LoweringState &state;
};

/// A constant becomes read-only static storage.
class ConstantPattern : public OpConversionPattern<ir::graph::ConstantOp> {
public:
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(ir::graph::ConstantOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<ir::rt::ConstantOp>(
        op, getTypeConverter()->convertType(op.getType()), op.getValue());
    return success();
  }
};

/// Returns the buffers; a returned argument or constant is first copied to
/// its planned offset, so that every output has one.
class ReturnPattern : public OpConversionPattern<func::ReturnOp> {
public:
  ReturnPattern(const TypeConverter &converter, MLIRContext *ctx,
                LoweringState &state)
      : OpConversionPattern(converter, ctx), state(state) {}

  LogicalResult
  matchAndRewrite(func::ReturnOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    SmallVector<Value> results;
    for (auto [i, buffer] : llvm::enumerate(adaptor.getOperands())) {
      std::optional<int64_t> copyOffset = state.plan.getCopyOffset(i);
      if (!copyOffset) {
        results.push_back(buffer);
        continue;
      }
      Value copy = ir::rt::ViewOp::create(
          rewriter, op.getLoc(), buffer.getType(), state.arena,
          rewriter.getI64IntegerAttr(*copyOffset));
      ir::rt::CallOp::create(
          rewriter, op.getLoc(), "lamina::rt::reshape",
          rewriter.getArrayAttr(
              {rewriter.getIndexAttr(0), rewriter.getIndexAttr(1)}),
          "the copy of a result that is an argument or a constant",
          ValueRange{buffer, copy});
      ++state.numCalls;
      results.push_back(copy);
    }
    rewriter.replaceOpWithNewOp<func::ReturnOp>(op, results);
    return success();
  }

private:
  LoweringState &state;
};

void populateGraphToRtPatterns(RewritePatternSet &patterns,
                               const TypeConverter &converter,
                               LoweringState &state) {
  MLIRContext *ctx = patterns.getContext();
  patterns.add<FuncSignaturePattern, ReturnPattern>(converter, ctx, state);
  patterns.add<ConstantPattern>(converter, ctx);
  for (StringRef name : {ir::graph::MatMulOp::getOperationName(),
                         ir::graph::FusedMatMulOp::getOperationName()})
    patterns.add<MatMulPattern>(converter, ctx, state, name);
  for (StringRef name : {ir::graph::TransposeOp::getOperationName(),
                         ir::graph::ReshapeOp::getOperationName(),
                         shard::ProcessLinearIndexOp::getOperationName(),
                         arith::IndexCastOp::getOperationName()})
    patterns.add<NoCallPattern>(converter, ctx, state, name);
  for (const KernelFamily &family : getKernelFamilies())
    patterns.add<FamilyPattern>(converter, ctx, state, family);
}

/// The function's checks: one block, static tensors at its boundary.
LogicalResult checkSignature(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return func.emitError("convert-graph-to-rt needs single-block functions");
  for (Type t : llvm::concat<const Type>(func.getArgumentTypes(),
                                         func.getResultTypes())) {
    auto tensor = dyn_cast<RankedTensorType>(t);
    if (!tensor || !tensor.hasStaticShape())
      return func.emitError("argument or result type ")
             << t << " is not a static tensor";
  }
  return success();
}

struct ConvertGraphToRtPass
    : public lamina::impl::ConvertGraphToRtBase<ConvertGraphToRtPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (failed(checkSignature(func)))
      return signalPassFailure();
    std::optional<BufferPlan> plan = BufferPlan::build(func);
    if (!plan)
      return signalPassFailure();
    // Every op must have a kernel before anything is rewritten.
    Builder probe(func.getContext());
    bool missing = false;
    for (Operation *op : plan->getOps())
      if (!isa<ir::graph::ConstantOp>(op) && !getKernelCall(op, probe)) {
        op->emitError("no host kernel for ") << describeOrigin(op);
        missing = true;
      }
    if (missing)
      return signalPassFailure();

    BufferTypeConverter converter;
    LoweringState state{*plan};
    RewritePatternSet patterns(&getContext());
    populateGraphToRtPatterns(patterns, converter, state);
    ConversionTarget target(getContext());
    target.addLegalDialect<ir::rt::RtDialect>();
    target.addDynamicallyLegalOp<func::FuncOp>([](func::FuncOp f) {
      return f.getNumArguments() != 0 &&
             isa<ir::rt::ArenaType>(f.getArgumentTypes().front());
    });
    target.addDynamicallyLegalOp<func::ReturnOp>(
        [&](func::ReturnOp op) { return converter.isLegal(op); });
    ConversionConfig config;
    // Lower the ops as written: a folder would change the planned values.
    config.foldingMode = DialectConversionFoldingMode::Never;
    if (failed(applyFullConversion(func, target, std::move(patterns), config)))
      return signalPassFailure();
    numCalls += state.numCalls;
    numAliased += plan->getNumAliased();
  }
};
} // namespace
