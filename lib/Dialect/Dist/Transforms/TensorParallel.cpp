//===- TensorParallel.cpp - each module's layers split over t ranks -------===//
//
// See the pass description in Passes.td (dist-tp-plan): the column/row
// pairs found from the dataflow of each module's forward, seeded on their
// weights, propagated by upstream's sharding-propagation over the graph
// ops' ShardingInterface models, and the forward's choices copied onto its
// backward, so that upstream's shard-partition gives both functions one
// rank's SPMD form with matching residuals. docs/tp-design.md.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/ModuleFunctions.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Regex.h"

#include <map>
#include <numeric>
#include <optional>

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTTPPLAN
#define GEN_PASS_DEF_DISTTPCOMBINESUMS
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;
namespace shard = mlir::shard;

namespace {

constexpr llvm::StringLiteral kGrid = "tp";

StringRef argString(func::FuncOp f, unsigned i, StringRef attr) {
  auto s = f.getArgAttrOfType<StringAttr>(i, attr);
  return s ? s.getValue() : StringRef();
}

/// The trainable matrix a GEMM's right operand reads (through 2-D
/// transposes, casts and sharding annotations), and which of its dims is the
/// product's output dim; none for activations times activations (attention's
/// products).
struct WeightUse {
  BlockArgument arg;
  int64_t outDim;
};

std::optional<WeightUse> weightOf(ir::graph::MatMulOp mm, func::FuncOp f,
                                  bool residualsToo = false) {
  Value v = mm.getRhs();
  int64_t outDim = 1;
  while (Operation *def = v.getDefiningOp()) {
    if (auto t = dyn_cast<ir::graph::TransposeOp>(def)) {
      if (t.getPerm().size() != 2 || t.getPerm()[0] != 1)
        return std::nullopt;
      outDim = 1 - outDim;
      v = t.getInput();
    } else if (auto c = dyn_cast<ir::graph::CastOp>(def)) {
      v = c.getInput();
    } else if (auto ann = dyn_cast<shard::ShardOp>(def)) {
      v = ann.getSrc();
    } else {
      return std::nullopt;
    }
  }
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &f.getBody().front() ||
      cast<RankedTensorType>(arg.getType()).getRank() != 2)
    return std::nullopt;
  StringRef kind = argString(f, arg.getArgNumber(), "graph.kind");
  if (kind != "trainable" && !(residualsToo && kind == "residual"))
    return std::nullopt;
  return WeightUse{arg, outDim};
}

/// Ops a split last (or heads) dim passes through unchanged in meaning:
/// the elementwise ops (those the elementwise fusion takes), casts, the
/// layout ops and attention.
bool carriesSplit(Operation *op) {
  return !ir::graph::FusedElementwiseOp::stepOf(op).empty() ||
         isa<ir::graph::ReshapeOp, ir::graph::TransposeOp, ir::graph::SliceOp,
             ir::graph::ConcatOp, ir::graph::AttentionOp, ir::graph::CastOp>(
             op);
}

/// Where `gemm`'s output goes: the GEMMs whose contraction it reaches
/// (through ops that carry a split) and whether it reaches the loss's
/// logits; failure where something else stops it (a norm, the module's
/// boundary output). Residual outputs are fine: the backward reads them
/// split.
LogicalResult pairedGemms(ir::graph::MatMulOp gemm,
                          const llvm::DenseSet<Operation *> &weightGemms,
                          unsigned numBoundaryOut,
                          llvm::SetVector<Operation *> &rows, bool &toLoss,
                          llvm::SetVector<Operation *> &attentions) {
  SmallVector<Value> work{gemm.getResult()};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isa<func::ReturnOp>(user)) {
        if (use.getOperandNumber() < numBoundaryOut)
          return failure();
        continue;
      }
      if (weightGemms.contains(user) && use.getOperandNumber() == 0) {
        rows.insert(user);
        continue;
      }
      // The LM head's logits: the cross-entropy splits over the vocabulary.
      if (isa<ir::graph::SoftmaxCrossEntropyOp>(user) &&
          use.getOperandNumber() == 0) {
        toLoss = true;
        continue;
      }
      if (!carriesSplit(user))
        return failure();
      if (isa<ir::graph::AttentionOp>(user))
        attentions.insert(user);
      for (Value r : user->getResults())
        work.push_back(r);
    }
  }
  return success();
}

shard::Sharding splitOn(MLIRContext *ctx, int64_t dim) {
  SmallVector<shard::GridAxesAttr> axes(size_t(dim + 1),
                                        shard::GridAxesAttr::get(ctx, {}));
  axes.back() = shard::GridAxesAttr::get(ctx, {0});
  return shard::Sharding::get(FlatSymbolRefAttr::get(ctx, kGrid), axes);
}

shard::Sharding replicated(MLIRContext *ctx) {
  return shard::Sharding::get(FlatSymbolRefAttr::get(ctx, kGrid),
                              {shard::GridAxesAttr::get(ctx, {})});
}

/// Sequence parallelism's layout of a [batch, sequence, ...] value.
constexpr int64_t kSequenceDim = 1;

bool sequenceShaped(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getRank() >= 2;
}

/// How a boundary value (or its gradient) is laid out: split on the
/// sequence under sequence parallelism, else whole.
shard::Sharding boundaryLayout(MLIRContext *ctx, Value v, bool sequence) {
  return sequence && sequenceShaped(v) ? splitOn(ctx, kSequenceDim)
                                       : replicated(ctx);
}

bool isSplit(const shard::Sharding &s) {
  return llvm::any_of(s.getSplitAxes(), [](shard::GridAxesAttr a) {
    return !a.asArrayRef().empty();
  });
}

