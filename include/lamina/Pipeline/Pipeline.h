//===- Pipeline.h - lamina compile's pass pipeline, as a library -*- C++ -*-===//
//
// The phases of `lamina compile`, each a list of passes built from one
// options struct. `lamina compile`, `lamina plan` and `lamina-eval` build
// their pass managers from them, and lamina-opt registers them as pass
// pipelines (`--lamina-graph`, `--lamina-train`, `--lamina-fuse`,
// `--lamina-dist`, `--lamina-rt`, `--lamina-emitc`, `--lamina-compile` for
// all), so any
// phase can be reproduced from the previous phase's IR:
//
//   lamina compile m.onnx --mode train ... --compile-to=graph -o d > g.mlir
//   lamina-opt g.mlir --lamina-train='mode=train loss=causal-lm logits=y'
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_PIPELINE_PIPELINE_H
#define LAMINA_PIPELINE_PIPELINE_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <optional>
#include <string>

namespace lamina {

/// The phases, in order; each is named by the IR it leaves.
enum class Phase {
  /// The imported forward, verified, made ready for training (window inputs
  /// filled, frozen and buffer initializers constant, padding indices) and
  /// fused (attention, norms, GELU), autocast under --precision.
  Graph,
  /// The loss added and differentiated: @train_step and @eval_step, or,
  /// distributed, the outlined per-module @fwd_k / @bwd_k (nothing for
  /// inference).
  Train,
  /// The functions as the kernels will run them: the last graph fusions
  /// (GELU, epilogues, elementwise), low-precision casts folded into the
  /// matmuls or hoisted into parameter copies, residuals narrowed.
  Fuse,
  /// Distributed: the verified schedule with its communication, as one
  /// dist.step per pipeline rank over values (a dist.program; nothing
  /// otherwise).
  Dist,
  /// Kernel calls on a planned arena (`rt` dialect); a dist.program's
  /// calls then name the rt functions.
  Rt,
  /// EmitC: what `mlir-translate --mlir-to-cpp` prints as the program.
  EmitC,
};

/// "graph", "train", "fuse", "dist", "rt" or "emitc".
llvm::StringRef phaseName(Phase phase);
std::optional<Phase> parsePhase(llvm::StringRef name);
/// "graph, train, fuse, dist, rt or emitc".
llvm::StringRef phaseNames();

/// Every setting a phase reads, spelled as lamina-opt's pipeline options;
/// `lamina compile`'s flags map onto them one for one.
struct CompileOptions : mlir::PassPipelineOptions<CompileOptions> {
  Option<std::string> mode{*this, "mode", llvm::cl::desc("inference or train"),
                           llvm::cl::init("inference")};
  Option<std::string> target{*this, "target", llvm::cl::desc("host or cuda"),
                             llvm::cl::init("host")};
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("f32, bf16 or f16 matmuls (graph-autocast)"),
      llvm::cl::init("f32")};
  Option<bool> fuseAttention{
      *this, "fuse-attention",
      llvm::cl::desc("attention chains into graph.attention"),
      llvm::cl::init(true)};

  // Training.
  Option<std::string> loss{
      *this, "loss",
      llvm::cl::desc("causal-lm or cross-entropy (graph-add-loss); empty "
                     "with loss-output")};
  Option<std::string> logits{*this, "logits",
                             llvm::cl::desc("the logits output")};
  Option<std::string> labels{*this, "labels",
                             llvm::cl::desc("the labels input")};
  Option<std::string> lossOutput{
      *this, "loss-output", llvm::cl::desc("the model's own loss output")};
  Option<int64_t> ignoreIndex{*this, "ignore-index",
                              llvm::cl::desc("the ignored label"),
                              llvm::cl::init(-100)};
  ListOption<std::string> keepInputs{
      *this, "keep-inputs",
      llvm::cl::desc("mask, position or segment inputs left as inputs")};
  Option<std::string> freeze{
      *this, "freeze",
      llvm::cl::desc("initializers matching this regex are not trained")};
  ListOption<std::string> paddingIdx{
      *this, "padding-idx",
      llvm::cl::desc("NAME=INDEX embedding padding indices (must match)")};
  ListOption<std::string> knownPaddingIdx{
      *this, "known-padding-idx",
      llvm::cl::desc("NAME=INDEX found in the export's metadata")};
  ListOption<std::string> knownBuffers{
      *this, "known-buffers",
      llvm::cl::desc("initializers the export marks as PyTorch buffers "
                     "(not trained)")};
  ListOption<std::string> unknownPadding{
      *this, "unknown-padding",
      llvm::cl::desc("embedding tables whose padding index the export does "
                     "not say (reported)")};
  Option<bool> asExported{
      *this, "as-exported",
      llvm::cl::desc("train every initializer as the file has it")};

