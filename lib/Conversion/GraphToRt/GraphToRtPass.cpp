//===- GraphToRtPass.cpp - bufferize graph functions onto an arena --------===//
//
// One walk over each function's single block: lifetimes of the op results,
// storage classes (values that share bytes on purpose), the arena plan
// (MemoryPlan.h), then a new function of rt ops built op by op. See the
// pass description in include/lamina/Conversion/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lamina/Conversion/GraphToRt/GraphToRt.h"
#include "lamina/Schedule/MemoryPlan.h"
#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/MathExtras.h"

namespace lamina {
#define GEN_PASS_DEF_CONVERTGRAPHTORT
#include "lamina/Conversion/Passes.h.inc"
} // namespace lamina

using namespace mlir;
using namespace lamina;

static MemRefType bufferType(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return MemRefType::get(tensor.getShape(), tensor.getElementType());
}

/// Bytes of a static tensor or memref (i1 is one byte per element, as the
/// runtime stores it).
static int64_t byteSize(Type type) {
  auto shaped = cast<ShapedType>(type);
  Type elt = shaped.getElementType();
  int64_t width = elt.isInteger(1) ? 8 : elt.getIntOrFloatBitWidth();
  return shaped.getNumElements() * ((width + 7) / 8);
}

/// Whether `use` is the lhs or rhs of a matmul (which can read it
/// transposed), not a fused matmul's bias or addend.
static bool isMatMulOperand(OpOperand &use) {
  return isa<graph::MatMulOp, graph::FusedMatMulOp>(use.getOwner()) &&
         use.getOperandNumber() < 2;
}

namespace {
/// Values that share storage (a reshape and its input; an in-place result
/// and the operand it overwrites) form one storage class with one lifetime.
struct StorageClass {
  int64_t bytes = 0;
  int64_t first = 0, last = 0;
};

class FunctionBufferizer {
public:
  FunctionBufferizer(func::FuncOp func, int64_t &numAliased)
      : func(func), numAliased(numAliased) {}

  LogicalResult run(int64_t &numCalls);

private:
  LogicalResult assignClasses();
  func::FuncOp buildRtFunction(int64_t &numCalls);

  func::FuncOp func;
  int64_t &numAliased;
  SmallVector<Operation *> ops;               // the body without terminator
  llvm::DenseMap<Value, int64_t> lastUse;     // op index; ops.size() = end
  llvm::DenseMap<Value, unsigned> classOf;    // arena values only
  // Transposes of the last two dims that only feed matmuls: never computed;
  // the matmuls read their input with a BLAS transposition flag.
  llvm::SmallPtrSet<Operation *, 8> foldedTransposes;
  // Reshapes that are views of their input's bytes: no kernel call.
  llvm::SmallPtrSet<Operation *, 8> viewReshapes;
  SmallVector<StorageClass> classes;
  SmallVector<unsigned> returnCopies;         // class per copied result
  MemoryPlan plan;
  int64_t tensorBytes = 0; // every value on its own, aligned
};
} // namespace

