//===- CostModel.h - price a training configuration ------------*- C++ -*-===//
//
// evaluatePlan turns a ModelDesc, a parallel configuration and a Hardware
// into per-action durations, times the schedule with the shared simulator
// (lamina/Schedule/Simulate.h) and reports step time, bubble, exposed
// communication, memory and traffic per rank, MFU and warnings. No MLIR:
// unit tests use hand-written descriptions. docs/plan.md has the formulas.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_PLAN_COSTMODEL_H
#define LAMINA_PLAN_COSTMODEL_H

#include "lamina/Plan/Hardware.h"
#include "lamina/Plan/ModelDesc.h"
#include "lamina/Schedule/Schedule.h"
#include "lamina/Schedule/Simulate.h"

#include <optional>
#include <string>
#include <vector>

namespace lamina::plan {

/// How training stores values; every byte figure of a plan follows from
/// the precision's row of one table (precisionBytes, docs/plan.md).
enum class Precision {
  Bf16Mixed, ///< bf16 weights, gradients, activations; fp32 master and Adam
  Fp32,      ///< fp32 everything, Adam's m and v (no master copy)
  /// What `lamina compile --precision bf16 --param-reads=copies` trains:
  /// bf16 weight copies (gathered), f32 stage values and gradients.
  Bf16Copies,
};

/// One row of the precision table: bytes per value or per parameter.
struct PrecisionBytes {
  Precision precision;
  const char *name;        ///< the flag's spelling: "bf16-mixed", "fp32"
  const char *description; ///< for the text report
  double value;            ///< activations, boundary values, their gradients
  double weight;           ///< the parameters the modules read
  double grad;             ///< gradients (and their data-parallel rings)
  double optimizer;        ///< optimizer state per parameter
  double optimizerStep;    ///< bytes the optimizer streams per parameter
};

const PrecisionBytes &precisionBytes(Precision precision);
/// "bf16-mixed", "fp32" or "bf16-copies"; nullopt for anything else.
std::optional<Precision> parsePrecision(const std::string &name);
/// The accepted spellings, "bf16-mixed, fp32, bf16-copies", for messages.
std::string precisionNames();

struct PlanConfig {
  int pp = 1;            ///< pipeline ranks p
  int dp = 1;            ///< data-parallel replicas d
  int tp = 1;            ///< tensor-parallel ranks t (Megatron-style)
  /// Expert-parallel ranks: each mixture-of-experts layer's experts split
  /// over groups of ep of the stage's replicas (`lamina compile --ep`; ep
  /// divides dp, and each block's dp / ep holders synchronise it).
  int ep = 1;
  /// Expert-parallel routing imbalance: the rows the busiest rank of an
  /// expert-parallel group receives over the mean (1: tokens routed
  /// evenly). Every rank waits for the busiest, so its experts' GEMMs and
  /// its all-to-all rows set the time; the bytes per step stay the mean.
  double moeImbalance = 1;
  int microBatches = 1;  ///< m, per step per replica
  int64_t microBatchSize = 1; ///< b, samples
  schedule::ScheduleKind schedule = schedule::ScheduleKind::OneFOneB;
  int zero = 0;          ///< data-parallel sharding level 0-3
  bool recompute = true; ///< full activation recomputation
  /// The step buffer's ZeRO sizes as `lamina compile --target cuda` lays
  /// them out (NCCL's equal, padded chunks) rather than MPI's cut (host).
  bool paddedShards = false;
  /// interleaved-1f1b: chunks per pipeline rank (0: one layer per chunk).
  int chunks = 0;
  Precision precision = Precision::Bf16Mixed;

