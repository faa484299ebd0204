//===- Executor.h - one rank of a distributed training step -----*- C++ -*-===//
//
// The state one rank holds (its modules' parameters, gradients, optimizer,
// the step buffer) and what its compiled step's calls do (DistProgram.h,
// StepLibrary.cpp). DistTrain.cpp drives it; DistCheckpoint.cpp
// saves, restores and exports its parameters. docs/distributed.md.
//
// Every buffer the functions or the network touch lives in the memory of
// the program's Device (DeviceBuffer): parameters, gradients, shards,
// gathered weights, the step buffer (boundaries, residuals), the arena, the
// token batch, the optimizer state. The host keeps only what it reads itself --
// the token batch it samples, the losses at the end of a step, the copies
// checkpoints and exports are written from (stateToHost / stateToDevice).
// Transfers go through a Communicator (MPI or NCCL).
//
// Parameters: per module a flat f32 layout of the trainable parameters it
// alone reads (forward arg order); a parameter read by more than one module
// ("shared", e.g. tied embeddings) has its own buffer on every holder, is
// never sharded, and its gradient is summed with one all-reduce over all of
// its holders (every pipeline rank reading it, every replica) before the
// optimizer. Functions that read ParamCopy arguments (--precision bf16/f16)
// get them from a flat f16/bf16 copy per module and one per shared
// parameter, which setupCopies/refreshCopies and the optimizer's update keep
// equal to the cast of the f32 parameters. Modules that read nothing else
// (ModuleSpec::copiesOnly) at levels 1-3 keep only their shard of the f32
// parameters and all-gather the copies instead: at level 3 the shard's
// copy for each run, at levels 1-2 the flat copy once a step.
//
// Private to lamina_dist.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_EXECUTOR_H
#define LAMINA_LIB_RUNTIME_DIST_EXECUTOR_H

#include "Communicator.h"
#include "ControlPlane.h"
#include "TensorParallelGroup.h"

#include "../Program/Batches.h"
#include "../Program/TrainCommon.h"