  // Distributed (any of these given makes a distributed program).
  Option<bool> distributed{*this, "dist",
                           llvm::cl::desc("a distributed (SPMD) program")};
  Option<std::string> schedule{*this, "schedule",
                               llvm::cl::desc("the pipeline schedule"),
                               llvm::cl::init("breadth-first")};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("pipeline ranks"),
                     llvm::cl::init(1)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("data-parallel replicas"),
                     llvm::cl::init(1)};
  Option<int64_t> tp{*this, "tp",
                     llvm::cl::desc("tensor-parallel ranks per group: each "
                                    "module's layers split (dist-tp-plan)"),
                     llvm::cl::init(1)};
  Option<int64_t> ep{*this, "ep",
                     llvm::cl::desc("expert-parallel ranks: each MoE layer's "
                                    "experts split over the replicas"),
                     llvm::cl::init(1)};
  Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("with tp: Megatron's sequence parallelism")};
  Option<double> moeAuxLoss{
      *this, "moe-aux-loss",
      llvm::cl::desc("the MoE routers' load-balancing loss coefficient"),
      llvm::cl::init(0.0)};
  Option<std::string> tpReplicate{
      *this, "tp-replicate",
      llvm::cl::desc("with tp: weights (regex) whose layer stays whole")};
  Option<int64_t> microBatches{*this, "micro-batches",
                               llvm::cl::desc("micro-batches per step"),
                               llvm::cl::init(1)};
  Option<int64_t> zero{*this, "zero", llvm::cl::desc("ZeRO level 0-3"),
                       llvm::cl::init(0)};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("modules or none (default: modules for breadth-first "
                     "and layered)")};
  Option<bool> paramCopies{
      *this, "param-copies",
      llvm::cl::desc("keep the weights' low-precision copies between steps"),
      llvm::cl::init(true)};
  Option<std::string> paramReads{
      *this, "param-reads",
      llvm::cl::desc("autocast or copies (default: copies at ZeRO 3)")};

  // Code generation.
  Option<std::string> modelPath{
      *this, "model-path",
      llvm::cl::desc("the ONNX file the program reads its weights from")};

  bool train() const { return mode == "train"; }
  bool dist() const { return train() && distributed; }
  bool cuda() const { return target == "cuda"; }
  /// Whether a distributed program's backwards recompute.
  bool recomputeModules() const;
  /// ZeRO shards over data-parallel replicas only.
  int effectiveZero() const;
  /// graph/dist-hoist-param-casts' every-read: the precision when every
  /// read of a weight goes through its copy, else "".
  std::string everyRead() const;
};

/// Adds the passes that produce `phase`'s IR from the previous phase's.
void addPhasePasses(mlir::OpPassManager &pm, Phase phase,
                    const CompileOptions &options);

/// Adds every phase from `first` through `last`.
void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options,
                          Phase first = Phase::Graph,
                          Phase last = Phase::EmitC);

/// Registers lamina-graph ... lamina-emitc and lamina-compile.
void registerPipelines();

} // namespace lamina

#endif // LAMINA_PIPELINE_PIPELINE_H
