//===- StepIR.cpp - step functions to and from schedule calls -------------===//

#include "lamina/Dialect/Rt/Transforms/StepIR.h"

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"

#include <optional>
#include <set>

using namespace mlir;
namespace sch = lamina::schedule;

namespace lamina::ir::rt {

bool isStepFunction(func::FuncOp f) { return f->hasAttr(kStepPpAttr); }

Callees calleesOf(ModuleOp module) {
  Callees out;
  for (auto f : module.getOps<func::FuncOp>()) {
    auto outlined = f->getAttrOfType<ir::dist::OutlinedAttr>(
        ir::dist::DistDialect::kOutlinedAttr);
    if (!outlined)
      continue;
    if (f.getName().starts_with("fwd_") || f.getName().starts_with("bwd_"))
      out[f.getName().str()] = {outlined.getModule(),
                                f.getName().starts_with("bwd_")};
  }
  return out;
}

namespace {
/// The call kind an rt.step_* op names (`rt.step_<callKindName>`; calls
/// and the optimizer have their own ops).
std::optional<sch::CallKind> kindOfName(StringRef name) {
  if (!name.consume_front("rt.step_"))
    return std::nullopt;
  for (int k = 0; k <= int(sch::CallKind::WaitSharedGather); ++k)
    if (name == sch::callKindName(sch::CallKind(k)))
      return sch::CallKind(k);
  return std::nullopt;
}
} // namespace

FailureOr<StepOps> readStep(func::FuncOp f, const Callees *callees) {
  StepOps out;
  for (Operation &op : f.getBody().front().without_terminator()) {
    sch::StepCall c;
    if (auto call = dyn_cast<StepCallOp>(op)) {
      c.microBatch = int(call.getMb());
      if (callees) {
        auto it = callees->find(call.getCallee().str());
        if (it == callees->end())
          return call.emitError("@")
                 << call.getCallee()
                 << " is no outlined module function of this program";
        c.module = int(it->second.first);
        c.kind = it->second.second ? sch::CallKind::Backward
                                   : sch::CallKind::Forward;
      }
    } else if (isa<StepOptimizerOp>(op)) {
      c.kind = sch::CallKind::OptimizerStep;
    } else if (std::optional<sch::CallKind> kind =
                   kindOfName(op.getName().getStringRef())) {
      // The fields by their attributes: a transfer's, a module's, a shared
      // parameter's.
      auto i = [&](StringRef name) {
        return int(op.getAttrOfType<IntegerAttr>(name).getInt());
      };
      c.kind = *kind;
      if (op.hasAttr("boundary")) {
        c.payload = op.hasAttr("gradient") ? sch::Payload::ActivationGrad
                                           : sch::Payload::Activation;
        c.module = i("boundary");
        c.microBatch = i("mb");
        c.peer = i("peer");
      } else if (op.hasAttr("module")) {
        c.module = i("module");
      } else if (auto param = op.getAttrOfType<StringAttr>("param")) {
        c.name = param.str();
      }
    } else {
      return op.emitError("is no step op: a step function holds rt.step_* "
                          "ops only");
    }
    out.ops.push_back(&op);
    out.calls.push_back(c);
  }
  return out;
}

Operation *buildStepOp(OpBuilder &b, Location loc, Value state,
                       const sch::StepCall &c, FlatSymbolRefAttr callee) {
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
  UnitAttr grad =
      c.payload == sch::Payload::ActivationGrad ? b.getUnitAttr() : UnitAttr();
  int k = c.module, j = c.microBatch;
  switch (c.kind) {
  case sch::CallKind::Forward:
  case sch::CallKind::Backward:
    return StepCallOp::create(b, loc, state, callee, i64(j), IntegerAttr(),
                              IntegerAttr(), IntegerAttr(), IntegerAttr());
  case sch::CallKind::Send:
    return StepSendOp::create(b, loc, state, grad, i64(k), i64(j), i64(c.peer),
                              IntegerAttr());
  case sch::CallKind::PostRecv:
    return StepPostRecvOp::create(b, loc, state, grad, i64(k), i64(j),
                                  i64(c.peer), IntegerAttr());
  case sch::CallKind::Recv:
    return StepRecvOp::create(b, loc, state, grad, i64(k), i64(j), i64(c.peer),
                              IntegerAttr());
  case sch::CallKind::WaitSend:
    return StepWaitSendOp::create(b, loc, state, grad, i64(k), i64(j),
                                  i64(c.peer));
  case sch::CallKind::AllGather:
    return StepAllGatherOp::create(b, loc, state, i64(k), IntegerAttr());
  case sch::CallKind::ReduceScatter:
    return StepReduceScatterOp::create(b, loc, state, i64(k), IntegerAttr(),
                                       IntegerAttr());
  case sch::CallKind::AllReduce:
    return StepAllReduceOp::create(b, loc, state, i64(k));
  case sch::CallKind::WaitGradients:
    return StepWaitGradientsOp::create(b, loc, state, i64(k));
  case sch::CallKind::Accumulate:
    return StepAccumulateOp::create(b, loc, state, i64(k), IntegerAttr());
  case sch::CallKind::UseWeights:
    return StepUseWeightsOp::create(b, loc, state, i64(k));
  case sch::CallKind::OptimizerStep:
    return StepOptimizerOp::create(b, loc, state);
  case sch::CallKind::WaitWeights:
    return StepWaitWeightsOp::create(b, loc, state, i64(k));
  case sch::CallKind::SumShared:
    return StepSumSharedOp::create(b, loc, state, c.name);
  case sch::CallKind::WaitSharedSum:
    return StepWaitSharedSumOp::create(b, loc, state, c.name);
  case sch::CallKind::GatherShared:
    return StepGatherSharedOp::create(b, loc, state, c.name);
  case sch::CallKind::WaitSharedGather:
    return StepWaitSharedGatherOp::create(b, loc, state, c.name);
  }
  return nullptr;
}

void applyEdits(func::FuncOp f, const StepOps &step,
                const std::vector<sch::StepEdit> &edits) {
  Operation *end = f.getBody().front().getTerminator();
  Value state = f.getArgument(0);
  OpBuilder b(f.getContext());
  for (const sch::StepEdit &e : edits) {
    Operation *before = e.before < step.ops.size() ? step.ops[e.before] : end;
    if (e.from >= 0) {
      step.ops[size_t(e.from)]->moveBefore(before);
      continue;
    }
    b.setInsertionPoint(before);
    buildStepOp(b, before->getLoc(), state, e.call);
  }
}

/// Calls f(module, forward, argument index, name) for every named argument
/// of every module's forward.
template <typename F> static void forEachForwardArg(ModuleOp module, F &&f) {
  for (auto fwd : module.getOps<func::FuncOp>()) {
    auto outlined = fwd->getAttrOfType<ir::dist::OutlinedAttr>(
        ir::dist::DistDialect::kOutlinedAttr);
    if (!outlined || !fwd.getName().starts_with("fwd_"))
      continue;
    int k = int(outlined.getModule());
    for (unsigned i = 0; i < fwd.getNumArguments(); ++i)
      if (auto name = fwd.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr))
        f(k, fwd, i, name.str());
  }
}

