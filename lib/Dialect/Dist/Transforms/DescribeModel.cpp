//===- DescribeModel.cpp - graph IR -> the planner's ModelDesc ------------===//
//
// Sums each discovered module's costs from the ops' CostOpInterface, counts
// the parameters it owns and the bytes that cross its boundaries. Shared
// values (masks, rotary tables) are not chain traffic: every rank computes
// or receives them once, so they are listed by name instead.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/Transforms/DescribeModel.h"
#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/Discovery.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Path.h"

#include <set>

using namespace mlir;
using namespace lamina;

namespace {

int64_t elementBytes(Type t) {
  Type e = cast<ShapedType>(t).getElementType();
  if (!e.isIntOrIndexOrFloat())
    return 8;
  unsigned bits = e.getIntOrFloatBitWidth();
  return bits < 8 ? 1 : bits / 8;
}

int64_t tensorBytes(Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  return shaped.getNumElements() * elementBytes(t);
}

bool isConstant(Operation *op) {
  return op && op->hasTrait<OpTrait::ConstantLike>();
}

std::string modelName(ModuleOp module) {
  if (auto name = module.getSymName())
    return name->str();
  if (auto loc = dyn_cast<FileLineColLoc>(module.getLoc()))
    return llvm::sys::path::stem(loc.getFilename().getValue()).str();
  return "model";
}

} // namespace