/// Pins argument `arg` to `sharding`: its readers read the annotation. An
/// unread argument is annotated for its (no) users, which upstream's
/// shard-partition needs to size it.
void annotateArg(OpBuilder &b, BlockArgument arg,
                 const shard::Sharding &sharding) {
  Location loc = arg.getLoc();
  Value s = shard::ShardingOp::create(b, loc, sharding);
  if (arg.use_empty()) {
    shard::ShardOp::create(b, loc, arg, s, /*annotate_for_users=*/true);
    return;
  }
  auto pinned = shard::ShardOp::create(b, loc, arg, s);
  arg.replaceAllUsesExcept(pinned.getResult(), pinned);
}

/// Result `i` of `ret` returned with `sharding`: partition inserts the
/// collective that makes its value so (a partial sum all-reduced).
void annotateResult(OpBuilder &b, func::ReturnOp ret, unsigned i,
                    const shard::Sharding &sharding) {
  b.setInsertionPoint(ret);
  Value v = ret.getOperand(i);
  Value s = shard::ShardingOp::create(b, ret.getLoc(), sharding);
  auto use = shard::ShardOp::create(b, ret.getLoc(), v, s,
                                    /*annotate_for_users=*/true);
  ret.setOperand(i, use.getResult());
}

/// The sharding propagation chose for `v`: its annotation, or that of
/// the annotation its readers read; replicated when it has none.
shard::Sharding shardingOf(Value v) {
  if (auto def = v.getDefiningOp<shard::ShardOp>())
    return shard::Sharding(def.getSharding());
  for (Operation *user : v.getUsers())
    if (auto ann = dyn_cast<shard::ShardOp>(user))
      return shard::Sharding(ann.getSharding());
  return replicated(v.getContext());
}

/// The values partition reads a sharding for: tensors of rank 1 or more.
bool annotated(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getRank() > 0;
}

