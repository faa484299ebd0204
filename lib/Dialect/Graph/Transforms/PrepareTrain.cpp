//===- PrepareTrain.cpp - @forward made ready for training ----------------===//
//
// graph-fill-window-inputs, graph-freeze, graph-freeze-buffers,
// graph-mark-padding and graph-eval-step: what `lamina compile --mode train`
// does to an imported export around the loss and autodiff. Each acts on the
// entry function (graph.entry, or an unmarked @forward) and says what it
// changed as a remark on it (the compile's summary prints them). All but
// graph-eval-step run on func.func, skipping the other functions.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/Support/Regex.h"

#include <set>

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHFILLWINDOWINPUTS
#define GEN_PASS_DEF_GRAPHFREEZE
#define GEN_PASS_DEF_GRAPHFREEZEBUFFERS
#define GEN_PASS_DEF_GRAPHMARKPADDING
#define GEN_PASS_DEF_GRAPHEVALSTEP
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
/// The func.func passes' check of the entry they act on.
LogicalResult checkOneBlock(func::FuncOp entry, StringRef pass) {
  if (entry.getBody().hasOneBlock())
    return success();
  return entry.emitError() << pass << ": the entry function must be one block";
}

StringRef argName(func::FuncOp f, unsigned i) {
  auto name = f.getArgAttrOfType<StringAttr>(i, kNameAttr);
  return name ? name.getValue() : StringRef();
}

bool isKind(func::FuncOp f, unsigned i, StringRef kind) {
  auto attr = f.getArgAttrOfType<StringAttr>(i, kKindAttr);
  return attr && attr.getValue() == kind;
}

struct GraphFillWindowInputs
    : lamina::ir::graph::impl::GraphFillWindowInputsBase<
          GraphFillWindowInputs> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp forward = getOperation();
    if (!isEntryFunction(forward))
      return;
    if (failed(checkOneBlock(forward, getArgument())))
      return signalPassFailure();
    for (const std::string &name : keep) {
      bool found = false;
      for (unsigned i = 0; i < forward.getNumArguments(); ++i)
        found |= isKind(forward, i, kKindInput) && argName(forward, i) == name;
      if (!found) {
        forward.emitError() << "--keep-input: the model has no input named '"
                            << name << "'";
        return signalPassFailure();
      }
    }
    OpBuilder b(forward.getContext());
    b.setInsertionPointToStart(&forward.getBody().front());
    llvm::BitVector erase(forward.getNumArguments());
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      StringRef n = argName(forward, i);
      auto type = dyn_cast<RankedTensorType>(forward.getArgument(i).getType());
      if (!isKind(forward, i, kKindInput) || n.empty() || !type ||
          !type.getElementType().isSignlessInteger() || type.getRank() != 2 ||
          (!labels.empty() && n == labels) || llvm::is_contained(keep, n))
        continue;
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
      forward.emitRemark() << "input " << n << ": " << what;
    }
    if (erase.none())
      return;
    if (failed(forward.eraseArguments(erase))) {
      forward.emitError("graph-fill-window-inputs: cannot remove the filled "
                        "inputs");
      return signalPassFailure();
    }
    // The constants folded through the mask arithmetic, so the attention
    // fusion sees what the mask is (causal).
    OpPassManager fold(func::FuncOp::getOperationName());
    fold.addPass(createCanonicalizerPass());
    if (failed(runPipeline(fold, forward)))
      signalPassFailure();
  }
};

struct GraphFreeze : lamina::ir::graph::impl::GraphFreezeBase<GraphFreeze> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp forward = getOperation();
    if (!isEntryFunction(forward))
      return;
    if (failed(checkOneBlock(forward, getArgument())))
      return signalPassFailure();
    llvm::Regex re(regex);
    if (std::string err; regex.empty() || !re.isValid(err)) {
      forward.emitError() << "--freeze '" << regex
                          << "' is not a valid regex"
                          << (err.empty() ? "" : ": " + err);
      return signalPassFailure();
    }
    Builder b(forward.getContext());
    unsigned frozen = 0, trainable = 0;
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      if (!isKind(forward, i, kKindTrainable))
        continue;
      if (re.match(argName(forward, i))) {
        forward.setArgAttr(i, kKindAttr, b.getStringAttr(kKindConstant));
        ++frozen;
      } else {
        ++trainable;
      }
    }
    if (frozen == 0) {
      forward.emitError() << "--freeze '" << regex
                          << "' matches no trainable initializer";
      return signalPassFailure();
    }
    if (trainable == 0) {
      forward.emitError() << "--freeze '" << regex
                          << "' freezes every initializer: nothing to train";
      return signalPassFailure();
    }
    forward.emitRemark() << "not trained: " << frozen
                         << " initializers matching --freeze '" << regex
                         << "'";
  }
};

/// Rotary frequencies: `inv_freq` in every Hugging Face rotary embedding;
/// `final_logits_bias`, the zero bias BART-style models (BART, mBART,
/// Marian, Pegasus) add to their logits.
bool isKnownBuffer(StringRef name) {
  for (StringRef buffer : {"inv_freq", "final_logits_bias"})
    if (name == buffer || (name.ends_with(buffer) &&
                           (name.drop_back(buffer.size()).ends_with(".") ||
                            name.drop_back(buffer.size()).ends_with("/"))))
      return true;
  return false;
}

