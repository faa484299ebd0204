//===- BufferPlan.cpp - where one graph function's values live ------------===//
//
// One walk over the function's single block: lifetimes, storage classes,
// then the arena plan (MemoryPlan.h). See the pass description in
// include/lamina/Conversion/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "BufferPlan.h"

#include "lamina/Conversion/GraphToRt/GraphToRt.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Rt/IR/RtDialect.h"
#include "lamina/Schedule/MemoryPlan.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace lamina;

/// Bytes of a static tensor (i1 is one byte per element, as the runtime
/// stores it).
static int64_t byteSize(Type type) {
  auto shaped = cast<ShapedType>(type);
  Type elt = shaped.getElementType();
  int64_t width = elt.isInteger(1) ? 8 : elt.getIntOrFloatBitWidth();
  return shaped.getNumElements() * ((width + 7) / 8);
}

/// Whether `use` is the lhs or rhs of a matmul (which can read it
/// transposed), not a fused matmul's bias or addend.
static bool isMatMulOperand(OpOperand &use) {
  return isa<ir::graph::MatMulOp, ir::graph::FusedMatMulOp>(use.getOwner()) &&
         use.getOperandNumber() < 2;
}

namespace {
/// Values that share storage (a reshape and its input; an in-place result
/// and the operand it overwrites) form one storage class with one lifetime.
struct StorageClass {
  int64_t bytes = 0;
  int64_t first = 0, last = 0;
};
} // namespace

std::optional<BufferPlan> BufferPlan::build(func::FuncOp func) {
  BufferPlan plan;
  if (failed(plan.assign(func)))
    return std::nullopt;
  return plan;
}

int64_t BufferPlan::getOffset(Value result) const {
  auto it = offsets.find(result);
  assert(it != offsets.end() && "value without an arena offset");
  return it->second;
}

std::optional<int64_t> BufferPlan::getCopyOffset(unsigned i) const {
  return copyOffsets[i];
}

std::pair<Value, bool> BufferPlan::getStoredValue(Value v) const {
  bool odd = false;
  for (Operation *def = v.getDefiningOp(); def && isFoldedTranspose(def);
       def = v.getDefiningOp()) {
    v = def->getOperand(0);
    odd = !odd;
  }
  return {v, odd};
}

LogicalResult BufferPlan::assign(func::FuncOp func) {
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator()) {
    if (lamina::isGroupRankScalar(&op))
      groupRankScalars.insert(&op);
    else
      ops.push_back(&op);
  }
  llvm::DenseMap<Value, int64_t> lastUse; // op index; ops.size() = end
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
    auto t = dyn_cast<ir::graph::TransposeOp>(op);
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

  llvm::DenseMap<Value, unsigned> classOf; // arena values only
  SmallVector<StorageClass> classes;
  for (auto [index, op] : llvm::enumerate(ops)) {
    int64_t i = int64_t(index);
    if (op->getNumResults() == 0 || op->getNumRegions() != 0)
      return op->emitError("cannot lower ")
             << describeOrigin(op) << ": not a graph op with results";
    if (isa<ir::graph::ConstantOp>(op) || foldedTransposes.count(op))
      continue;
    if (op->getNumResults() > 1) {
      // Several results (the fused backward ops): each its own storage.
      for (Value result : op->getResults()) {
        int64_t bytes = byteSize(result.getType());
        tensorBytes += llvm::alignTo(bytes, ir::rt::kArenaAlignment);
        classOf[result] = classes.size();
        classes.push_back({bytes, i, std::max(lastUse.lookup(result), i)});
      }
      continue;
    }
    Value result = op->getResult(0);
    int64_t bytes = byteSize(result.getType());
    tensorBytes += llvm::alignTo(bytes, ir::rt::kArenaAlignment);
    int64_t last = lastUse.lookup(result);
    if (last < i) // unused: still written, so it needs room during the op
      last = i;
    auto join = [&](unsigned cls) {
      classOf[result] = cls;
      classes[cls].last = std::max(classes[cls].last, last);
      ++numAliased;
    };
    // A reshape is a view of its input's bytes.
    if (isa<ir::graph::ReshapeOp>(op) && classOf.count(op->getOperand(0))) {
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
  SmallVector<std::optional<unsigned>> copyClasses;
  for (Value v : terminator->getOperands()) {
    if (classOf.count(v)) {
      copyClasses.push_back(std::nullopt);
      continue;
    }
    copyClasses.push_back(classes.size());
    classes.push_back({byteSize(v.getType()), end, end});
    tensorBytes +=
        llvm::alignTo(byteSize(v.getType()), ir::rt::kArenaAlignment);
  }

  std::vector<BufferRequest> requests;
  for (const StorageClass &c : classes)
    requests.push_back({c.bytes, c.first, c.last});
  MemoryPlan plan = planMemory(requests, ir::rt::kArenaAlignment);
  arenaBytes = plan.peakBytes;
  for (auto [value, cls] : classOf)
    offsets[value] = plan.offsets[cls];
  for (std::optional<unsigned> cls : copyClasses)
    copyOffsets.push_back(cls ? std::optional<int64_t>(plan.offsets[*cls])
                              : std::nullopt);
  return success();
}