std::map<std::string, std::vector<int>> readersOf(ModuleOp module) {
  std::map<std::string, std::vector<int>> readers;
  forEachForwardArg(
      module, [&](int k, func::FuncOp f, unsigned i, const std::string &name) {
        auto kind = f.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
        if (kind && kind.getValue() == ir::graph::kKindTrainable)
          readers[name].push_back(k);
      });
  return readers;
}

std::map<std::string, std::pair<int, int64_t>> expertBlocksOf(ModuleOp module) {
  std::map<std::string, std::pair<int, int64_t>> out;
  forEachForwardArg(
      module, [&](int k, func::FuncOp f, unsigned i, const std::string &name) {
        if (auto ranks =
                f.getArgAttrOfType<IntegerAttr>(i, ir::graph::kEpSplitAttr))
          out[name] = {k, ranks.getInt()};
      });
  return out;
}

/// Bytes of a tensor or memref type (its element type's bytes, rounded up).
static int64_t bytesOf(Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || !shaped.hasStaticShape())
    return -1;
  return shaped.getNumElements() *
         int64_t((shaped.getElementTypeBitWidth() + 7) / 8);
}

FailureOr<sch::StepBufferSizes> stepBufferSizes(ModuleOp module, int numModules,
                                                int zero, int dp, bool padded,
                                                std::vector<int64_t> &flat) {
  std::map<std::string, std::vector<int>> readers = readersOf(module);
  sch::StepBufferSizes sizes;
  sizes.activation.assign(size_t(numModules), 0);
  sizes.gradient.assign(size_t(numModules), 0);
  sizes.residual.assign(size_t(numModules), 0);
  // Per module: its flat parameters' elements, and the copies' bytes per
  // element when its functions read copies.
  flat.assign(size_t(numModules), 0);
  std::vector<int64_t> copyWidth(size_t(numModules), 0);
  std::set<std::pair<int64_t, std::string>> counted; // once per module
  for (auto f : module.getOps<func::FuncOp>()) {
    auto outlined = f->getAttrOfType<ir::dist::OutlinedAttr>(
        ir::dist::DistDialect::kOutlinedAttr);
    if (!outlined)
      continue;
    int64_t k = outlined.getModule();
    int64_t numOut = outlined.getNumOut();
    bool bwd = f.getName().starts_with("bwd_");
    if (k < 0 || k >= numModules || (!bwd && !f.getName().starts_with("fwd_")))
      return f.emitError("@") << f.getName() << " is no module function of the "
                              << numModules << "-module chain";
    TypeRange types = bwd ? f.getFunctionType().getInputs()
                          : f.getFunctionType().getResults();
    if (int64_t(types.size()) < numOut)
      return f.emitError("@")
             << f.getName() << " has fewer " << (bwd ? "arguments" : "results")
             << " than its " << numOut << " boundary values";
    // Forward: [boundary outputs, residuals]; backward: [..., cotangents].
    std::vector<int64_t> first, rest;
    TypeRange boundary = bwd ? types.take_back(size_t(numOut))
                             : types.take_front(size_t(numOut));
    for (Type t : boundary)
      first.push_back(bytesOf(t));
    if (!bwd)
      for (Type t : types.drop_front(size_t(numOut)))
        rest.push_back(bytesOf(t));
    if (llvm::is_contained(first, -1) || llvm::is_contained(rest, -1))
      return f.emitError("@")
             << f.getName()
             << "'s boundary or residual values have no static size";
    if (k < numModules - 1)
      (bwd ? sizes.gradient : sizes.activation)[size_t(k)] =
          sch::packedBytes(first);
    if (!bwd)
      sizes.residual[size_t(k)] = sch::packedBytes(rest);
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto kind = f.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
      auto name = f.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr);
      auto type = dyn_cast<ShapedType>(f.getArgument(i).getType());
      if (!kind || !name || !type)
        continue;
      auto it = readers.find(name.str());
      std::set<int> distinct;
      if (it != readers.end())
        distinct.insert(it->second.begin(), it->second.end());
      // Shared (kept whole) and split experts (each replica's block) are
      // held outside the layout.
      if (distinct.size() > 1 || f.getArgAttr(i, ir::graph::kEpSplitAttr))
        continue;
      if (kind.getValue() == ir::graph::kKindTrainable && !bwd &&
          counted.insert({k, name.str()}).second)
        flat[size_t(k)] += type.getNumElements();
      else if (kind.getValue() == ir::graph::kKindParamCopy)
        copyWidth[size_t(k)] = (type.getElementTypeBitWidth() + 7) / 8;
    }
  }
  if (zero >= 2) {
    sizes.fullGradient.assign(size_t(numModules), 0);
    sizes.gradientPart.assign(size_t(numModules), 0);
    sizes.gathered.assign(size_t(numModules), 0);
    for (int k = 0; k < numModules; ++k) {
      sch::ShardCapacity cap = sch::shardCapacity(flat[size_t(k)], dp, padded);
      sizes.fullGradient[size_t(k)] = cap.full * 4;
      sizes.gradientPart[size_t(k)] = cap.shard * 4;
      if (zero == 3)
        sizes.gathered[size_t(k)] =
            cap.full * (copyWidth[size_t(k)] ? copyWidth[size_t(k)] : 4);
    }
  }
  return sizes;
}

} // namespace lamina::ir::rt