struct GraphFreezeBuffers
    : lamina::ir::graph::impl::GraphFreezeBuffersBase<GraphFreezeBuffers> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp forward = getOperation();
    if (!isEntryFunction(forward))
      return;
    if (failed(checkOneBlock(forward, getArgument())))
      return signalPassFailure();
    Builder b(forward.getContext());
    std::set<std::string> marked(buffers.begin(), buffers.end());
    for (unsigned i = 0; i < forward.getNumArguments(); ++i)
      if (isKind(forward, i, kKindTrainable) &&
          (isKnownBuffer(argName(forward, i)) ||
           marked.count(argName(forward, i).str()))) {
        forward.setArgAttr(i, kKindAttr, b.getStringAttr(kKindConstant));
        forward.emitRemark() << "not trained: " << argName(forward, i)
                             << " (a buffer, not a parameter, in PyTorch)";
      }
  }
};

struct GraphMarkPadding
    : lamina::ir::graph::impl::GraphMarkPaddingBase<GraphMarkPadding> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp forward = getOperation();
    if (!isEntryFunction(forward))
      return;
    if (failed(checkOneBlock(forward, getArgument())))
      return signalPassFailure();
    // User flags first: those must each find a lookup.
    struct Pad {
      std::string table;
      int64_t index;
      bool required, used = false;
    };
    std::vector<Pad> pads;
    for (auto [list, required] : {std::pair(&paddingIdx, true),
                                  std::pair(&knownPaddingIdx, false)})
      for (const std::string &entry : *list) {
        auto [name, index] = StringRef(entry).rsplit('=');
        int64_t value;
        if (name.empty() || index.getAsInteger(10, value) || value < 0) {
          forward.emitError() << "--padding-idx '" << entry
                              << "' is not NAME=INDEX with INDEX >= 0";
          return signalPassFailure();
        }
        pads.push_back({name.str(), value, required});
      }
    Builder b(forward.getContext());
    forward.walk([&](GatherOp gather) {
      auto table = dyn_cast<BlockArgument>(gather.getData());
      if (!table || gather.getAxis() != 0)
        return;
      StringRef name = argName(forward, table.getArgNumber());
      for (Pad &pad : pads)
        if (!name.empty() && name == pad.table) {
          gather.setPaddingIdxAttr(b.getI64IntegerAttr(pad.index));
          pad.used = true;
        }
    });
    // Tables the export says nothing about: looked up, and no index given.
    std::set<std::string> unknown(unknownPadding.begin(), unknownPadding.end());
    std::vector<std::string> unsaid;
    forward.walk([&](GatherOp gather) {
      auto table = dyn_cast<BlockArgument>(gather.getData());
      if (!table || gather.getAxis() != 0 || gather.getPaddingIdxAttr())
        return;
      std::string name = argName(forward, table.getArgNumber()).str();
      if (unknown.erase(name))
        unsaid.push_back(name);
    });
    for (const std::string &name : unsaid)
      forward.emitRemark()
          << "embedding '" << name
          << "': the export does not say whether PyTorch's embedding had a "
             "padding_idx (TorchScript exports drop it); if it had, "
             "--padding-idx "
          << name << "=INDEX keeps that row untrained, as PyTorch does";
    for (const Pad &pad : pads) {
      if (pad.used)
        forward.emitRemark() << "padding_idx " << pad.index
                             << " of embedding '" << pad.table
                             << "': lookups of token " << pad.index
                             << " do not train its row, as in PyTorch";
      else if (pad.required) {
        forward.emitError() << "--padding-idx: no embedding lookup (a Gather "
                               "on axis 0) reads an initializer named '"
                            << pad.table << "'";
        return signalPassFailure();
      }
    }
  }
};

struct GraphEvalStep
    : lamina::ir::graph::impl::GraphEvalStepBase<GraphEvalStep> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp forward = entryFunctionOf(getOperation());
    if (!forward || !forward.getBody().hasOneBlock()) {
      getOperation().emitError("graph-eval-step: no single-block entry "
                               "function (graph.entry, or @forward)");
      return signalPassFailure();
    }
    std::string lossName = loss;
    if (TrainAttr train = trainAttrOf(getOperation()); train && lossName.empty())
      lossName = train.getOutput().str();
    auto names = forward->getAttrOfType<ArrayAttr>(kOutputNamesAttr);
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    std::optional<unsigned> found;
    for (unsigned i = 0; names && i < names.size(); ++i)
      if (auto s = dyn_cast<StringAttr>(names[i]); s && s.getValue() == lossName)
        found = i;
    if (!found) {
      forward.emitError() << "graph-eval-step: @forward has no output named '"
                          << lossName << "' (run graph-add-loss first)";
      return signalPassFailure();
    }
    Value value = ret.getOperand(*found);
    ret->setOperands(value);
    forward.setFunctionType(FunctionType::get(
        forward.getContext(), forward.getArgumentTypes(), {value.getType()}));
    forward.removeResAttrsAttr();
    Builder b(forward.getContext());
    forward->setAttr(kOutputNamesAttr, b.getStrArrayAttr({lossName}));
    forward.setSymName(name);
    // No longer the forward pass the preparation passes act on.
    setEntryFunction(forward, false);
    // What only the dropped outputs read.
    IRRewriter rewriter(forward.getContext());
    (void)runRegionDCE(rewriter, forward.getBody());
  }
};
} // namespace