/// Completes what propagation left unannotated (ops it does not visit,
/// such as an embedding's gather with nothing split around it; arguments
/// read by several annotations) in partition's form: each argument pinned
/// once (as its readers read it), each result of an op left unannotated
/// read through its own annotation (whole), each operand through one for
/// its reader (as its producer has it).
void completeAnnotations(func::FuncOp f) {
  MLIRContext *ctx = f.getContext();
  OpBuilder b(ctx);
  auto pinned = [](Value v) {
    auto ann = v.hasOneUse() ? dyn_cast<shard::ShardOp>(*v.getUsers().begin())
                             : shard::ShardOp();
    return ann && !ann.getAnnotateForUsers();
  };
  b.setInsertionPointToStart(&f.getBody().front());
  for (BlockArgument arg : f.getArguments())
    if (annotated(arg) &&
        !(arg.hasOneUse() && isa<shard::ShardOp>(*arg.getUsers().begin())))
      annotateArg(b, arg, shardingOf(arg));
  SmallVector<Operation *> ops;
  f.walk([&](Operation *op) {
    if (!isa<shard::ShardOp, shard::ShardingOp, func::FuncOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    for (OpResult r : op->getResults()) {
      // An unread result (attention's lse when the backward recomputes)
      // stays unannotated: the op's model splits it as its loops are.
      if (!annotated(r) || r.use_empty() || pinned(r) ||
          op->hasTrait<OpTrait::ConstantLike>())
        continue;
      b.setInsertionPointAfter(op);
      // Whole, as the op computes it unannotated; a reader that wants it
      // split slices it.
      Value s = shard::ShardingOp::create(b, op->getLoc(), replicated(ctx));
      auto pin = shard::ShardOp::create(b, op->getLoc(), r, s);
      r.replaceAllUsesExcept(pin.getResult(), pin);
    }
    for (OpOperand &use : op->getOpOperands()) {
      auto ann = use.get().getDefiningOp<shard::ShardOp>();
      if (!annotated(use.get()) || (ann && ann.getAnnotateForUsers()))
        continue;
      b.setInsertionPoint(op);
      shard::Sharding sh =
          ann ? shard::Sharding(ann.getSharding()) : replicated(ctx);
      Value s = shard::ShardingOp::create(b, op->getLoc(), sh);
      auto read = shard::ShardOp::create(b, op->getLoc(), use.get(), s,
                                         /*annotate_for_users=*/true);
      use.set(read.getResult());
    }
  }
}

/// Each split argument's dim as `graph.tp_split`, which the runtime reads
/// to load a weight's block (shard-partition leaves only the shard's type).
void recordSplits(func::FuncOp f) {
  for (BlockArgument arg : f.getArguments()) {
    if (!annotated(arg))
      continue;
    ArrayRef<shard::GridAxesAttr> axes = shardingOf(arg).getSplitAxes();
    for (auto [dim, a] : llvm::enumerate(axes))
      if (!a.asArrayRef().empty())
        f.setArgAttr(arg.getArgNumber(), ir::graph::kTpSplitAttr,
                     IntegerAttr::get(IntegerType::get(f.getContext(), 64),
                                      int64_t(dim)));
  }
}

/// `v` with its dim `dim` read as [a, b, rest] and stored as [b, a, rest]:
/// relayout(v, d, parts, t) is graph-tp-regroup-projections' layout of an
/// initializer, relayout(v, d, t, parts) the way back.
Value relayout(OpBuilder &b, Location loc, Value v, int64_t dim, int64_t a,
               int64_t bParts) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> view(type.getShape().take_front(dim));
  view.append({a, bParts, type.getDimSize(dim) / (a * bParts)});
  view.append(type.getShape().drop_front(dim + 1).begin(),
              type.getShape().drop_front(dim + 1).end());
  SmallVector<int64_t> perm(view.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[size_t(dim)], perm[size_t(dim) + 1]);
  Type element = type.getElementType();
  Value x = ir::graph::ReshapeOp::create(
      b, loc, RankedTensorType::get(view, element), v);
  x = ir::graph::TransposeOp::create(b, loc, x, b.getDenseI64ArrayAttr(perm));
  return ir::graph::ReshapeOp::create(b, loc, type, x);
}

/// A regrouped projection the plan keeps whole reads the initializer's
/// layout again: its argument (in `f`, and in the backward `bwd`) is
/// regrouped where the function starts, and its gradient put back where
/// the backward returns it. One decision, dist-tp-plan's: the regrouping
/// pass need not guess which layers stay whole.
void undoRegroup(func::FuncOp fwd, func::FuncOp bwd, StringRef name,
                 int64_t dim, int64_t parts, int64_t t) {
  for (func::FuncOp f : {fwd, bwd}) {
    for (BlockArgument arg : f.getArguments()) {
      if (argString(f, arg.getArgNumber(), "graph.name") != name ||
          !f.getArgAttr(arg.getArgNumber(), ir::graph::kTpPartsAttr))
        continue;
      SmallVector<OpOperand *> uses;
      for (OpOperand &use : arg.getUses())
        uses.push_back(&use);
      OpBuilder b = OpBuilder::atBlockBegin(&f.getBody().front());
      Value regrouped = relayout(b, arg.getLoc(), arg, dim, parts, t);
      for (OpOperand *use : uses)
        use->set(regrouped);
      f.removeArgAttr(arg.getArgNumber(), ir::graph::kTpPartsAttr);
    }
  }
  auto ret = cast<func::ReturnOp>(bwd.getBody().front().getTerminator());
  auto names = bwd->getAttrOfType<ArrayAttr>("graph.output_names");
  for (unsigned i = 0; names && i < ret.getNumOperands() && i < names.size();
       ++i)
    if (cast<StringAttr>(names[i]).getValue() == ("grad:" + name).str()) {
      OpBuilder b(ret);
      ret.setOperand(
          i, relayout(b, ret.getLoc(), ret.getOperand(i), dim, t, parts));
    }
}

/// A fused projection stored regrouped for the group
/// (graph-tp-regroup-projections) must be split on the dim that holds its
/// parts: whole, its layout would not be the initializer's.
LogicalResult checkRegrouped(func::FuncOp f) {
  for (BlockArgument arg : f.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto parts =
        f.getArgAttrOfType<DenseI64ArrayAttr>(i, ir::graph::kTpPartsAttr);
    if (!parts)
      continue;
    auto dim = f.getArgAttrOfType<IntegerAttr>(i, ir::graph::kTpSplitAttr);
    if (!dim || dim.getInt() != parts[0])
      return f.emitError("dist-tp-plan: the fused projection '")
             << argString(f, i, "graph.name")
             << "' is stored as each rank's share of its parts, but the plan "
                "does not split it on them; keep this layer replicated";
  }
  return success();
}

/// What upstream's shard-partition (MLIR 22) needs and does not check (it
/// crashes instead): every tensor argument read by exactly one
/// `shard.shard`, every tensor operand of an op an annotation for its
/// users, every tensor result read only by its own annotation. Checked
/// here so that a plan partition cannot take is an error naming the op.
LogicalResult checkPartitionable(func::FuncOp f) {
  for (BlockArgument arg : f.getArguments())
    if (annotated(arg) &&
        (!arg.hasOneUse() || !isa<shard::ShardOp>(*arg.getUsers().begin())))
      return f.emitError("dist-tp-plan: argument ")
             << arg.getArgNumber()
             << " is not read through exactly one sharding annotation";
  WalkResult walk = f.walk([&](Operation *op) {
    if (isa<shard::ShardOp, shard::ShardingOp, func::FuncOp>(op) ||
        op->hasTrait<OpTrait::ConstantLike>())
      return WalkResult::advance();
    for (OpOperand &use : op->getOpOperands()) {
      auto ann = use.get().getDefiningOp<shard::ShardOp>();
      if (annotated(use.get()) && (!ann || !ann.getAnnotateForUsers())) {
        op->emitError("dist-tp-plan: operand ")
            << use.getOperandNumber() << " has no sharding for its users";
        return WalkResult::interrupt();
      }
    }
    for (OpResult r : op->getResults()) {
      if (!annotated(r) || r.use_empty())
        continue;
      auto ann = r.hasOneUse() ? dyn_cast<shard::ShardOp>(*r.getUsers().begin())
                               : shard::ShardOp();
      if (!ann || ann.getAnnotateForUsers()) {
        op->emitError("dist-tp-plan: result ")
            << r.getResultNumber() << " is not read through its own sharding";
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

struct DistTpPlan : ir::dist::impl::DistTpPlanBase<DistTpPlan> {
  using DistTpPlanBase::DistTpPlanBase;

  void runOnOperation() override {
    if (tp <= 1)
      return;
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    if (!module.lookupSymbol(kGrid)) {
      OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
      shard::GridOp::create(b, module.getLoc(), kGrid,
                            ArrayRef<int64_t>{int64_t(tp)});
    }
    for (auto &[k, pair] : ir::dist::moduleFunctions(module)) {
      auto [fwd, bwd] = pair;
      if (!fwd || !bwd) {
        module.emitError("dist-tp-plan: module ")
            << k << " has no forward/backward pair (run dist-outline-modules "
            << "first)";
        return signalPassFailure();
      }
      if (failed(planModule(ctx, fwd, bwd)))
        return signalPassFailure();
      // Expert parallelism's layers run whole on the group (ExpertSharding
      // splits the others' experts, planModule says so).
      fwd.walk([&](ir::graph::MoEDispatchOp op) {
        op->emitRemark("dist-tp-plan: the mixture-of-experts layer at ")
            << op->getLoc()
            << " runs whole on every tensor-parallel rank (its share of the "
               "experts, the all-to-alls over the rank's expert-parallel "
               "group)";
      });
    }
  }

  LogicalResult planModule(MLIRContext *ctx, func::FuncOp fwd,
                           func::FuncOp bwd) {
    auto outlined = fwd->getAttrOfType<ir::dist::OutlinedAttr>(
        ir::dist::DistDialect::kOutlinedAttr);
    if (!outlined)
      return fwd.emitError("dist-tp-plan: no dist.outlined");
    unsigned numOut = unsigned(outlined.getNumOut());

    // The GEMMs with a trainable right operand, then the column/row pairs.
    std::map<Operation *, WeightUse> weights;
    llvm::DenseSet<Operation *> weightGemms;
    fwd.walk([&](ir::graph::MatMulOp mm) {
      if (std::optional<WeightUse> w = weightOf(mm, fwd)) {
        weights.emplace(mm, *w);
        weightGemms.insert(mm);
      }
    });
    // Each candidate column GEMM with the rows and attention it reaches.
    struct Group {
      llvm::SetVector<Operation *> rows, attentions;
    };
    std::map<Operation *, Group> candidates;
    for (auto &[gemm, use] : weights) {
      Group g;
      bool toLoss = false;
      if (succeeded(pairedGemms(cast<ir::graph::MatMulOp>(gemm), weightGemms,
                                numOut, g.rows, toLoss, g.attentions)) &&
          (!g.rows.empty() || toLoss))
        candidates.emplace(gemm, std::move(g));
    }
    keepWhole(fwd, weights, candidates);
    llvm::SetVector<Operation *> columns, rows;
    for (auto &[gemm, g] : candidates) {
      columns.insert(gemm);
      rows.insert(g.rows.begin(), g.rows.end());
    }
    // A GEMM both reached and reaching (a chain of three) stays a row:
    // its input is split; its own output is then whole.
    columns.remove_if([&](Operation *g) { return rows.contains(g); });

    // Seeds: a column GEMM's weight split on its output dim, a row GEMM's
    // on its input dim. A weight read by GEMMs of both kinds is refused.
    std::map<unsigned, shard::Sharding> seeds;
    auto seed = [&](Operation *gemm, bool column) -> LogicalResult {
      const WeightUse &w = weights.at(gemm);
      int64_t dim = column ? w.outDim : 1 - w.outDim;
      shard::Sharding s = splitOn(ctx, dim);
      auto [it, fresh] = seeds.emplace(w.arg.getArgNumber(), s);
      if (!fresh && !(it->second == s))
        return gemm->emitError("dist-tp-plan: weight '")
               << argString(fwd, w.arg.getArgNumber(), "graph.name")
               << "' is read by a column- and a row-parallel GEMM; keep "
                  "this layer replicated";
      return success();
    };
    for (Operation *g : columns)
      if (failed(seed(g, true)))
        return failure();
    for (Operation *g : rows)
      if (failed(seed(g, false)))
        return failure();
    // The embedding: a table's rows (the vocabulary) split, as the tied LM
    // head's columns are.
    WalkResult tables = fwd.walk([&](ir::graph::GatherOp g) {
      auto arg = dyn_cast<BlockArgument>(g.getData());
      if (g.getAxis() != 0 || g.getPaddingIdx() || !arg ||
          arg.getOwner() != &fwd.getBody().front() ||
          argString(fwd, arg.getArgNumber(), "graph.kind") != "trainable" ||
          cast<RankedTensorType>(arg.getType()).getRank() != 2)
        return WalkResult::advance();
      shard::Sharding s = splitOn(ctx, 0);
      auto [it, fresh] = seeds.emplace(arg.getArgNumber(), s);
      if (!fresh && !(it->second == s)) {
        g->emitError("dist-tp-plan: embedding table '")
            << argString(fwd, arg.getArgNumber(), "graph.name")
            << "' is also read by a GEMM that splits it otherwise";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (tables.wasInterrupted())
      return failure();
    // A mixture-of-experts layer: its experts split over the group (each
    // rank E/t of them whole, ExpertSharding.cpp), unless --ep already
    // splits them over replicas (then every rank holds its replica's
    // block whole), --tp-replicate names them, or t does not divide E.
    WalkResult experts = fwd.walk([&](ir::graph::MoEOp moe) {
      SmallVector<BlockArgument> params;
      for (Value v : {moe.getGateUp(), moe.getDown()}) {
        auto arg = dyn_cast<BlockArgument>(v);
        if (!arg || arg.getOwner() != &fwd.getBody().front() ||
            argString(fwd, arg.getArgNumber(), "graph.kind") != "trainable" ||
            fwd.getArgAttr(arg.getArgNumber(), ir::graph::kEpSplitAttr))
          return WalkResult::advance();
        params.push_back(arg);
      }
      int64_t numExperts =
          cast<RankedTensorType>(moe.getGateUp().getType()).getDimSize(0);
      llvm::Regex named(replicate);
      bool replicated = llvm::any_of(params, [&](BlockArgument arg) {
        return !replicate.empty() &&
               named.match(argString(fwd, arg.getArgNumber(), "graph.name"));
      });
      if (numExperts % int64_t(tp) != 0 || replicated) {
        moe->emitRemark("dist-tp-plan: the mixture-of-experts layer at ")
            << moe->getLoc() << " runs whole on every tensor-parallel rank ("
            << (replicated ? "--tp-replicate names its experts"
                           : std::to_string(tp) + " ranks do not divide its " +
                                 std::to_string(numExperts) + " experts")
            << ")";
        return WalkResult::advance();
      }
      moe->emitRemark("dist-tp-plan: the mixture-of-experts layer at ")
          << moe->getLoc() << " splits its " << numExperts << " experts over "
          << unsigned(tp) << " tensor-parallel ranks (" << numExperts / tp
          << " each; every rank sees every token, and one all-reduce adds "
             "the experts' shares of each token)";
      shard::Sharding s = splitOn(ctx, 0);
      for (BlockArgument arg : params) {
        auto [it, fresh] = seeds.emplace(arg.getArgNumber(), s);
        if (!fresh && !(it->second == s)) {
          moe->emitError("dist-tp-plan: experts '")
              << argString(fwd, arg.getArgNumber(), "graph.name")
              << "' are also read by an op that splits them otherwise";
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (experts.wasInterrupted())
      return failure();

    // Regrouped projections the plan keeps whole go back to their
    // initializer's layout: a weight not seeded on its parts, a bias
    // added to no product of a weight that is.
    auto partsOf = [&](Value v) {
      auto arg = dyn_cast<BlockArgument>(v);
      return arg && arg.getOwner() == &fwd.getBody().front()
                 ? fwd.getArgAttrOfType<DenseI64ArrayAttr>(
                       arg.getArgNumber(), ir::graph::kTpPartsAttr)
                 : DenseI64ArrayAttr();
    };
    auto splitOnParts = [&](BlockArgument arg) {
      auto it = seeds.find(arg.getArgNumber());
      return it != seeds.end() && it->second == splitOn(ctx, partsOf(arg)[0]);
    };
    for (BlockArgument arg : fwd.getArguments()) {
      DenseI64ArrayAttr parts = partsOf(arg);
      if (!parts)
        continue;
      bool split = splitOnParts(arg);
      for (Operation *user : arg.getUsers())
        if (auto add = dyn_cast<ir::graph::AddOp>(user))
          for (Value side : add->getOperands())
            if (auto mm = side.getDefiningOp<ir::graph::MatMulOp>();
                mm && weights.count(mm) && partsOf(weights.at(mm).arg))
              split |= splitOnParts(weights.at(mm).arg);
      if (!split)
        undoRegroup(fwd, bwd, argString(fwd, arg.getArgNumber(), "graph.name"),
                    parts[0], parts[1], int64_t(tp));
    }

    // The forward: seeds pinned, the boundary outputs whole, then
    // propagation; its residuals keep what propagation chose.
    OpBuilder b = OpBuilder::atBlockBegin(&fwd.getBody().front());
    for (BlockArgument arg : fwd.getArguments()) {
      auto it = seeds.find(arg.getArgNumber());
      bool boundary =
          argString(fwd, arg.getArgNumber(), "graph.kind") == "boundary";
      if (it != seeds.end())
        annotateArg(b, arg, it->second);
      else if (boundary && sequenceParallel)
        annotateArg(b, arg, boundaryLayout(ctx, arg, true));
    }
    if (sequenceParallel) {
      auto seeded = [&](unsigned arg) {
        auto it = seeds.find(arg);
        return it != seeds.end() ? it->second : replicated(ctx);
      };
      embeddingsOnSequence(fwd, seeded);
      gatherColumnInputs(fwd, seeded);
    }
    // Propagated from the seeds forward first: a boundary output pinned
    // whole beforehand would pull the whole layer back to replicated.
    if (failed(propagate(fwd)))
      return failure();
    auto fwdRet = cast<func::ReturnOp>(fwd.getBody().front().getTerminator());
    for (unsigned i = 0; i < numOut; ++i)
      annotateResult(
          b, fwdRet, i,
          boundaryLayout(ctx, fwdRet.getOperand(i), sequenceParallel));
    std::map<std::string, shard::Sharding> named;
    for (BlockArgument arg : fwd.getArguments())
      named.emplace(argString(fwd, arg.getArgNumber(), "graph.name").str(),
                    shardingOf(arg));
    auto outNames = fwd->getAttrOfType<ArrayAttr>("graph.output_names");
    if (!outNames || outNames.size() != fwdRet.getNumOperands())
      return fwd.emitError("dist-tp-plan: no graph.output_names");
    for (unsigned i = numOut; i < fwdRet.getNumOperands(); ++i) {
      Value v = fwdRet.getOperand(i);
      shard::Sharding s = shardingOf(v);
      named.emplace(cast<StringAttr>(outNames[i]).str(), s);
      // Every returned value annotated for the return, as partition needs.
      if (!v.getDefiningOp<shard::ShardOp>() ||
          !v.getDefiningOp<shard::ShardOp>().getAnnotateForUsers())
        annotateResult(b, fwdRet, i, s);
    }

    // The backward: the same weights, the residuals as returned, the
    // rest (boundary values, cotangents, inputs) whole; each weight's
    // gradient as its weight, the boundary gradients whole.
    b.setInsertionPointToStart(&bwd.getBody().front());
    for (BlockArgument arg : bwd.getArguments()) {
      auto it =
          named.find(argString(bwd, arg.getArgNumber(), "graph.name").str());
      StringRef kind = argString(bwd, arg.getArgNumber(), "graph.kind");
      bool keep =
          it != named.end() && (kind == "trainable" || kind == "residual");
      bool boundary = kind == "boundary" || kind == "cotangent";
      annotateArg(b, arg,
                  keep       ? it->second
                  : boundary ? boundaryLayout(ctx, arg, sequenceParallel)
                             : replicated(ctx));
    }
    if (sequenceParallel) {
      auto seeded = [&](unsigned arg) {
        auto it = named.find(argString(bwd, arg, "graph.name").str());
        return it != named.end() ? it->second : replicated(ctx);
      };
      embeddingsOnSequence(bwd, seeded);
      gatherColumnInputs(bwd, seeded);
    }
    // Each gradient pinned as its weight before propagation: forward
    // traversal derives every value from the pinned arguments and only
    // reshards where a pinned result differs.
    auto bwdRet = cast<func::ReturnOp>(bwd.getBody().front().getTerminator());
    auto gradNames = bwd->getAttrOfType<ArrayAttr>("graph.output_names");
    if (!gradNames || gradNames.size() != bwdRet.getNumOperands())
      return bwd.emitError("dist-tp-plan: no graph.output_names");
    for (unsigned i = 0; i < bwdRet.getNumOperands(); ++i) {
      StringRef name = cast<StringAttr>(gradNames[i]).getValue();
      auto it =
          name.consume_front("grad:") ? named.find(name.str()) : named.end();
      // A boundary's gradient is laid out as the boundary.
      annotateResult(
          b, bwdRet, i,
          it != named.end()
              ? it->second
              : boundaryLayout(ctx, bwdRet.getOperand(i), sequenceParallel));
    }
    if (failed(propagate(bwd)))
      return failure();
    reportGathers(fwd);
    completeAnnotations(fwd);
    completeAnnotations(bwd);
    if (failed(checkPartitionable(fwd)) || failed(checkPartitionable(bwd)))
      return failure();
    recordSplits(fwd);
    recordSplits(bwd);
    if (failed(checkRegrouped(fwd)) || failed(checkRegrouped(bwd)))
      return failure();
    numSplit +=
        llvm::count_if(seeds, [](auto &s) { return isSplit(s.second); });
    return success();
  }

  /// Drops the column/row groups that stay whole on every rank: those
  /// whose attention's heads the group does not divide (grouped-query
  /// attention with fewer key/value heads than ranks), and those with a
  /// weight `--tp-replicate` names. A group is the columns that share a
  /// row, so a pair is never half split.
  template <typename Group>
  void keepWhole(func::FuncOp fwd,
                 const std::map<Operation *, WeightUse> &weights,
                 std::map<Operation *, Group> &candidates) {
    llvm::Regex named(replicate);
    auto nameOf = [&](Operation *gemm) {
      return argString(fwd, weights.at(gemm).arg.getArgNumber(), "graph.name");
    };
    auto matches = [&](Operation *gemm) {
      return !replicate.empty() && named.match(nameOf(gemm));
    };
    auto headsOf = [](ir::graph::AttentionOp a, Value v) {
      return cast<RankedTensorType>(v.getType())
          .getDimSize(a.getSeqMajor() ? 2 : 1);
    };
    llvm::SetVector<Operation *> whole, wholeRows;
    llvm::DenseSet<Operation *> told;
    for (auto &[gemm, g] : candidates) {
      bool keep = matches(gemm) || llvm::any_of(g.rows, matches);
      for (Operation *op : g.attentions) {
        auto a = cast<ir::graph::AttentionOp>(op);
        int64_t q = headsOf(a, a.getQ()), kv = headsOf(a, a.getK());
        if (q % tp == 0 && kv % tp == 0)
          continue;
        keep = true;
        if (told.insert(op).second)
          op->emitRemark("dist-tp-plan: attention at ")
              << op->getLoc() << " has " << q << " query and " << kv
              << " key/value heads, which " << unsigned(tp)
              << " ranks do not divide: its projections are kept whole "
                 "(replicated) on every rank";
      }
      if (keep)
        whole.insert(gemm);
    }
    // Closed over shared rows: a column reaching a row of a whole group.
    for (bool changed = true; changed;) {
      changed = false;
      for (Operation *gemm : whole)
        wholeRows.insert(candidates.at(gemm).rows.begin(),
                         candidates.at(gemm).rows.end());
      for (auto &[gemm, g] : candidates)
        if (!whole.contains(gemm) && llvm::any_of(g.rows, [&](Operation *r) {
              return wholeRows.contains(r);
            }))
          changed |= whole.insert(gemm);
    }
    for (Operation *gemm : whole) {
      if (matches(gemm))
        gemm->emitRemark("dist-tp-plan: '")
            << nameOf(gemm)
            << "' matches --tp-replicate: its layer's GEMMs are kept whole "
               "(replicated) on every rank";
      candidates.erase(gemm);
    }
  }

  /// Sequence parallelism from the first layer on: a vocabulary-parallel
  /// embedding's rows are split on the sequence where they are summed (the
  /// partial lookups reduce-scattered, dist-tp-combine-sums), as a later
  /// module's boundary values are.
  void embeddingsOnSequence(func::FuncOp f,
                            llvm::function_ref<shard::Sharding(unsigned)> of) {
    MLIRContext *ctx = f.getContext();
    OpBuilder b(ctx);
    f.walk([&](ir::graph::GatherOp g) {
      // The table as pinned (annotateArg).
      Value data = g.getData();
      if (auto pin = data.getDefiningOp<shard::ShardOp>())
        data = pin.getSrc();
      auto arg = dyn_cast<BlockArgument>(data);
      if (!arg || arg.getOwner() != &f.getBody().front() ||
          !(of(arg.getArgNumber()) == splitOn(ctx, 0)) ||
          !sequenceShaped(g.getResult()) ||
          cast<RankedTensorType>(g.getType()).getRank() < 3)
        return;
      // The lookup whole (its partial rows summed), its readers reading
      // their sequence shard: partition's all_slice of the all_reduce,
      // which dist-tp-combine-sums makes one reduce_scatter. (Pinning the
      // result split instead makes propagation gather the whole table.)
      b.setInsertionPointAfter(g);
      Location loc = g.getLoc();
      Value whole = shard::ShardingOp::create(b, loc, replicated(ctx));
      auto pinned = shard::ShardOp::create(b, loc, g.getResult(), whole);
      Value shards = shard::ShardingOp::create(b, loc,
                                               splitOn(ctx, kSequenceDim));
      auto read = shard::ShardOp::create(b, loc, pinned.getResult(), shards,
                                         /*annotate_for_users=*/true);
      g.getResult().replaceAllUsesExcept(read.getResult(), pinned);
    });
  }

  /// Sequence parallelism: a GEMM whose weight is split on its output dim
  /// (a column-parallel GEMM forward, a row-parallel one's input gradient
  /// backward) reads its input whole: partition all-gathers the sequence
  /// shards there, as Megatron-LM does, rather than split the product on
  /// the sequence and gather the weight.
  void gatherColumnInputs(func::FuncOp f,
                          llvm::function_ref<shard::Sharding(unsigned)> of) {
    MLIRContext *ctx = f.getContext();
    OpBuilder b(ctx);
    f.walk([&](ir::graph::MatMulOp mm) {
      // A backward without recomputation reads the forward's transposed
      // weights as residuals.
      std::optional<WeightUse> w = weightOf(mm, f, /*residualsToo=*/true);
      if (!w)
        return;
      shard::Sharding s = of(w->arg.getArgNumber());
      ArrayRef<shard::GridAxesAttr> axes = s.getSplitAxes();
      if (w->outDim >= int64_t(axes.size()) ||
          axes[size_t(w->outDim)].asArrayRef().empty())
        return;
      b.setInsertionPoint(mm);
      Value whole = shard::ShardingOp::create(b, mm.getLoc(), replicated(ctx));
      mm.setOperand(0,
                    shard::ShardOp::create(b, mm.getLoc(), mm.getLhs(), whole,
                                           /*annotate_for_users=*/true));
    });
  }

  /// Says where propagation had a split value read whole (an all-gather
  /// after partition) because the reader has no rule for the split: the
  /// program is right but that layer is not split as planned (a fused
  /// projection sliced on the split dim that graph-tp-regroup-projections
  /// left alone). Sequence
  /// parallelism's gathers on the sequence are the plan.
  void reportGathers(func::FuncOp f) {
    llvm::DenseSet<Operation *> reported;
    f.walk([&](shard::ShardOp read) {
      auto produced = read.getSrc().getDefiningOp<shard::ShardOp>();
      if (!read.getAnnotateForUsers() || !produced ||
          produced.getAnnotateForUsers() || read->use_empty())
        return;
      shard::Sharding from(produced.getSharding()), to(read.getSharding());
      for (auto [d, axes] : llvm::enumerate(from.getSplitAxes())) {
        bool whole = d >= to.getSplitAxes().size() ||
                     to.getSplitAxes()[d].asArrayRef().empty();
        if (axes.asArrayRef().empty() || !whole ||
            (sequenceParallel && int64_t(d) == kSequenceDim))
          continue;
        Operation *reader = *read->getUsers().begin();
        Operation *producer = produced.getSrc().getDefiningOp();
        if (!producer || !reported.insert(producer).second)
          return;
        reader->emitRemark("dist-tp-plan: ")
            << reader->getName() << " at " << reader->getLoc()
            << " reads the output of " << producer->getName() << " at "
            << producer->getLoc()
            << " whole (an all-gather): it has no rule for that split, so "
               "this part of the layer is computed whole on every rank";
        return;
      }
    });
  }

  LogicalResult propagate(func::FuncOp f) {
    // Scalars pinned whole on the grid first: upstream's forward traversal
    // would otherwise annotate them without one.
    OpBuilder b(f.getContext());
    auto pinScalar = [&](Value v) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      if (!t || t.getRank() != 0 ||
          llvm::any_of(v.getUsers(),
                       [](Operation *u) { return isa<shard::ShardOp>(u); }))
        return;
      Value s = shard::ShardingOp::create(
          b, v.getLoc(),
          shard::Sharding::get(FlatSymbolRefAttr::get(f.getContext(), kGrid),
                               {}));
      auto pin = shard::ShardOp::create(b, v.getLoc(), v, s);
      v.replaceAllUsesExcept(pin.getResult(), pin);
    };
    b.setInsertionPointToStart(&f.getBody().front());
    for (BlockArgument arg : f.getArguments())
      pinScalar(arg);
    f.walk([&](Operation *op) {
      if (isa<shard::ShardOp, shard::ShardingOp>(op))
        return;
      b.setInsertionPointAfter(op);
      for (Value r : op->getResults())
        pinScalar(r);
    });
    // Forward only: every choice follows from the pinned arguments (the
    // seeds, the forward's residuals); upstream's default (backward first)
    // makes a consumer that reads a value whole (a norm's backward) pull
    // the GEMM before it whole instead of summing its partial products.
    OpPassManager pm(func::FuncOp::getOperationName());
    shard::ShardingPropagationOptions options;
    options.traversal = shard::TraversalOrder::Forward;
    pm.addPass(shard::createShardingPropagation(options));
    return runPipeline(pm, f);
  }
};

/// add(all_reduce(a), all_reduce(b)) -> all_reduce(add(a, b)).
struct CombineSums : OpRewritePattern<ir::graph::AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ir::graph::AddOp add,
                                PatternRewriter &rewriter) const override {
    auto a = add.getLhs().getDefiningOp<shard::AllReduceOp>();
    auto b = add.getRhs().getDefiningOp<shard::AllReduceOp>();
    if (!a || !b || a == b || !a->hasOneUse() || !b->hasOneUse() ||
        a.getGrid() != b.getGrid() || a.getGridAxes() != b.getGridAxes() ||
        a.getReduction() != shard::ReductionKind::Sum ||
        b.getReduction() != shard::ReductionKind::Sum ||
        a.getInput().getType() != add.getType() ||
        b.getInput().getType() != add.getType() || a.getType() != add.getType())
      return failure();
    Value sum = ir::graph::AddOp::create(rewriter, add.getLoc(), add.getType(),
                                         a.getInput(), b.getInput());
    rewriter.replaceOpWithNewOp<shard::AllReduceOp>(
        add, add.getType(), a.getGridAttr(), a.getGridAxesAttr(), sum,
        a.getReductionAttr());
    return success();
  }
};

/// all_slice(all_reduce(x)) -> reduce_scatter(x): each rank keeps only its
/// part of the sum (sequence parallelism after a row-parallel GEMM).
struct SliceOfSum : OpRewritePattern<shard::AllSliceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(shard::AllSliceOp slice,
                                PatternRewriter &rewriter) const override {
    auto sum = slice.getInput().getDefiningOp<shard::AllReduceOp>();
    if (!sum || !sum->hasOneUse() || sum.getGrid() != slice.getGrid() ||
        sum.getGridAxes() != slice.getGridAxes() ||
        sum.getReduction() != shard::ReductionKind::Sum)
      return failure();
    rewriter.replaceOpWithNewOp<shard::ReduceScatterOp>(
        slice, slice.getType(), slice.getGridAttr(), slice.getGridAxesAttr(),
        sum.getInput(), sum.getReductionAttr(), slice.getSliceAxisAttr());
    return success();
  }
};

struct DistTpCombineSums
    : ir::dist::impl::DistTpCombineSumsBase<DistTpCombineSums> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<CombineSums, SliceOfSum>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

ir::dist::CompiledModules
lamina::ir::dist::describeCompiledModules(ModuleOp module) {
  auto functions = ir::dist::moduleFunctions(module);
  int64_t numModules = 0;
  for (auto &[k, pair] : functions)
    numModules = std::max(numModules, k + 1);
  CompiledModules out;
  for (std::vector<double> *v : {&out.forwardTpBytes, &out.backwardTpBytes,
                                 &out.forwardTpSteps, &out.backwardTpSteps})
    v->assign(size_t(numModules), 0.0);
  out.params.assign(size_t(numModules), 0.0);
  out.boundaryBytes.assign(size_t(numModules), 0.0);
  auto grid = module.lookupSymbol<shard::GridOp>(kGrid);
  const double t =
      grid && grid.getShape().size() == 1 ? double(grid.getShape()[0]) : 1.0;
  auto size = [](Value v) {
    auto type = cast<ShapedType>(v.getType());
    return double(type.getNumElements()) *
           double(type.getElementTypeBitWidth() / 8);
  };
  llvm::StringSet<> counted;
  // In module order: a shared parameter counts in its first reader.
  for (auto &[k, pair] : functions) {
    auto [fwd, bwd] = pair;
    if (!fwd)
      continue;
    for (unsigned i = 0; i < fwd.getNumArguments(); ++i)
      if (argString(fwd, i, ir::graph::kKindAttr) ==
              ir::graph::kKindTrainable &&
          counted.insert(argString(fwd, i, ir::graph::kNameAttr)).second)
        out.params[size_t(k)] += double(
            cast<ShapedType>(fwd.getArgumentTypes()[i]).getNumElements());
    auto outlined = fwd->getAttrOfType<ir::dist::OutlinedAttr>(
        ir::dist::DistDialect::kOutlinedAttr);
    if (outlined && k + 1 < numModules)
      for (int64_t j = 0; j < outlined.getNumOut(); ++j)
        out.boundaryBytes[size_t(k)] += size(
            fwd.getBody().front().getTerminator()->getOperand(unsigned(j)));
    for (func::FuncOp f : {fwd, bwd}) {
      if (!f || t < 2)
        continue;
      bool forward = f == fwd;
      double &b =
          (forward ? out.forwardTpBytes : out.backwardTpBytes)[size_t(k)];
      double &n =
          (forward ? out.forwardTpSteps : out.backwardTpSteps)[size_t(k)];
      f.walk([&](Operation *op) {
        if (auto r = dyn_cast<shard::AllReduceOp>(op)) {
          b += 2 * (t - 1) / t * size(r.getResult());
          n += 2 * (t - 1);
        } else if (auto g = dyn_cast<shard::AllGatherOp>(op)) {
          b += (t - 1) / t * size(g.getResult());
          n += t - 1;
        } else if (auto s = dyn_cast<shard::ReduceScatterOp>(op)) {
          b += (t - 1) / t * size(s.getInput());
          n += t - 1;
        }
      });
    }
  }
  return out;
}
