//===- StepFunctions.cpp - rt step functions to EmitC ---------------------===//

#include "StepFunctions.h"

#include "lamina/Dialect/Rt/IR/RtOps.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cctype>
#include <set>
#include <tuple>
#include <type_traits>

using namespace mlir;
using namespace lamina;

namespace {

/// A transfer's identity within a directed pair.
using Tag = std::tuple<bool, int64_t, int64_t>; // gradient, boundary, mb

class StepLowering {
public:
  StepLowering(ModuleOp module,
               const std::map<std::string, std::pair<int64_t, bool>> &callees)
      : ctx(module.getContext()), callees(callees) {}

  /// `f`'s emitc twin, built before it; `f` is left for the caller.
  LogicalResult lower(func::FuncOp f, int64_t p) {
    OpBuilder b(f);
    Type state = emitc::PointerType::get(
        emitc::OpaqueType::get(ctx, "lamina::rt::StepState"));
    auto fn = emitc::FuncOp::create(b, f.getLoc(), f.getName(),
                                    b.getFunctionType({state}, {}));
    fn.setSpecifiersAttr(b.getStrArrayAttr({"static"}));
    Block *body = fn.addEntryBlock();
    OpBuilder eb = OpBuilder::atBlockEnd(body);
    Value s = body->getArgument(0);
    auto num = [&](int64_t v) -> Attribute {
      return emitc::OpaqueAttr::get(ctx, std::to_string(v));
    };
    auto call = [&](Location loc, StringRef callee, ArrayRef<Attribute> rest) {
      SmallVector<Attribute> args = {eb.getIndexAttr(0)};
      args.append(rest.begin(), rest.end());
      emitc::CallOpaqueOp::create(eb, loc, TypeRange{},
                                  ("lamina::rt::step::" + callee).str(),
                                  ValueRange{s}, eb.getArrayAttr(args));
    };
    for (Operation &op : f.getBody().front().without_terminator()) {
      Location loc = op.getLoc();
      std::string callee = calleeOf(&op);
      LogicalResult r =
          llvm::TypeSwitch<Operation *, LogicalResult>(&op)
              .Case([&](ir::rt::StepCallOp c) -> LogicalResult {
                auto it = callees.find(c.getCallee().str());
                if (it == callees.end())
                  return c.emitError("convert-rt-to-emitc: @")
                         << c.getCallee() << " is not an outlined module "
                         << "function of this program";
                bool bwd = it->second.second;
                // Step-buffer offsets, -1 where the call has none.
                auto at = [&](std::optional<int64_t> offset) {
                  return num(offset ? *offset : -1);
                };
                SmallVector<Attribute> args = {num(it->second.first),
                                               num(c.getMb()), at(c.getInput()),
                                               at(c.getResiduals())};
                if (bwd)
                  args.push_back(at(c.getCotangent()));
                args.push_back(at(c.getOutput()));
                call(loc, bwd ? "backward" : "forward", args);
                return success();
              })
              .Case<ir::rt::StepSendOp, ir::rt::StepPostRecvOp,
                    ir::rt::StepRecvOp,
                    ir::rt::StepWaitSendOp>([&](auto t) -> LogicalResult {
                Tag tag{t.getGradient(), t.getBoundary(), t.getMb()};
                if (isa<ir::rt::StepSendOp>(&op))
                  sent[{p, t.getPeer()}].push_back(tag);
                else if (isa<ir::rt::StepRecvOp>(&op))
                  received[{t.getPeer(), p}].push_back(tag);
                SmallVector<Attribute> args = {
                    emitc::OpaqueAttr::get(
                        ctx, t.getGradient()
                                 ? "lamina::rt::step::Payload::Gradient"
                                 : "lamina::rt::step::Payload::Activation"),
                    num(t.getBoundary()), num(t.getMb()), num(t.getPeer())};
                if constexpr (!std::is_same_v<decltype(t),
                                              ir::rt::StepWaitSendOp>) {
                  if (!t.getOffset())
                    return t.emitError("convert-rt-to-emitc: the transfer "
                                       "has no step-buffer offset (run "
                                       "rt-plan-step-buffers)");
                  args.push_back(num(*t.getOffset()));
                }
                call(loc, callee, args);
                return success();
              })
              .Case<ir::rt::StepAllReduceOp, ir::rt::StepUseWeightsOp,
                    ir::rt::StepWaitGradientsOp, ir::rt::StepWaitWeightsOp>(
                  [&](auto c) {
                    call(loc, callee, {num(c.getModule())});
                    return success();
                  })
              // ZeRO's step-buffer offsets, -1 where the call has none.
              .Case<ir::rt::StepAllGatherOp, ir::rt::StepAccumulateOp>(
                  [&](auto c) {
                    call(loc, callee,
                         {num(c.getModule()), num(c.getOffset().value_or(-1))});
                    return success();
                  })
              .Case([&](ir::rt::StepReduceScatterOp c) {
                call(loc, callee,
                     {num(c.getModule()), num(c.getFull().value_or(-1)),
                      num(c.getPart().value_or(-1))});
                return success();
              })
              .Case<ir::rt::StepSumSharedOp, ir::rt::StepWaitSharedSumOp,
                    ir::rt::StepGatherSharedOp, ir::rt::StepWaitSharedGatherOp>(
                  [&](auto c) {
                    call(loc, callee,
                         {emitc::OpaqueAttr::get(ctx, cString(c.getParam()))});
                    return success();
                  })
              .Case([&](ir::rt::StepOptimizerOp) {
                call(loc, callee, {});
                return success();
              })
              .Default([&](Operation *other) {
                return other->emitError("convert-rt-to-emitc: ")
                       << other->getName() << " in a step function";
              });
      if (failed(r))
        return failure();
    }
    emitc::ReturnOp::create(eb, f.getLoc(), Value());
    return success();
  }