FailureOr<plan::ModelDesc>
lamina::ir::dist::describeModel(ModuleOp module,
                                const DescribeOptions &options) {
  auto func = module.lookupSymbol<func::FuncOp>(options.functionName);
  if (!func)
    return mlir::emitError(module.getLoc())
           << "no function @" << options.functionName << " to describe";
  // A chain already in the IR (dist-discover-modules, or edited by hand)
  // is what the user wants planned, unless a regex asks for another.
  FailureOr<ModuleChain> chain =
      func->hasAttr(DistDialect::kChainAttr) && options.moduleRegex.empty()
          ? chainFromAttributes(func)
          : discoverModules(func, options.moduleRegex);
  if (failed(chain))
    return failure();

  plan::ModelDesc desc;
  desc.name = modelName(module);
  desc.discovery = chain->discovery;
  size_t n = chain->modules.size();
  for (const ChainModule &cm : chain->modules) {
    plan::ModuleDesc md;
    md.name = cm.name;
    md.role = cm.role;
    md.body = cm.body;
    desc.modules.push_back(std::move(md));
  }

  // The micro-batch: the first integer input of rank >= 2 is [batch, seq]
  // (token ids); otherwise the first input's leading dims.
  std::optional<ArrayRef<int64_t>> dims;
  for (BlockArgument arg : func.getArguments()) {
    auto kind = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  ir::graph::kKindAttr);
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!kind || kind.getValue() != ir::graph::kKindInput || !type)
      continue;
    if (type.getElementType().isInteger() && type.getRank() >= 2) {
      dims = type.getShape();
      break;
    }
    if (!dims && type.getRank() >= 1)
      dims = type.getShape();
  }
  if (dims) {
    desc.microBatchSize = std::max<int64_t>(1, (*dims)[0]);
    if (dims->size() >= 2)
      desc.seqLen = std::max<int64_t>(1, (*dims)[1]);
  }

  // Costs and activations.
  for (Operation &op : func.getBody().front().without_terminator()) {
    plan::ModuleDesc &md = desc.modules[chain->moduleOfOp(&op)];
    if (auto cost = dyn_cast<ir::graph::CostOpInterface>(&op)) {
      double flops = static_cast<double>(cost.getFlops());
      md.forwardFlops += flops;
      md.forwardBytes += static_cast<double>(cost.getBytesAccessed());
      // Fused attention and the experts are GEMMs too (tensor cores on a
      // GPU).
      if (isa<ir::graph::MatMulOp, ir::graph::AttentionOp, ir::graph::MoEOp>(
              op)) {
        md.matmulFlops += flops;
        md.matmulBytes += static_cast<double>(cost.getBytesAccessed());
      }
    }
    // A mixture-of-experts layer: what expert parallelism sends.
    if (auto moe = dyn_cast<ir::graph::MoEOp>(op)) {
      auto picks = cast<RankedTensorType>(moe.getIndices().getType());
      md.experts =
          cast<RankedTensorType>(moe.getGateUp().getType()).getDimSize(0);
      md.expertsPerToken = picks.getDimSize(1);
      md.routedBytes +=
          tensorBytes(moe.getInput().getType()) * md.expertsPerToken;
    }
    if (isConstant(&op))
      continue;
    for (Value r : op.getResults()) {
      int64_t b = tensorBytes(r.getType());
      md.activationBytes += b;
      md.peakTransientBytes = std::max(md.peakTransientBytes, b);
    }
  }

  // Parameters belong to the first module that reads them (a tied LM head
  // reuses the embedding's table without owning it twice), except that one
  // read by several layers is counted in each: exporters merge equal
  // tensors (dynamo's all-ones norm weights), the model has one per layer.
  for (BlockArgument arg : func.getArguments()) {
    auto kind = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  ir::graph::kKindAttr);
    if (!kind ||
        (kind.getValue() != ir::graph::kKindTrainable &&
         kind.getValue() != ir::graph::kKindConstant) ||
        arg.use_empty())
      continue;
    int first = static_cast<int>(n);
    llvm::SmallDenseSet<int> layers;
    std::set<int> readers;
    for (Operation *user : arg.getUsers()) {
      int m = chain->moduleOfOp(user);
      first = std::min(first, m);
      readers.insert(m);
      if (desc.modules[m].role == plan::ModuleRole::Layer)
        layers.insert(m);
    }
    if (layers.size() < 2)
      layers = {first};
    auto type = cast<ShapedType>(arg.getType());
    // A tied parameter (read by several modules, not one copy per layer).
    if (layers.size() == 1 && readers.size() > 1 &&
        kind.getValue() == ir::graph::kKindTrainable)
      desc.sharedParams.push_back(
          {valueName(arg), type.getNumElements(),
           std::vector<int>(readers.begin(), readers.end())});
    // The experts' weights: what graph.moe alone reads as gate_up or down.
    bool experts = llvm::all_of(arg.getUses(), [&](OpOperand &use) {
      return isa<ir::graph::MoEOp>(use.getOwner()) &&
             use.getOperandNumber() >= 3;
    });
    for (int m : layers) {
      desc.modules[m].params += type.getNumElements();
      desc.modules[m].paramBytes += tensorBytes(type);
      if (experts)
        desc.modules[m].expertParams += type.getNumElements();
    }
  }

  // Chain traffic: a non-shared value produced in module m and read up to
  // module u is handed m -> m+1 -> ... -> u (forwarded through the ranks
  // between). Inputs that only the first module reads are not traffic.
  llvm::DenseSet<Value> shared(chain->sharedValues.begin(),
                               chain->sharedValues.end());
  auto account = [&](Value v, int from) {
    int last = from;
    for (Operation *user : v.getUsers())
      if (!isa<func::ReturnOp>(user))
        last = std::max(last, chain->moduleOfOp(user));
    int64_t b = tensorBytes(v.getType());
    for (int m = from; m < last; ++m) {
      desc.modules[m].outputBytes += b;
      desc.modules[m + 1].inputBytes += b;
    }
  };
  for (Operation &op : func.getBody().front().without_terminator())
    if (!isConstant(&op))
      for (Value r : op.getResults())
        if (!shared.contains(r))
          account(r, chain->moduleOfOp(&op));

  for (Value v : chain->sharedValues)
    desc.sharedInputs.push_back(valueName(v));

  // The residual width: the last dim of what the first layer hands on.
  for (Operation &op : func.getBody().front().without_terminator()) {
    int m = chain->moduleOfOp(&op);
    if (desc.modules[m].role != plan::ModuleRole::Layer || isConstant(&op))
      continue;
    for (Value r : op.getResults()) {
      if (shared.contains(r))
        continue;
      bool crosses = llvm::any_of(r.getUsers(), [&](Operation *u) {
        return chain->moduleOfOp(u) > m && !isa<func::ReturnOp>(u);
      });
      auto type = dyn_cast<RankedTensorType>(r.getType());
      if (crosses && type && type.getRank() >= 1 &&
          isa<FloatType>(type.getElementType()))
        desc.hidden = type.getShape().back();
    }
    if (desc.hidden)
      break;
  }
  return desc;
}