LogicalResult FunctionBufferizer::assignClasses() {
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator())
    if (!isGroupRankScalar(&op))
      ops.push_back(&op);
  int64_t end = int64_t(ops.size());
  for (auto [i, op] : llvm::enumerate(ops))
    for (Value v : op->getOperands())
      lastUse[v] = int64_t(i);
  Operation *terminator = body.getTerminator();
  for (Value v : terminator->getOperands())
    lastUse[v] = end;
  // Last op first, so that a transpose read only by matmuls and by
  // transposes that fold folds too (the tied LM head: its transposed bf16
  // weight, and the transpose of that for the input gradient's matmul).
  for (Operation *op : llvm::reverse(ops)) {
    auto t = dyn_cast<graph::TransposeOp>(op);
    if (!t || !t.swapsLastTwoDims() || t->use_empty() ||
        !llvm::all_of(t->getUses(), [&](OpOperand &use) {
          return isMatMulOperand(use) ||
                 foldedTransposes.contains(use.getOwner());
        }))
      continue;
    foldedTransposes.insert(op);
    // The input is read where the transposed value would have been.
    int64_t &inputLast = lastUse[t.getInput()];
    inputLast = std::max(inputLast, lastUse.lookup(t.getResult()));
  }

  for (auto [index, op] : llvm::enumerate(ops)) {
    int64_t i = int64_t(index);
    if (op->getNumResults() == 0 || op->getNumRegions() != 0)
      return op->emitError("cannot lower ")
             << describeOrigin(op) << ": not a graph op with results";
    if (isa<graph::ConstantOp>(op) || foldedTransposes.count(op))
      continue;
    if (op->getNumResults() > 1) {
      // Several results (the fused backward ops): each its own storage.
      for (Value result : op->getResults()) {
        int64_t bytes = byteSize(result.getType());
        tensorBytes += llvm::alignTo(bytes, rt_ir::kArenaAlignment);
        classOf[result] = classes.size();
        classes.push_back({bytes, i, std::max(lastUse.lookup(result), i)});
      }
      continue;
    }
    Value result = op->getResult(0);
    int64_t bytes = byteSize(result.getType());
    tensorBytes += llvm::alignTo(bytes, rt_ir::kArenaAlignment);
    int64_t last = lastUse.lookup(result);
    if (last < i) // unused: still written, so it needs room during the op
      last = i;
    auto join = [&](unsigned cls) {
      classOf[result] = cls;
      classes[cls].last = std::max(classes[cls].last, last);
      ++numAliased;
    };
    // A reshape is a view of its input's bytes.
    if (isa<graph::ReshapeOp>(op) && classOf.count(op->getOperand(0))) {
      join(classOf[op->getOperand(0)]);
      viewReshapes.insert(op);
      continue;
    }
    // Overwrite an operand whose storage dies here, when the kernel allows
    // it and no other operand reads the same storage with another mapping.
    std::optional<unsigned> inPlace;
    for (auto [k, operand] : llvm::enumerate(op->getOperands())) {
      auto it = classOf.find(operand);
      if (it == classOf.end() || !kernelAllowsInPlace(op, unsigned(k)))
        continue;
      auto operandType = cast<ShapedType>(operand.getType());
      auto resultType = cast<ShapedType>(result.getType());
      if (classes[it->second].last != i ||
          operandType.getShape() != resultType.getShape() ||
          byteSize(operandType) != bytes)
        continue;
      bool otherReader = llvm::any_of(op->getOperands(), [&](Value other) {
        return other != operand && classOf.lookup(other) == it->second &&
               classOf.count(other);
      });
      if (!otherReader) {
        inPlace = it->second;
        break;
      }
    }
    if (inPlace) {
      join(*inPlace);
      continue;
    }
    classOf[result] = classes.size();
    classes.push_back({bytes, i, last});
  }
  // Results that are arguments or constants are copied into the arena, so
  // every output has an arena offset.
  for (Value v : terminator->getOperands())
    if (!classOf.count(v)) {
      returnCopies.push_back(classes.size());
      classes.push_back({byteSize(v.getType()), end, end});
      tensorBytes += llvm::alignTo(byteSize(v.getType()), rt_ir::kArenaAlignment);
    }

  std::vector<BufferRequest> requests;
  for (const StorageClass &c : classes)
    requests.push_back({c.bytes, c.first, c.last});
  plan = planMemory(requests, rt_ir::kArenaAlignment);
  return success();
}

