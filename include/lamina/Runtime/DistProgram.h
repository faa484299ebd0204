//===- DistProgram.h - what a distributed training program is ---*- C++ -*-===//
//
// `lamina compile --mode train --pp P --dp D ...` emits one SPMD C++ program:
// for every module of the chain a forward and a backward function (each with
// its own arena size), per pipeline rank its compiled step (the verified
// schedule's actions as calls of the step library below), and a DistSpec
// describing them; `main` calls distTrainMain. Every rank runs the same
// binary and picks its step by its rank. docs/distributed.md.
//
// The contract between the compiler (dist-outline-modules,
// convert-dist-to-rt, convert-rt-to-emitc mode=dist) and the runtime
// (lib/Runtime/Dist):
//
// Module k's forward, args in this order:
//   [Boundary  x numIn ]  the activations module k-1 hands over (none for k=0)
//   [Input ...]           model inputs it reads (token ids, labels), by name,
//                         shaped for ONE micro-batch
//   [Trainable|Constant]  the ONNX initializers it reads, by name (a tied
//                         parameter appears in every module that reads it)
//   [ParamCopy ...]       --precision bf16/f16: the f16/bf16 copies of
//                         trainables (named after them) that the forward
//                         or the backward reads instead of casting
//                         (dist-hoist-param-casts); the runtime keeps them.
//                         With ModuleSpec::copiesOnly every weight has one
//                         and the Trainable args are unread
// outputs:
//   [numOut]              the activations for module k+1; for the last module
//                         exactly one: the loss, an f32 scalar (the mean over
//                         the micro-batch)
//   [numResiduals]        values its backward needs (0 when recomputing)
//
// Module k's backward, args: the forward's args in the same order, then
//   [Residual x numResiduals], then [Cotangent x numOut] (the gradient of
//   each forward output; for the last module the loss's weight, see below).
// outputs: [numIn] gradients of the Boundary args, then one gradient per
//   Trainable arg of the forward, in arg order (named "grad:<param>").
//
// Loss weighting: the single-process program minimises the mean over the
// whole global batch (b*m*d sequences). The runtime seeds the last module's
// backward of micro-batch j with count_j / count_total (counts of labels not
// equal to ignoreIndex; every rank can count them, all ranks see the whole
// global batch), so the summed gradients equal the single-process ones.
//
// No MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_DISTPROGRAM_H
#define LAMINA_RUNTIME_DISTPROGRAM_H

#include "lamina/Runtime/Program.h"

#include <stddef.h>
#include <stdint.h>