  /// Per directed pair, the transfers in the sender's order and the
  /// receiver's (one program at a time).
  std::map<std::pair<int64_t, int64_t>, std::vector<Tag>> sent, received;

private:
  /// The step library function an rt.step_* op calls: the op's name after
  /// `rt.step_`, in camelCase (`rt.step_wait_shared_sum`: waitSharedSum).
  static std::string calleeOf(Operation *op) {
    StringRef name = op->getName().stripDialect();
    name.consume_front("step_");
    std::string out;
    for (size_t i = 0; i < name.size(); ++i)
      out += name[i] == '_' && i + 1 < name.size()
                 ? char(std::toupper(static_cast<unsigned char>(name[++i])))
                 : name[i];
    return out;
  }

  MLIRContext *ctx;
  const std::map<std::string, std::pair<int64_t, bool>> &callees;
};

} // namespace

FailureOr<StepFunctions> lamina::lowerStepFunctions(
    ModuleOp module,
    const std::map<std::string, std::pair<int64_t, bool>> &callees, int64_t pp,
    bool cuda) {
  StepFunctions out;
  out.train.resize(size_t(pp));
  out.eval.resize(size_t(pp));
  out.trainBytes.assign(size_t(pp), 0);
  out.evalBytes.assign(size_t(pp), 0);
  std::set<std::pair<int64_t, int64_t>> edges;
  for (bool eval : {false, true}) {
    StepLowering lowering(module, callees);
    SmallVector<func::FuncOp> steps;
    for (auto f : module.getOps<func::FuncOp>())
      if (f->hasAttr("rt.step_pp") && f->hasAttr("rt.forward_only") == eval)
        steps.push_back(f);
    for (func::FuncOp f : steps) {
      int64_t p = f->getAttrOfType<IntegerAttr>("rt.step_pp").getInt();
      std::vector<std::string> &names = eval ? out.eval : out.train;
      if (p < 0 || p >= pp || !names[size_t(p)].empty())
        return f.emitError("convert-rt-to-emitc: step function @")
               << f.getName() << " has pipeline rank " << p
               << ", out of range or repeated (pp = " << pp << ")";
      auto bytes = f->getAttrOfType<IntegerAttr>("rt.step_buffer_bytes");
      if (!bytes || bytes.getInt() < 0)
        return f.emitError("convert-rt-to-emitc: step function @")
               << f.getName()
               << " has no rt.step_buffer_bytes (run rt-plan-step-buffers)";
      if (failed(lowering.lower(f, p)))
        return failure();
      names[size_t(p)] = f.getName().str();
      (eval ? out.evalBytes : out.trainBytes)[size_t(p)] = bytes.getInt();
      f.erase();
    }
    std::vector<std::string> &names = eval ? out.eval : out.train;
    bool any = llvm::any_of(names, [](auto &n) { return !n.empty(); });
    if ((any || !eval) &&
        llvm::any_of(names, [](auto &n) { return n.empty(); }))
      return mlir::emitError(module.getLoc(), "convert-rt-to-emitc: the ")
             << (eval ? "evaluation" : "training")
             << " step lacks a pipeline rank's function (run "
                "convert-dist-to-rt)";
    if (!any) {
      names.clear();
      out.evalBytes.clear();
    }
    for (const auto &[edge, tags] : lowering.sent) {
      edges.insert(edge);
      if (cuda && lowering.received[edge] != tags)
        return mlir::emitError(module.getLoc(), "convert-rt-to-emitc: the ")
               << (eval ? "evaluation" : "training")
               << " step sends from pipeline rank " << edge.first
               << " to pipeline rank " << edge.second
               << " in another order than they are received; NCCL matches "
                  "transfers in order (compile this schedule for the host)";
    }
  }
  out.edges.assign(edges.begin(), edges.end());
  return out;
}