func::FuncOp FunctionBufferizer::buildRtFunction(int64_t &numCalls) {
  MLIRContext *ctx = func.getContext();
  OpBuilder b(func);
  Block &oldBody = func.getBody().front();
  auto *terminator = oldBody.getTerminator();

  SmallVector<Type> argTypes{rt_ir::ArenaType::get(ctx)};
  for (Type t : func.getArgumentTypes())
    argTypes.push_back(bufferType(t));
  SmallVector<Type> resultTypes;
  for (Type t : func.getResultTypes())
    resultTypes.push_back(bufferType(t));
  auto newFunc = func::FuncOp::create(
      b, func.getLoc(), func.getName(), b.getFunctionType(argTypes, resultTypes));
  for (NamedAttribute attr : func->getAttrs())
    if (attr.getName() != func.getFunctionTypeAttrName() &&
        attr.getName() != func.getSymNameAttrName() &&
        attr.getName() != func.getArgAttrsAttrName() &&
        attr.getName() != func.getResAttrsAttrName())
      newFunc->setAttr(attr.getName(), attr.getValue());
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    newFunc.setArgAttrs(i + 1, func.getArgAttrDict(i));
  newFunc->setAttr(rt_ir::kArenaBytesAttr, b.getI64IntegerAttr(plan.peakBytes));
  newFunc->setAttr(rt_ir::kTensorBytesAttr,
                   b.getI64IntegerAttr(tensorBytes));

  Block *body = newFunc.addEntryBlock();
  b.setInsertionPointToStart(body);
  Value arena = body->getArgument(0);
  llvm::DenseMap<Value, Value> buffer;
  for (BlockArgument arg : oldBody.getArguments())
    buffer[arg] = body->getArgument(arg.getArgNumber() + 1);
  auto view = [&](Location loc, unsigned cls, Type type) -> Value {
    return rt_ir::ViewOp::create(b, loc, bufferType(type), arena,
                                 b.getI64IntegerAttr(plan.offsets[cls]));
  };

  for (Operation *op : ops) {
    Value result = op->getResult(0);
    if (auto c = dyn_cast<graph::ConstantOp>(op)) {
      buffer[result] = rt_ir::ConstantOp::create(
          b, op->getLoc(), bufferType(result.getType()), c.getValue());
      continue;
    }
    if (foldedTransposes.count(op)) {
      buffer[result] = buffer.lookup(op->getOperand(0));
      continue;
    }
    SmallVector<Value> outs;
    for (Value r : op->getResults()) {
      outs.push_back(view(op->getLoc(), classOf[r], r.getType()));
      buffer[r] = outs.back();
    }
    if (viewReshapes.count(op))
      continue; // an aliasing view: nothing to compute
    // Whether a matmul reads `v` transposed: an odd number of folded
    // transposes between it and the buffer it reads.
    auto folded = [&](Value v) {
      bool odd = false;
      for (Operation *def = v.getDefiningOp();
           def && foldedTransposes.count(def);
           def = def->getOperand(0).getDefiningOp())
        odd = !odd;
      return odd;
    };
    std::optional<KernelCall> call =
        isa<graph::MatMulOp, graph::FusedMatMulOp>(op)
            ? getMatMulCall(op, b, folded(op->getOperand(0)),
                            folded(op->getOperand(1)))
            : getKernelCall(op, b);
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      if (isa<RankedTensorType>(v.getType())) // not the group rank's scalar
        operands.push_back(buffer.lookup(v));
    operands.append(outs);
    rt_ir::CallOp::create(b, op->getLoc(), call->callee,
                          b.getArrayAttr(call->args), describeOrigin(op),
                          operands);
    ++numCalls;
  }

  SmallVector<Value> results;
  unsigned copy = 0;
  for (Value v : terminator->getOperands()) {
    if (classOf.count(v)) {
      results.push_back(buffer.lookup(v));
      continue;
    }
    Value out = view(terminator->getLoc(), returnCopies[copy++], v.getType());
    rt_ir::CallOp::create(
        b, terminator->getLoc(), "lamina::rt::reshape",
        b.getArrayAttr({b.getIndexAttr(0), b.getIndexAttr(1)}),
        "the copy of a result that is an argument or a constant",
        ValueRange{buffer.lookup(v), out});
    ++numCalls;
    results.push_back(out);
  }
  func::ReturnOp::create(b, terminator->getLoc(), results);
  return newFunc;
}

LogicalResult FunctionBufferizer::run(int64_t &numCalls) {
  if (!func.getBody().hasOneBlock())
    return func.emitError("convert-graph-to-rt needs single-block functions");
  for (Type t : llvm::concat<const Type>(func.getArgumentTypes(),
                                          func.getResultTypes())) {
    auto tensor = dyn_cast<RankedTensorType>(t);
    if (!tensor || !tensor.hasStaticShape())
      return func.emitError("argument or result type ")
             << t << " is not a static tensor";
  }
  if (failed(assignClasses()))
    return failure();
  // Every op must have a kernel before anything is rewritten.
  OpBuilder probe(func.getContext());
  bool missing = false;
  for (Operation *op : ops)
    if (!isa<graph::ConstantOp>(op) && !getKernelCall(op, probe)) {
      op->emitError("no host kernel for ") << describeOrigin(op);
      missing = true;
    }
  if (missing)
    return failure();
  buildRtFunction(numCalls);
  func.erase();
  return success();
}

namespace {
struct ConvertGraphToRtPass
    : public lamina::impl::ConvertGraphToRtBase<ConvertGraphToRtPass> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs(getOperation().getOps<func::FuncOp>());
    int64_t calls = 0, aliased = 0;
    for (func::FuncOp f : funcs) {
      FunctionBufferizer bufferizer(f, aliased);
      if (failed(bufferizer.run(calls)))
        return signalPassFailure();
    }
    numCalls += calls;
    numAliased += aliased;
  }
};
} // namespace
