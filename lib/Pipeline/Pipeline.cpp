//===- Pipeline.cpp - lamina compile's pass pipeline ----------------------===//
//
// The order of the passes and why is documented in docs/architecture.md
// ("The pass pipeline"); each phase below says what it leaves.
//
//===----------------------------------------------------------------------===//

#include "lamina/Pipeline/Pipeline.h"

#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Dialect/Rt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;

namespace lamina {

StringRef phaseName(Phase phase) {
  switch (phase) {
  case Phase::Graph:
    return "graph";
  case Phase::Train:
    return "train";
  case Phase::Fuse:
    return "fuse";
  case Phase::Dist:
    return "dist";
  case Phase::Rt:
    return "rt";
  case Phase::EmitC:
    return "emitc";
  }
  llvm_unreachable("Phase");
}

std::optional<Phase> parsePhase(StringRef name) {
  return llvm::StringSwitch<std::optional<Phase>>(name)
      .Case("graph", Phase::Graph)
      .Case("train", Phase::Train)
      .Case("fuse", Phase::Fuse)
      .Case("dist", Phase::Dist)
      .Case("rt", Phase::Rt)
      .Case("emitc", Phase::EmitC)
      .Default(std::nullopt);
}

StringRef phaseNames() { return "graph, train, fuse, dist, rt or emitc"; }

bool CompileOptions::recomputeModules() const {
  if (!recompute.empty())
    return recompute == "modules";
  return schedule == "breadth-first" || schedule == "layered";
}

int CompileOptions::effectiveZero() const {
  return dist() && dp > 1 ? int(zero) : 0;
}

std::string CompileOptions::everyRead() const {
  bool copiesOnly = !paramReads.empty()
                        ? paramReads == "copies"
                        : paramCopies && effectiveZero() == 3;
  return copiesOnly ? std::string(precision) : std::string();
}

// Passes that rewrite one function and read nothing outside it but the
// module's attributes run nested on func.func (in parallel over the
// functions; the training preparation acts on the entry function alone,
// graph.entry); those that create, rename, erase or pair functions, or write
// the module's attributes stay on the module (docs/architecture.md lists
// which).
static void addGraphPhase(OpPassManager &pm, const CompileOptions &o) {
  // One nest: each function verified, prepared (the preparation passes act
  // on the entry function only) and fused in turn.
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(ir::graph::createGraphVerifyImported());
  if (o.train()) {
    // What the exporters wrote that PyTorch does not train, and the inputs
    // a window of packed tokens fixes (folded through the masks, so the
    // attention fusion sees a causal mask).
    ir::graph::GraphFillWindowInputsOptions fill;
    fill.labels = o.labels;
    fill.keep.assign(o.keepInputs.begin(), o.keepInputs.end());
    fn.addPass(ir::graph::createGraphFillWindowInputs(fill));
    if (!o.freeze.empty())
      fn.addPass(ir::graph::createGraphFreeze({o.freeze}));
    if (!o.asExported) {
      ir::graph::GraphFreezeBuffersOptions buffers;
      buffers.buffers.assign(o.knownBuffers.begin(), o.knownBuffers.end());
      fn.addPass(ir::graph::createGraphFreezeBuffers(buffers));
    }
    if (!o.paddingIdx.empty() || !o.knownPaddingIdx.empty() ||
        !o.unknownPadding.empty()) {
      ir::graph::GraphMarkPaddingOptions pads;
      pads.paddingIdx.assign(o.paddingIdx.begin(), o.paddingIdx.end());
      pads.knownPaddingIdx.assign(o.knownPaddingIdx.begin(),
                                  o.knownPaddingIdx.end());
      pads.unknownPadding.assign(o.unknownPadding.begin(),
                                 o.unknownPadding.end());
      fn.addPass(ir::graph::createGraphMarkPadding(pads));
    }
  }
  // Attention, the written-out norms and GELU fused before autocast and
  // autodiff: one low-precision op and its gradient rule, not the
  // differentiated chain and its intermediates.
  if (o.fuseAttention)
    fn.addPass(ir::graph::createGraphFuseAttention());
  fn.addPass(ir::graph::createGraphFuseNorms());
  if (o.train())
    fn.addPass(ir::graph::createGraphFuseGelu());
  // Mixed precision on @forward: autodiff then makes the backward's
  // matmuls low-precision too; parameters stay f32.
  if (o.precision != "f32")
    fn.addPass(ir::graph::createGraphAutocast({o.precision}));
}

static void addTrainPhase(OpPassManager &pm, const CompileOptions &o) {
  if (!o.train())
    return;
  ir::graph::GraphAddLossOptions loss;
  loss.kind = o.lossOutput.empty() ? std::string(o.loss) : "output";
  loss.logits = o.logits;
  loss.labels = o.labels;
  loss.output = o.lossOutput;
  loss.ignoreIndex = o.ignoreIndex;
  pm.addPass(ir::graph::createGraphAddLoss(loss));
  if (o.moeAuxLoss != 0.0)
    pm.addNestedPass<func::FuncOp>(
        ir::graph::createGraphAddMoEAuxLoss({o.moeAuxLoss}));
  if (o.dist()) {
    // A fused projection stored as each rank's share of its parts, so
    // that it splits as a column GEMM (autodiff follows the regrouping).
    if (o.tp > 1) {
      ir::graph::GraphTpRegroupProjectionsOptions regroup;
      regroup.tp = unsigned(o.tp);
      pm.addNestedPass<func::FuncOp>(
          ir::graph::createGraphTpRegroupProjections(regroup));
    }
    // Expert parallelism: each MoE layer's experts split over the
    // replicas, its tokens sent to them by all-to-alls (autodiff gives the
    // backward's).
    if (o.ep > 1) {
      ir::graph::GraphEpSplitExpertsOptions experts;
      experts.ranks = unsigned(o.ep);
      pm.addNestedPass<func::FuncOp>(
          ir::graph::createGraphEpSplitExperts(experts));
    }
    ir::dist::DistOutlineModulesOptions outline;
    outline.recompute = o.recomputeModules();
    pm.addPass(ir::dist::createDistOutlineModules(outline));
    // Tensor parallelism: each module's forward and backward split over
    // the group (Megatron's pairs, from the dataflow), then one rank's
    // SPMD form with its collectives (upstream's shard-partition), the
    // partial sums of a group added before one all-reduce.
    if (o.tp > 1) {
      ir::dist::DistTpPlanOptions plan;
      plan.tp = unsigned(o.tp);
      plan.sequenceParallel = o.sequenceParallel;
      plan.replicate = o.tpReplicate;
      pm.addPass(ir::dist::createDistTpPlan(plan));
      OpPassManager &fn = pm.nest<func::FuncOp>();
      fn.addPass(shard::createPartition());
      // One gather of a value every column GEMM of a group reads.
      fn.addPass(createCSEPass());
      fn.addPass(ir::dist::createDistTpCombineSums());
    }
    return;
  }
  ir::graph::GraphAutodiffOptions autodiff;
  // The logits stay available to `run --dump-outputs`.
  autodiff.keepOutputs = true;
  pm.addPass(ir::graph::createGraphAutodiff(autodiff));
  pm.addPass(ir::graph::createGraphVerifyTrainStep());
  // The forward, reduced to its loss, is the evaluation entry
  // (`run --eval-data`): validation losses without the gradients.
  pm.addPass(ir::graph::createGraphEvalStep());
}

static void addDistPhase(OpPassManager &pm, const CompileOptions &o) {
  if (!o.dist())
    return;
  // The one placement of the modules on the pipeline ranks, which the
  // schedule reads; then the schedule over them, as IR: compute order,
  // communication, then the deadlock/matching simulation.
  ir::dist::DistPartitionOptions place;
  place.pp = o.pp;
  place.placement =
      o.schedule == "gpipe" || o.schedule == "1f1b" ? "contiguous" : "modular";
  pm.addPass(ir::dist::createDistPartition(place));
  ir::dist::DistScheduleOptions sched;
  sched.scheduleKind = o.schedule;
  sched.pp = o.pp;
  sched.dp = o.dp;
  sched.microBatches = o.microBatches;
  sched.zero = o.zero;
  // The evaluation step (run --eval-data) too, verified like the training.
  sched.eval = true;
  pm.addPass(ir::dist::createDistSchedule(sched));
  pm.addPass(ir::dist::createDistInsertComm());
  pm.addPass(ir::dist::createDistPrefetchGathers());
  pm.addPass(ir::dist::createDistVerifySchedule());
  // Each pipeline rank's step over values, built from the functions as
  // the kernels will run them (the opt phase); the same simulation again.
  pm.addPass(ir::dist::createDistBuildSteps());
  pm.addPass(ir::dist::createDistVerifySchedule());
}

static void addFusePhase(OpPassManager &pm, const CompileOptions &o) {
  bool lowPrecision = o.precision != "f32";
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(ir::graph::createGraphFuseGelu());
  // Last on the graph: after autodiff and autocast (no gradient rule).
  if (lowPrecision)
    fn.addPass(ir::graph::createGraphFoldMatMulCasts());
  // Bias and residual adds into the GEMM's epilogue (and gradient sums
  // into the norms' backward), before elementwise fusion would take them.
  fn.addPass(ir::graph::createGraphFuseEpilogues());
  // What a module keeps for its backward, narrowed as above.
  if (o.dist() && lowPrecision)
    pm.addPass(ir::dist::createDistNarrowResiduals());
  // The weights' (and the epilogues' biases') low-precision copies come
  // from the optimizer's kernel, not from casts in every step; ZeRO 3
  // gathers the copies when they are all the functions read.
  std::string everyRead = o.everyRead();
  if (o.train() && !o.dist() && lowPrecision && o.paramCopies)
    pm.addPass(ir::graph::createGraphHoistParamCasts({everyRead}));
  bool distCopies = o.effectiveZero() < 3 || !everyRead.empty();
  if (o.dist() && lowPrecision && o.paramCopies && distCopies)
    pm.addPass(ir::dist::createDistHoistParamCasts({everyRead}));
  // cuDNN reads q, k and v from the fused projection at a row stride.
  OpPassManager &last = pm.nest<func::FuncOp>();
  if (o.cuda())
    last.addPass(ir::graph::createGraphPackAttention());
  last.addPass(ir::graph::createGraphFuseElementwise());
}

static void addRtPhase(OpPassManager &pm, const CompileOptions &o) {
  pm.addNestedPass<func::FuncOp>(createConvertGraphToRt());
  // Each pipeline rank's step as a function of step-library calls, then
  // the overlap decided on it: receives posted ahead, sends and ZeRO 2-3's
  // reduce-scatters waited for early, the waits proven deadlock-free, and
  // what the step holds placed in its step buffer.
  if (o.dist()) {
    pm.addPass(createConvertDistToRt());
    OpPassManager &fn = pm.nest<func::FuncOp>();
    fn.addPass(ir::rt::createRtPostReceives());
    fn.addPass(ir::rt::createRtWaitSends());
    fn.addPass(ir::rt::createRtRetireReductions());
    pm.addPass(ir::rt::createRtVerifySteps());
    ir::rt::RtPlanStepBuffersOptions buffers;
    buffers.target = o.target;
    pm.addPass(ir::rt::createRtPlanStepBuffers(buffers));
  }
}

static void addEmitCPhase(OpPassManager &pm, const CompileOptions &o) {
  ConvertRtToEmitCOptions emit;
  emit.modelPath = o.modelPath;
  emit.target = o.target;
  pm.addPass(createConvertRtToEmitC(emit));
}

void addPhasePasses(OpPassManager &pm, Phase phase, const CompileOptions &o) {
  switch (phase) {
  case Phase::Graph:
    return addGraphPhase(pm, o);
  case Phase::Train:
    return addTrainPhase(pm, o);
  case Phase::Fuse:
    return addFusePhase(pm, o);
  case Phase::Dist:
    return addDistPhase(pm, o);
  case Phase::Rt:
    return addRtPhase(pm, o);
  case Phase::EmitC:
    return addEmitCPhase(pm, o);
  }
}

void buildCompilePipeline(OpPassManager &pm, const CompileOptions &options,
                          Phase first, Phase last) {
  for (int p = int(first); p <= int(last); ++p)
    addPhasePasses(pm, Phase(p), options);
}

void registerPipelines() {
  auto phase = [](Phase p) {
    return [p](OpPassManager &pm, const CompileOptions &o) {
      addPhasePasses(pm, p, o);
    };
  };
  static PassPipelineRegistration<CompileOptions> graphPhase(
      "lamina-graph",
      "lamina compile's graph phase: verify the import, prepare it for "
      "training, fuse, autocast",
      phase(Phase::Graph));
  static PassPipelineRegistration<CompileOptions> trainPhase(
      "lamina-train",
      "lamina compile's train phase: the loss, then autodiff (or, "
      "distributed, the outlined modules)",
      phase(Phase::Train));
  static PassPipelineRegistration<CompileOptions> fusePhase(
      "lamina-fuse",
      "lamina compile's fuse phase: the last graph fusions and casts, the "
      "functions as the kernels will run them",
      phase(Phase::Fuse));
  static PassPipelineRegistration<CompileOptions> distPhase(
      "lamina-dist",
      "lamina compile's dist phase: the verified schedule and its "
      "communication, as one step per pipeline rank",
      phase(Phase::Dist));
  static PassPipelineRegistration<CompileOptions> rtPhase(
      "lamina-rt", "lamina compile's rt phase: kernel calls on a planned arena",
      phase(Phase::Rt));
  static PassPipelineRegistration<CompileOptions> emitcPhase(
      "lamina-emitc", "lamina compile's emitc phase: the C++ program as EmitC",
      phase(Phase::EmitC));
  static PassPipelineRegistration<CompileOptions> all(
      "lamina-compile", "Every phase of lamina compile, graph to emitc",
      [](OpPassManager &pm, const CompileOptions &o) {
        buildCompilePipeline(pm, o);
      });
}

} // namespace lamina
