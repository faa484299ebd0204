//===- PrepareTrain.cpp - @forward made ready for training ----------------===//

#include "lamina/Dialect/Graph/Transforms/PrepareTrain.h"

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/BitVector.h"

using namespace mlir;
using namespace lamina::graph;

LogicalResult
lamina::graph::fillWindowInputs(func::FuncOp forward, StringRef labels,
                                std::vector<std::string> &filled) {
  OpBuilder b(forward.getContext());
  b.setInsertionPointToStart(&forward.getBody().front());
  llvm::BitVector erase(forward.getNumArguments());
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto kind = forward.getArgAttrOfType<StringAttr>(i, kKindAttr);
    auto name = forward.getArgAttrOfType<StringAttr>(i, kNameAttr);
    auto type = dyn_cast<RankedTensorType>(forward.getArgument(i).getType());
    if (!kind || kind.getValue() != kKindInput || !name || !type ||
        !type.getElementType().isSignlessInteger() || type.getRank() != 2 ||
        (!labels.empty() && name.getValue() == labels))
      continue;
    StringRef n = name.getValue();
    std::string what;
    Attribute value;
    Type element = type.getElementType();
    if (n == "attention_mask") {
      value = DenseElementsAttr::get(type, b.getIntegerAttr(element, 1));
      what = "all ones (no padding in a window of packed tokens)";
    } else if (n == "token_type_ids") {
      value = DenseElementsAttr::get(type, b.getIntegerAttr(element, 0));
      what = "all zeros (one segment)";
    } else if (n == "position_ids") {
      SmallVector<APInt> positions;
      unsigned width = element.getIntOrFloatBitWidth();
      for (int64_t r = 0; r < type.getDimSize(0); ++r)
        for (int64_t c = 0; c < type.getDimSize(1); ++c)
          positions.push_back(APInt(width, uint64_t(c)));
      value = DenseElementsAttr::get(type, positions);
      what = "0 to " + std::to_string(type.getDimSize(1) - 1) +
             " in every row (each window starts a sequence)";
    } else {
      continue;
    }
    Value c = ConstantOp::create(b, forward.getArgument(i).getLoc(),
                                 cast<ElementsAttr>(value));
    forward.getArgument(i).replaceAllUsesWith(c);
    erase.set(i);
    filled.push_back(n.str() + ": " + what);
  }
  if (erase.any() && failed(forward.eraseArguments(erase)))
    return forward.emitError("cannot remove the filled inputs");
  return success();
}

/// Rotary frequencies: `inv_freq` in every Hugging Face rotary embedding.
static bool isKnownBuffer(StringRef name) {
  return name == "inv_freq" || name.ends_with(".inv_freq") ||
         name.ends_with("/inv_freq");
}

void lamina::graph::freezeKnownBuffers(func::FuncOp forward,
                                       std::vector<std::string> &frozen) {
  Builder b(forward.getContext());
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto kind = forward.getArgAttrOfType<StringAttr>(i, kKindAttr);
    auto name = forward.getArgAttrOfType<StringAttr>(i, kNameAttr);
    if (kind && kind.getValue() == kKindTrainable && name &&
        isKnownBuffer(name.getValue())) {
      forward.setArgAttr(i, kKindAttr, b.getStringAttr(kKindConstant));
      frozen.push_back(name.getValue().str());
    }
  }
}

LogicalResult lamina::graph::markPaddingIndices(
    func::FuncOp forward, ArrayRef<std::pair<std::string, int64_t>> pads,
    size_t firstRequired) {
  Builder b(forward.getContext());
  std::vector<bool> used(pads.size(), false);
  forward.walk([&](GatherOp gather) {
    auto table = dyn_cast<BlockArgument>(gather.getData());
    if (!table || gather.getAxis() != 0)
      return;
    auto name =
        forward.getArgAttrOfType<StringAttr>(table.getArgNumber(), kNameAttr);
    for (size_t k = 0; k < pads.size(); ++k)
      if (name && name.getValue() == pads[k].first) {
        gather.setPaddingIdxAttr(b.getI64IntegerAttr(pads[k].second));
        used[k] = true;
      }
  });
  for (size_t k = firstRequired; k < pads.size(); ++k)
    if (!used[k])
      return forward.emitError("--padding-idx: no embedding "
                               "lookup (a Gather on axis 0) reads an "
                               "initializer named '")
             << pads[k].first << "'";
  return success();
}

LogicalResult lamina::graph::keepOnlyLoss(func::FuncOp forward, StringRef loss,
                                          StringRef name) {
  auto names = forward->getAttrOfType<ArrayAttr>(kOutputNamesAttr);
  auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  std::optional<unsigned> found;
  for (unsigned i = 0; names && i < names.size(); ++i)
    if (auto s = dyn_cast<StringAttr>(names[i]); s && s.getValue() == loss)
      found = i;
  if (!found)
    return forward.emitError("lamina compile: @")
           << forward.getName() << " has no output named '" << loss << "'";
  Value value = ret.getOperand(*found);
  ret->setOperands(value);
  forward.setFunctionType(FunctionType::get(
      forward.getContext(), forward.getArgumentTypes(), {value.getType()}));
  forward.removeResAttrsAttr();
  Builder b(forward.getContext());
  forward->setAttr(kOutputNamesAttr, b.getStrArrayAttr({loss}));
  forward.setSymName(name);
  // What only the dropped outputs read.
  IRRewriter rewriter(forward.getContext());
  (void)runRegionDCE(rewriter, forward.getBody());
  return success();
}