namespace lamina::rt {

/// One compiled function (a module's forward or backward). ArgSpec::kind is
/// Boundary, Input, Trainable, Constant, Residual or Cotangent.
struct FunctionSpec {
  const char *name; ///< "fwd_3", "bwd_3"
  const ArgSpec *args;
  int numArgs;
  const OutputSpec *outputs; ///< offsets into this function's own arena
  int numOutputs;
  size_t arenaBytes;
  EntryFn entry;
};

/// Module k of the chain as the schedule sees it: a layer, with the
/// embedding merged into the first and the head (and loss) into the last.
struct ModuleSpec {
  const char *name; ///< e.g. "layer.0" or "embedding+layer.0"
  FunctionSpec forward;
  FunctionSpec backward;
  int numIn;        ///< Boundary args of forward (0 for module 0)
  int numOut;       ///< boundary outputs (1 = the loss for the last module)
  int numResiduals; ///< 0 when the backward recomputes the forward
  /// The functions read every trainable weight through its ParamCopy
  /// argument and never the Trainable one (--param-reads=copies), which
  /// the runtime leaves unbound (null); ZeRO 3 then gathers the copies.
  bool copiesOnly;
};

/// One rank's state in a step: its executor (lib/Runtime/Dist), which
/// holds the parameters, gradients, optimizer, the buffers in flight and
/// the communicator.
struct StepState;
/// A compiled step of one pipeline rank (convert-dist-to-rt): its actions
/// in schedule order as calls of the functions below.
using StepFn = void (*)(StepState *);

struct DistSpec {
  const char *modelPath; ///< as ProgramSpec::modelPath
  const ModuleSpec *modules;
  int numModules;
  int pp, dp, microBatches, zero;
  const char *schedule; ///< "gpipe", "1f1b", ... (schedule::scheduleKindName)
  bool recompute;
  /// Per pipeline rank its training step; the dp replicas (and tp members)
  /// of a pipeline rank run the same one. Global rank: see `tp`.
  const StepFn *steps;
  /// Per pipeline rank its evaluation (forward-only) step, or nullptr.
  const StepFn *evalSteps;
  /// Per pipeline rank the bytes of its training (evaluation) step's
  /// buffer: what the step holds between its calls, at the offsets its
  /// calls pass (lamina::schedule::planStepBuffers).
  const int64_t *stepBufferBytes;
  const int64_t *evalStepBufferBytes; ///< nullptr with no evaluation step
  /// The directed pairs of pipeline ranks the steps send over, as
  /// (from, to) pairs: numEdges * 2 entries. The communicator connects them
  /// (in every replica) before the first step.
  const int *edges;
  int numEdges;
  int numRanks;          ///< pp * dp * tp
  const int *moduleRank; ///< pipeline rank of each module
  /// Elements of each module's flat layout (the trainable parameters only
  /// it reads): the compiler sized ZeRO's step-buffer slots from them.
  const int64_t *flatParams;
  LossKind loss;
  const char *labelsInput; ///< CrossEntropy: the labels input, else nullptr
  int64_t vocab;           ///< 0: unknown (ids not checked)
  int64_t ignoreIndex;     ///< labels equal to it do not count
  /// Ranks per tensor-parallel group (1: none). Its members run the same
  /// step on the same batch, each on its blocks of the split weights
  /// (ArgSpec::splitDim); their functions call TensorParallel.h. Global
  /// rank g = (dp_index * pp + pp_index) * tp + tp_index: a group's
  /// members are neighbours, as on one node.
  int tp = 1;
};

/// The step library: what a compiled step calls, in its order. A failed call
/// records its error in the state and makes the later calls of the step do
/// nothing; the driver reports it (every rank exits). Peers are pipeline
/// ranks of the caller's replica. Each function is named after the rt op
/// it lowers (`rt.step_wait_shared_sum`: waitSharedSum; RtStepOps.td), but
/// `rt.step_call`, which is forward or backward. Offsets (`in`, `at`, ...)
/// are bytes into the rank's step buffer, planned by the compiler; -1: the
/// call has no such value.
namespace step {
/// What a transfer moves: boundary `boundary`'s activations (module
/// `boundary`'s outputs) or their gradients.
enum class Payload : int { Activation, Gradient };
/// Module `module`'s forward on micro-batch `mb`: reads the boundary values
/// at `in` (module > 0), the micro-batch's inputs and the parameters;
/// writes its residuals at `res` and its outputs at `out` (the last
/// module: the loss, kept by the runtime).
void forward(StepState *s, int module, int mb, int64_t in, int64_t res,
             int64_t out);
/// Its backward: reads what the forward did, the residuals at `res` and
/// the gradient of its outputs at `cot` (the last module: the micro-batch's
/// loss weight), writes the gradient of its inputs at `out`; its parameter
/// gradients stay in the arena for accumulate.
void backward(StepState *s, int module, int mb, int64_t in, int64_t res,
              int64_t cot, int64_t out);
/// Adds the last backward's (module `module`'s) parameter gradients to the
/// module's (and the shared parameters'); at ZeRO 2-3 the module's full
/// gradient of the run lies at `into` (the run's first accumulate starts
/// it), else -1.
void accumulate(StepState *s, int module, int64_t into);
/// Waits for module `module`'s oldest gradient reduction in flight.
void waitGradients(StepState *s, int module);
/// Starts sending boundary `boundary`'s values of micro-batch `mb`, at `at`.
void send(StepState *s, Payload what, int boundary, int mb, int peer,
          int64_t at);
/// Waits for that send: its bytes may be written again after it.
void waitSend(StepState *s, Payload what, int boundary, int mb, int peer);
/// Posts a receive into `at` that a later recv of the same transfer waits
/// for.
void postRecv(StepState *s, Payload what, int boundary, int mb, int peer,
              int64_t at);
/// Waits for a receive (posting it first when no postRecv did).
void recv(StepState *s, Payload what, int boundary, int mb, int peer,
          int64_t at);
/// The data-parallel collectives of a module (started, not waited for).
/// ZeRO 3's all-gather gathers the weights of the module's next run at
/// `at` (levels 1-2: in place, -1); at levels 2-3 the reduce-scatter
/// reads the run's full gradient at `full` and, for a later one of the
/// step, leaves its part at `part` (-1: into the gradient shard).
void allGather(StepState *s, int module, int64_t at);
void reduceScatter(StepState *s, int module, int64_t full, int64_t part);
void allReduce(StepState *s, int module);
/// ZeRO 3: waits for the module's oldest all-gather; its calls read it
/// until the next useWeights or the optimizer step.
void useWeights(StepState *s, int module);
/// The optimizer step of every module on the rank (after every gradient
/// reduction and shared sum was waited for).
void optimizer(StepState *s);
/// Levels 1-2: waits for module `module`'s parameter all-gather after the
/// optimizer (and casts the copies the functions read).
void waitWeights(StepState *s, int module);
/// A shared parameter (read by modules on several ranks: a tied
/// embedding): its gradient sum over the holders started and waited for,
/// and at ZeRO >= 1 the all-gather of its updated parts.
void sumShared(StepState *s, const char *param);
void waitSharedSum(StepState *s, const char *param);
void gatherShared(StepState *s, const char *param);
void waitSharedGather(StepState *s, const char *param);
} // namespace step

/// `mpirun -np P*D OUTDIR/run --data FILE --steps N ...`: the training
/// flags of trainMain plus --trace FILE and --comm-timeout S
/// (docs/distributed.md). Exit code 0 on success, 1 on any error (every
/// rank exits; a dead peer is reported within the timeout, never a hang).
int distTrainMain(int argc, char **argv, const DistSpec &spec);
/// The same on `device` (hostDevice() above; LAMINA_STAGED_DEVICE=1 makes
/// it the staged one), communicating over MPI. A CUDA program calls
/// lamina::rt::cuda::distTrainMain (Cuda/DistProgram.h: NCCL) instead.
class Device;
int distTrainMain(int argc, char **argv, const DistSpec &spec, Device &device);

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_DISTPROGRAM_H