  int gpus() const { return pp * dp * tp; } // ep is within dp
};

/// "p8 d16 t8 m96 b1 interleaved-1f1b zero1 recompute"
std::string describeConfig(const PlanConfig &config);

/// One schedule module: consecutive modules of the description. Layers are
/// the schedule's modules; the embedding joins the first layer and the head
/// the last (Megatron puts them on the first and last stage). Full
/// recompute applies to layers only, as in Megatron-LM.
struct Stage {
  std::vector<int> modules; ///< indices into ModelDesc::modules
  double params = 0;        ///< per GPU (divided by t)
  /// Of `params`, tied parameters read by other stages too (ModelDesc::
  /// sharedParams): held whole, outside the stage's collectives (at ZeRO
  /// >= 1 each holder keeps the optimizer state of its part only).
  double sharedParams = 0;
  /// Of `params`, this GPU's block of the experts (ep > 1): held whole,
  /// outside the stage's data-parallel collectives (the all-to-alls
  /// already summed their gradients over the group's tokens; the block's
  /// holders, dp / ep replicas, synchronise it as tied parameters).
  double expertParams = 0;
  /// The parameters the stage's data-parallel collectives move.
  double synced() const { return params - sharedParams - expertParams; }
  double forward = 0;       ///< seconds, including tensor-parallel comm
  double backward = 0;      ///< seconds, including recompute
  double tpForward = 0;     ///< tensor-parallel all-reduce time in forward
  double tpBackward = 0;    ///< ... in backward (and recompute)
  /// Expert-parallel all-to-alls (ep > 1) per micro-batch: their time in
  /// the forward and the backward (with recompute), and the bytes this GPU
  /// sends the others, for uniform routing (each rank's share of a layer's
  /// T k rows, (ep - 1) / ep of them to the others, and the counts).
  double epForward = 0, epBackward = 0, epBytes = 0;
  /// The experts' GEMMs per micro-batch on the busiest expert-parallel
  /// rank (PlanConfig::moeImbalance times the mean): forward, and backward
  /// with recompute. Part of `forward` and `backward`.
  double expertForward = 0, expertBackward = 0;
  double sendBytes = 0;     ///< per GPU, one micro-batch's output
  double send = 0;          ///< seconds for that transfer
  /// Per GPU and micro-batch: what full recompute keeps from forward to
  /// backward (the first layer's input, non-layer modules' activations),
  /// everything the backward needs without recompute, and the part of that
  /// recompute regenerates (live during the stage's backward).
  double checkpointBytes = 0;
  double activationBytes = 0;
  double recomputedBytes = 0;
  double transientBytes = 0;
  double allGather = 0, reduceScatter = 0, allReduce = 0; ///< seconds
};

struct RankMemory {
  double weights = 0, grads = 0, optimizer = 0, activations = 0,
         transient = 0;
  /// ZeRO 2-3: the peak of full gradients and reduce-scatter results held
  /// at once (each run's full gradient lives from its first backward until
  /// its reduce-scatter is retired, as the runtime's executor does:
  /// Executor::retireScatters; `grads` counts the shards).
  double gradientBuffers = 0;
  /// The compiled step's buffer on replica 0 of this pipeline rank: the
  /// boundary values, their gradients and the residuals it holds at once,
  /// placed by the same computation as convert-dist-to-rt's
  /// (schedule::planStepBuffers over schedule::lowerStep). Part of
  /// `activations`' bound, not added to the total. Exact when the
  /// backward recomputes (no residuals) and each boundary is one tensor;
  /// without recompute the residuals are estimated by every op result of
  /// the stage (stepBuffersExact false).
  double stepBuffers = 0;
  bool stepBuffersExact = true;
  double total() const {
    return weights + grads + optimizer + activations + transient +
           gradientBuffers;
  }
};

/// Bytes one GPU sends per step (ring volumes for collectives).
struct RankTraffic {
  double p2p = 0;        ///< pipeline activations and their gradients
  double dataParallel = 0;
  double tensorParallel = 0;
  double expertParallel = 0; ///< the all-to-alls' rows and counts
  int sends = 0, collectives = 0;
};

struct RankStats {
  int pipelineRank = 0;
  std::vector<int> stages;  ///< schedule modules on this rank
  std::vector<int> modules; ///< description modules on this rank
  double params = 0;        ///< per GPU
  /// Tied parameters held whole on this rank (its own and other ranks'),
  /// per GPU; their synchronisation is part of `traffic.dataParallel`.
  double sharedParams = 0;
  RankMemory memory;
  RankTraffic traffic;
  double busy = 0, idle = 0; ///< seconds of compute and idle in the step
  int peakInFlight = 0;      ///< most (stage, micro-batch) checkpoints held
};

struct Plan {
  PlanConfig config;
  Hardware hardware;
  std::string modelName;
  std::vector<Stage> stages;
  /// The simulated schedule: data-parallel replicas run identical lists, so
  /// at most two are simulated (two keep the collectives in the lists).
  schedule::Schedule schedule;
  schedule::Timeline timeline;
  std::vector<RankStats> ranks; ///< one per pipeline rank