#include "lamina/Runtime/Checkpoint.h"
#include "lamina/Runtime/Device.h"
#include "lamina/Runtime/DistProgram.h"
#include "lamina/Runtime/Optimizer.h"
#include "lamina/Schedule/Schedule.h"
#include "lamina/Runtime/TensorIO.h"
#include "lamina/Runtime/TokenData.h"

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lamina::rt::dist {

/// One call of the step library (DistProgram.h, namespace step) as the
/// executor's methods take it: kind and payload are
/// lamina::schedule::ActionKind / Payload values, peer a global rank.
struct ActionSpec {
  uint8_t kind;
  uint8_t payload;
  int32_t module;
  int32_t microBatch;
  int32_t peer;
};

/// Tensors packed in one buffer (a boundary's values, 64-byte aligned each).
struct Packed {
  struct Item {
    DType dtype;
    int rank;
    const int64_t *shape;
    size_t offset, bytes;
  };
  std::vector<Item> items;
  size_t bytes = 0;
  void add(DType dtype, int rank, const int64_t *shape);
  /// What travels between ranks: up to the end of the last item (the
  /// padding after it is not sent, nor counted).
  size_t wireBytes() const {
    return items.empty() ? 0 : items.back().offset + items.back().bytes;
  }
  Tensor view(char *base, size_t i) const {
    const Item &it = items[i];
    return Tensor{base + it.offset, it.dtype, it.rank, it.shape};
  }
};

/// A parameter (or constant) some local module reads.
struct Param {
  std::string name;
  const ArgSpec *arg = nullptr;
  bool trainable = false;
  bool shared = false; ///< read by more than one module, or `expert`
  /// A layer's experts split over the expert-parallel group
  /// (ArgSpec::expertSplit): this rank's block, held like a shared
  /// parameter (own buffers) whose holders are the replicas with the same
  /// block (this rank alone when the group is all replicas); the
  /// all-to-alls already summed its gradient over the group's tokens.
  bool expert = false;
  int module = -1;     ///< the module reading it (not shared)
  int64_t flatOffset = 0, size = 0;
  // Shared parameters: whole on every holder (own, ownGrad, ownCopy hold
  // holderShards.fullCapacity elements when sharded, zero padding).
  DeviceBuffer own, ownGrad;
  DeviceBuffer ownCopy; ///< shared, read as a ParamCopy: its f16/bf16 copy
  std::vector<float> hostOwn; ///< shared: what checkpoints read and write
  DeviceBuffer constant;      ///< constants
  int holders = -1;           ///< shared: group of all holders, all replicas
  bool countsForNorm = false; ///< shared: this rank counts it in --clip
  /// Shared at ZeRO >= 1 with several holders: the gradient is
  /// reduce-scattered over the holders, the optimizer updates (and keeps
  /// state for) this holder's part only, and the parameter is all-gathered
  /// after the update (ZeRO 1 for a tied parameter, which every holder
  /// reads whole in each step).
  bool shardsOwn = false;
  /// shardsOwn and every reader reads the copy only (ModuleSpec::copiesOnly):
  /// the f32 parameter is held as the part only (ownShard) and the update's
  /// copies are gathered; else `own` stays whole and is gathered in f32.
  bool ownCopiesOnly = false;
  ShardLayout holderShards;            ///< shardsOwn: the cut over the holders
  int holderIndex = -1;                ///< shardsOwn: this rank's member index
  int64_t partLen = 0;                 ///< shardsOwn: the elements of this part
  DeviceBuffer ownShard; ///< shardsOwn, ownCopiesOnly: this holder's part
  /// shardsOwn: where the reduce-scatter leaves this holder's part of the
  /// summed gradient: in place, in ownGrad at the part's offset (NCCL's
  /// in-place convention), so no second buffer holds it.
  float *partGrad = nullptr;
  Request ownGatherReq; ///< shardsOwn: the gather after the update
  Request sumReq;       ///< the gradient sum over the holders
  /// The step summed (and waited for) its gradient; the optimizer checks.
  bool summed = false;
  /// Trainable: a backward of this step has written its gradient (the
  /// first writes it over whatever the buffer held; zeroGrads resets it).
  bool gradWritten = false;
};

struct ModuleState {
  int index = -1;
  std::vector<int> params; ///< non-shared trainables, forward arg order
  int64_t size = 0;        ///< elements of the flat layout
  ShardLayout shards;      ///< over the replicas
  /// Flat buffers hold shards.fullCapacity elements, shard buffers
  /// shards.shardCapacity (zero padding). Level 3 (and gathersCopies) has
  /// no flatParam; levels 2-3 no flatGrad (runGrad).
  DeviceBuffer flatParam, flatGrad, shardParam, shardGrad;
  /// Levels 2-3: the run's full gradient, in the step buffer where the
  /// compiler placed it (the run's first accumulate takes it, its
  /// reduce-scatter hands it over); null between runs.
  float *runGrad = nullptr;
  /// The flat parameters' f16/bf16 copy (Executor::copyType), when the
  /// module's functions read ParamCopy arguments: levels 0-2 the whole
  /// layout, level 3 the shard's (shards.shardCapacity elements), which
  /// the all-gather before each run assembles.
  DeviceBuffer flatCopy, shardCopy;
  /// Levels 1-2 when the functions read only the copies
  /// (ModuleSpec::copiesOnly): the step's all-gather moves flatCopy, the
  /// optimizer having stored this rank's part, and the f32 parameters
  /// are held as the shard only (no flatParam), as at level 3.
  bool gathersCopies = false;
  Request gradReq, paramReq;
  // Level 3: the gathers in flight, each into the step buffer.
  struct Gather {
    char *full = nullptr;
    Request req;
  };
  std::deque<Gather> gathers;
  void *active = nullptr; ///< the full weights (or copies) of the current run
  int64_t shardLen = 0; ///< this rank's part of the flat layout
  /// Levels 2-3: reduce-scattered this step (Executor::Scatter).
  bool scatteredThisStep = false;
  /// Levels 1-3: this rank's shard of the step's summed gradient, which
  /// the optimizer reads. Level 1 reduce-scatters in place, so it is
  /// flatGrad at the shard's offset (the whole gradient lives for the
  /// step anyway); levels 2-3 shardGrad, which outlives the pooled full
  /// gradients.
  float *gradShard = nullptr;
  /// What checkpoints read and write: the shard (level 3) or the flat
  /// parameters.
  std::vector<float> hostParam;
};

/// An optimizer "parameter": a whole parameter or a piece of a shard.
struct Segment {
  std::string name;
  std::vector<int64_t> shape;
  float *param = nullptr, *grad = nullptr; ///< device memory
  /// Where the update also stores the parameter rounded to the program's
  /// copy type (null: nothing, or level 1-2 modules that gather their f32
  /// parameters and cast them after the all-gather instead).
  void *copy = nullptr;
  bool countsForNorm = true;
  int rank = 0; ///< the whole parameter's (--no-decay-vectors)
  Tensor paramView() const {
    return Tensor{param, DType::F32, int(shape.size()), shape.data()};
  }
  Tensor gradView() const {
    return Tensor{grad, DType::F32, int(shape.size()), shape.data()};
  }
  Tensor copyView(DType type) const {
    return Tensor{copy, type, int(shape.size()), shape.data()};
  }
};

struct TraceEvent {
  const char *cat;
  std::string name;
  double start, dur; ///< seconds, relative to the trace start
};

class Executor {
public:
  Executor(const DistSpec &spec, const TrainOptions &options,
           ControlPlane &control, Communicator &net, Device &device)
      : spec(spec), o(options), control(control), net(net), device(device) {}

  /// Checks the spec, creates the communicators (collective over the
  /// world), loads this rank's weights, builds the optimizer.
  Status setup();
  /// One training step: samples the global batch, runs this rank's compiled
  /// step, which applies the optimizer. `loss` is the global loss (every
  /// rank).
  Status step(int64_t stepIndex, double &loss);
  /// The validation loss (--eval-data): the mean over --eval-batches
  /// global batches, drawn by evalSampler(), of the evaluation step's loss
  /// (every rank; collective).
  Status evaluate(double &loss);

  /// What the step library's calls do (StepLibrary.cpp). Peers in `a` are
  /// global ranks; offsets are into the step buffer (-1: none).
  Status forward(int module, int mb, int64_t in, int64_t res, int64_t out);
  Status backward(int module, int mb, int64_t in, int64_t res, int64_t cot,
                  int64_t out);
  /// The last backward's (module k's) parameter gradients, from the arena,
  /// added to the module's (levels 2-3: the run's full gradient at `into`)
  /// and the shared parameters'.
  Status accumulate(int k, int64_t into);
  /// Module k's oldest gradient reduction waited for: levels 0-1 its
  /// all-reduce (in-place reduce-scatter); levels 2-3 the oldest
  /// reduce-scatter in flight, which must be k's.
  Status waitGradients(int k);
  Status send(const ActionSpec &a, int64_t at);
  /// Waits for the send `a` (its bytes may then be written again).
  Status waitSend(const ActionSpec &a);
  Status recv(const ActionSpec &a, int64_t at);
  /// Posts the receive `a` (a later recv of the same transfer waits for it).
  Status postRecv(const ActionSpec &a, int64_t at);
  /// A module's collective; ZeRO's buffers at the step buffer's offsets
  /// `at` (level 3's gathered weights, levels 2-3's full gradient) and
  /// `part` (a later reduce-scatter's part), -1 for none.
  Status collective(const ActionSpec &a, int64_t at = -1, int64_t part = -1);
  /// ZeRO 3: module k's oldest all-gather waited for and made the weights
  /// its calls read; the previous run's are freed.
  Status useWeights(int k);
  Status optimizerStep();
  /// Levels 1-2: module k's parameter all-gather after the optimizer
  /// waited for, then the copies cast (unless they were gathered).
  Status waitWeights(int k);
  /// A shared trainable's gradient sum over its holders (reduce-scatter
  /// into its part when shardsOwn, else all-reduce), its wait, the
  /// all-gather of its updated parts (shardsOwn) and that one's wait.
  Status sumShared(const std::string &name);
  Status waitSharedSum(const std::string &name);
  Status startSharedGather(const std::string &name);
  Status waitSharedGather(const std::string &name);
  /// Tests the sends in flight (after each call: MPI progresses a transfer
  /// only inside its calls).
  Status progressSends();
  /// This rank's pipeline rank and replica index.
  int pipelineRank() const { return pp; }
  int replica() const { return dp; }

  // Configuration.
  const DistSpec &spec;
  const TrainOptions &o;
  ControlPlane &control; ///< the host control plane (MPI or TCP)
  Communicator &net; ///< the data plane, on device memory
  Device &device;
  int rank = 0, pp = 0, dp = 0, zero = 0; ///< zero: effective level
  int dpGroup = -1;                        ///< net's group of this stage
  /// Expert parallelism: the expert-parallel group's size (0: none), and
  /// net's group of the replicas holding this rank's expert block.
  int experts = 0, expertHolders = -1;
  /// This rank's index in its tensor-parallel group (DistSpec::tp), and
  /// the group (spec.tp > 1), which the module functions' collectives run
  /// on (setTensorParallelGroup).
  int tpIndex = 0;
  std::unique_ptr<CommTensorParallelGroup> tpGroup;
  /// The expert-parallel group (the stage's replicas) when a module's
  /// experts are split (ArgSpec::expertSplit), which graph.moe_exchange
  /// runs on (setExpertParallelGroup).
  std::unique_ptr<CommExpertParallelGroup> epGroup;
  /// The global rank of pipeline rank `p` in replica `d` with this rank's
  /// tensor-parallel index.
  int globalRank(int d, int p) const {
    return (d * spec.pp + p) * spec.tp + tpIndex;
  }
  /// seq: the positions (elements) of one example of the input the loss
  /// counts, for the logged tokens/s.
  int64_t microBatch = 0, seq = 0, globalBatch = 0;
  /// The type of the parameters' copies the functions read (ParamCopy
  /// arguments, dist-hoist-param-casts); F32 when they read none.
  DType copyType = DType::F32;
  std::string modelPath;

  // State.
  std::vector<Param> params;
  std::map<std::string, int> paramIndex;
  std::vector<ModuleState> modules; ///< indexed by module; local ones used
  std::vector<int> localModules;
  std::vector<Segment> segments;
  Optimizer opt;
  LrSchedule sched;
  /// Every input the modules read (by name), the global batch of each,
  /// drawn here by every rank alike, and on the device; a module reads its
  /// micro-batch's rows.
  std::vector<BatchSlot> slots;
  std::map<std::string, int> slotIndex;
  std::unique_ptr<BatchSource> data, evalData;
  std::vector<OwnedTensor> batchHost;
  std::vector<Tensor> batchViews;
  std::vector<DeviceBuffer> batchDevice;
  int counted = -1; ///< the slot lossWeights counts (countedSlot)
  bool skipFirst = false;
  DeviceBuffer arena;
  size_t arenaBytes = 0;
  /// What the step holds between its calls (boundary values, their
  /// gradients, residuals) at the offsets its calls give: the larger of
  /// this pipeline rank's training and evaluation steps' planned bytes.
  /// ZeRO's gathered weights, full gradients and scatter parts too.
  DeviceBuffer stepBuffer;

  /// Views of what a checkpoint of this rank holds: host copies, current
  /// after stateToHost; stateToDevice makes them the device's state.
  std::vector<NamedView> stateViews();
  Status stateToHost() { return transferState(true); }
  Status stateToDevice() { return transferState(false); }
  /// The full f32 value of the trainable `p` (this rank holds it; level 3
  /// all-gathers its module first: collective over the dp group).
  Status parameterToHost(const Param &p, float *out);
  /// Device bytes of the training state this rank keeps between steps:
  /// parameters, their copies, gradients and optimizer state (--stats).
  size_t stateBytes() const;
  /// The shared trainables, by name: the order of their collectives.
  std::vector<Param *> sharedByName();
  /// The full f32 vector (layout.fullCapacity elements) of which this
  /// rank holds `part`, member `index`'s cut of `layout`: all-gathered
  /// over `group` (collective) and read back. The export's gather of
  /// sharded parameters.
  Status gatherToHost(const DeviceBuffer &part, const ShardLayout &layout,
                      int index, int group, std::vector<float> &out);
  /// Whether M's f32 parameters are held as this rank's shard only
  /// (shardParam: level 3, or levels 1-2 gathering the copies).
  bool shardsParams(const ModuleState &M) const {
    return zero == 3 || M.gathersCopies;
  }

  // Statistics and trace.
  double busySeconds = 0, traceStart = 0;
  /// What the evaluations sent (not the training's: --stats).
  uint64_t evalP2pBytes = 0;
  double evalCollectiveBytes = 0, evalTpBytes = 0, evalEpBytes = 0;
  /// And the copies' gathers outside the steps (gatherCopies).
  double copyGatherBytes = 0;
  /// Levels 2-3: bytes (unpadded) of full gradients and reduce-scatter
  /// results held at once, and their peak (--stats).
  size_t gradBytes = 0, peakGradBytes = 0;
  bool tracing = false;
  std::vector<TraceEvent> events;

private:
  /// Waits (deadline, abort) for the all-gather of module k's weights.
  Status waitForWeights(Request &req, int k);
  /// stateToHost (toHost) or stateToDevice.
  Status transferState(bool toHost);
  Status setupModules();
  Status setupParams();
  /// The ParamCopy arguments: their type, and the copies' buffers.
  Status setupCopies();
  /// Every local copy cast from its parameters (at the start, after a
  /// restore; at a step's end for levels 1-2, after the all-gather; level
  /// 3's shard copies only at the start and after a restore).
  Status refreshCopies();
  /// Levels 1-2 gathering copies: module k's flat copy cast from this
  /// rank's shard and all-gathered (collective; at the start and after a
  /// restore).
  Status gatherCopies(int k);
  /// `to` (a copy buffer; none: nothing) = the `count` f32 values of
  /// `from` cast to copyType.
  Status castCopy(const DeviceBuffer &from, DeviceBuffer &to,
                  const int64_t &count);
  void setupSegments();
  /// A shared trainable's buffers and sharding (holders: the pipeline
  /// ranks holding it; readers: the modules reading it).
  Status setupShared(Param &p, const std::vector<int> &holders,
                     const std::vector<int> &readers, const OwnedTensor &init);
  /// `count` f32 values of `part` cast into `copy` at element `offset`
  /// (a rank's shard into the copy an all-gather then completes).
  Status castPart(const DeviceBuffer &part, int64_t count, DeviceBuffer &copy,
                  int64_t offset);
  /// shardsOwn parameters: the parameter's (or copy's) all-gather over
  /// the holders posted; its wait, then the whole copy cast from the
  /// gathered f32 parameter.
  Status gatherShared(Param &p);
  Status waitShared(Param &p);
  /// The shared trainable `name` this rank holds (aborts when none: the
  /// step names only its own).
  Param &sharedParam(const std::string &name);
  Status zeroGrads();
  const FunctionSpec &fn(int module, bool backward) const {
    return backward ? spec.modules[module].backward
                    : spec.modules[module].forward;
  }
  Status setupOptimizer();
  /// The tag of a transfer: unique per boundary, micro-batch and direction.
  int tagOf(const ActionSpec &a) const {
    return (a.microBatch * spec.numModules + a.module) * 2 +
           (schedule::Payload(a.payload) == schedule::Payload::ActivationGrad);
  }
  Status connectTransfers();
  Status bindForwardArgs(int module, int mb, int64_t in,
                         std::vector<Tensor> &args);
  /// The step buffer at `offset`, which must hold `bytes` (aborts
  /// otherwise: the program is inconsistent); `what` and `index` name the
  /// value.
  char *stepAt(int64_t offset, size_t bytes, const char *what, int index);
  char *stepAt(int64_t offset, const Packed &lay, const char *what, int index) {
    return stepAt(offset, lay.bytes, what, index);
  }
  Status runFunction(const FunctionSpec &f, std::vector<Tensor> &args,
                     const char *cat, std::string name);
  /// `lay`'s function outputs (offsets in the arena, from output `first`)
  /// packed at `out`.
  Status packOutputs(const FunctionSpec &f, int first, const Packed &lay,
                     char *out);
  void endRun();
  /// ZeRO 3: aborts unless module k's gathered weights are in use.
  void checkRun(int k);
  /// The global batch drawn from `from` by `r`, on the device, with the
  /// micro-batches' loss weights.
  Status loadBatch(BatchSource &from);
  /// Runs `fn` (this rank's compiled step), then waits for what it leaves
  /// in flight; `loss` the global loss of the batch (collective).
  Status runStep(StepFn fn, int64_t stepIndex, double &loss);
  /// The step being run (optimizerStep's learning rate): -1 evaluating.
  int64_t stepIndex = -1;
  /// Evaluating: forwards keep no residuals and drop their inputs.
  bool evaluating = false;
  /// Levels 2-3: the oldest reduce-scatters waited for and added to their
  /// modules' shard gradients (their buffers freed), all but the newest
  /// `keep` (waitGradients retires one at a time, where the compiler placed
  /// it: lamina::schedule::lowerStep).
  Status retireScatters(size_t keep);
  /// Levels 2-3: module M's full gradient for its next run, at `into`.
  Status takeRunGradient(ModuleState &M, int64_t into);
  /// Levels 2-3: a run's full gradient being reduce-scattered. The step's
  /// first one of a module lands in its shardGrad; a later one (level 3,
  /// several runs a step) in `part`, which retireScatters adds to it.
  /// Both in the step buffer.
  struct Scatter {
    int module = -1;
    float *full = nullptr, *part = nullptr;
    Request req;
    size_t counted = 0; ///< its bytes in gradBytes
  };
  std::deque<Scatter> scatters; ///< in flight, in issue order
  void countGrad(size_t bytes) {
    gradBytes += bytes;
    peakGradBytes = std::max(peakGradBytes, gradBytes);
  }
  Status zeroBuffer(DeviceBuffer &b) { return device.fillZero(b.data(), b.bytes()); }
  /// A persistent zeroed buffer (gradients), outside the pool.
  Status allocateZeroed(DeviceBuffer &b, size_t bytes) {
    if (Status s = b.allocate(device, bytes); !s.ok())
      return s;
    return zeroBuffer(b);
  }
  void record(const char *cat, std::string name, double t0, double t1) {
    if (tracing)
      events.push_back({cat, std::move(name), t0 - traceStart, t1 - t0});
  }

  std::vector<Packed> actLayout, gradLayout; ///< per boundary
  std::map<int, Packed> resLayout;           ///< per local module
  struct SendRecord {
    Request req;
    std::string what;
    int peer = -1;
  };
  std::map<std::pair<int, int>, SendRecord> sends; ///< (peer, tag)
  struct PostedRecv {
    Request req;
    int64_t offset = -1;
  };
  std::map<std::pair<int, int>, PostedRecv> postedRecvs; ///< (peer, tag)
  std::vector<float> lossOf; ///< per micro-batch of this replica
  std::vector<float> weightOf;
  /// Device copies: the losses the last module's forwards wrote, the loss
  /// weights its backwards read, the gradient norm's square.
  DeviceBuffer deviceLoss, deviceWeight, deviceNorm;
  /// The optimizer state on the device, [segment * slots + slot] (the
  /// host Optimizer's own buffers on the host device).
  std::vector<DeviceBuffer> stateBuffers;
  std::vector<Tensor> deviceState;
  double lossSum = 0;
  int runModule = -1; ///< ZeRO 3: whose gathered weights are in use
  /// The module whose backward left its parameter gradients in the arena
  /// for accumulate (-1: none).
  int accumulatePending = -1;
};

} // namespace lamina::rt::dist

namespace lamina::rt {
/// What a compiled step's calls carry (DistProgram.h): the rank's executor
/// and the first error, after which the step's later calls do nothing.
struct StepState {
  dist::Executor &ex;
  Status status = Status::success();
};
} // namespace lamina::rt

#endif // LAMINA_LIB_RUNTIME_DIST_EXECUTOR_H