  double stepTime = 0;       ///< seconds
  double bubbleFraction = 0; ///< idle compute over ranks x step
  double computeOnlyStep = 0; ///< step with free p2p and DP collectives
  double exposedComm = 0;    ///< stepTime - computeOnlyStep
  double tensorParallelTime = 0; ///< per step on a rank, inside compute
  double samplesPerStep = 0, tokensPerStep = 0, tokensPerSecond = 0;
  double modelFlopsPerStep = 0;    ///< forward + backward, no recompute
  double hardwareFlopsPerStep = 0; ///< with recompute
  double matmulFlopsPerStep = 0;   ///< GEMMs only with recompute (Megatron's count)
  double mfu = 0, hfu = 0;
  double modelTflopsPerGpu = 0, hardwareTflopsPerGpu = 0,
         megatronTflopsPerGpu = 0;
  /// Factor applied to the description's byte figures: the precision's
  /// value size over the stored one (a model stored in fp32 is costed at
  /// 0.5 under bf16 mixed precision, at 1 under fp32).
  double valueScale = 1;
  double peakMemory = 0; ///< largest RankMemory::total
  bool fits = true;      ///< every rank's memory within HBM
  std::vector<std::string> warnings;
};

struct EvaluateOptions {
  /// Also simulate with free communication to report exposedComm.
  bool exposedComm = true;
  /// Keep the schedule and timeline in the Plan (the reports need them).
  bool keepTimeline = true;
  /// Plan each rank's step buffer (RankMemory::stepBuffers): the
  /// compiler's memory plan over every call, longer than the rest of an
  /// evaluation for long pipelines; --search, which does not report it,
  /// skips it.
  bool stepBuffers = true;
  /// Without recompute, what the compiled program's forwards keep per
  /// schedule module (packed bytes), and their boundary outputs', as
  /// `lamina compile` outlines the model (`lamina plan --loss ...`). Used,
  /// and the step buffers exact, when the boundaries equal the plan's (the
  /// same modules, the same micro-batch); empty: the residuals are
  /// estimated by each module's activation bytes.
  std::vector<int64_t> residualBytes, boundaryBytes;
  /// With tp > 1, per schedule module as `lamina compile --tp` splits it
  /// (`lamina plan --tp --loss ...`, ir::dist::describeCompiledModules): the
  /// bytes its forward and its backward move on tensor-parallel
  /// collectives per micro-batch and their ring steps (latencies), the
  /// trainable elements one rank holds, and the bytes of its boundary
  /// outputs one rank sends. Empty: estimated (Megatron-LM: four
  /// all-reduces per layer, every weight split, boundaries scattered and
  /// gathered again).
  std::vector<double> tensorParallelForwardBytes, tensorParallelBackwardBytes,
      tensorParallelForwardSteps, tensorParallelBackwardSteps,
      tensorParallelParams, tensorParallelSends;
};

/// The imbalance module `m` is priced with under `config`:
/// PlanConfig::moeImbalance, at most what one rank can receive (every
/// rank's T tokens sending it min(k, E / ep) rows each: min(ep, E / k)
/// times the mean), so 1 with ep == 1 (one GPU runs every expert, its
/// FLOPs the same however the tokens are routed) and for dense modules.
double moeImbalance(const ModuleDesc &m, const PlanConfig &config);
/// How many GPUs share module m's experts, each holding its block whole:
/// --ep's replicas, else the tensor-parallel group when it divides them
/// (dist-tp-plan's split), else 1.
int expertSplit(const ModuleDesc &m, const PlanConfig &config);

/// Checks --moe-imbalance: a finite factor >= 1, above 1 only for a model
/// with mixture-of-experts layers.
schedule::Status checkMoeImbalance(const ModelDesc &desc, double factor);

/// Checks the configuration against the model (ranges, p <= layers, chunks
/// that divide); the message names the offending option.
schedule::Status checkConfig(const ModelDesc &desc, const PlanConfig &config);

/// The schedule modules of `config` with their durations and sizes (what
/// evaluatePlan simulates), without simulating.
schedule::Expected<std::vector<Stage>> priceStages(const ModelDesc &desc,
                                                   const PlanConfig &config,
                                                   const Hardware &hardware);

/// Prices `config`; fails with a message for invalid configurations.
schedule::Expected<Plan> evaluatePlan(const ModelDesc &desc,
                                      const PlanConfig &config,
                                      const Hardware &hardware,
                                      const EvaluateOptions &options = {});

/// Seconds of one ring collective moving `factor * bytes` per GPU over `n`
/// ranks in `steps` latency steps, and of one point-to-point transfer.
double ringTime(double factor, double bytes, int steps, double bandwidth,
                double latency);

} // namespace lamina::plan

#endif // LAMINA_PLAN_COSTMODEL_H
