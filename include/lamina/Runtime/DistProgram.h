//===- DistProgram.h - what a distributed training program is ---*- C++ -*-===//
//
// `lamina compile --mode train --pp P --dp D ...` emits one SPMD C++ program:
// for every module of the chain a forward and a backward function (each with
// its own arena size), the per-rank action lists of the verified schedule,
// and a DistSpec describing them; `main` calls distTrainMain. Every rank runs
// the same binary and picks its list by its MPI rank. docs/distributed.md.
//
// The contract between the compiler (dist-outline-modules,
// convert-rt-to-emitc mode=dist) and the runtime (lib/Runtime/Dist):
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

/// One action; kind and payload are lamina::schedule::ActionKind / Payload
/// values (include/lamina/Schedule/Schedule.h), fields as documented there.
struct ActionSpec {
  uint8_t kind;
  uint8_t payload;
  int32_t module;
  int32_t microBatch;
  int32_t peer;
};

struct DistSpec {
  const char *modelPath; ///< as ProgramSpec::modelPath
  const ModuleSpec *modules;
  int numModules;
  int pp, dp, microBatches, zero;
  const char *schedule; ///< "gpipe", "1f1b", ... (schedule::scheduleKindName)
  bool recompute;
  /// Global rank g = dp_index * pp + pp_index (Schedule.h) runs
  /// actions[actionBegin[g] .. actionBegin[g+1]).
  const ActionSpec *actions;
  const int *actionBegin; ///< numRanks + 1 entries
  int numRanks;           ///< pp * dp
  const int *moduleRank;  ///< pipeline rank of each module
  LossKind loss;
  const char *labelsInput; ///< CrossEntropy: the labels input, else nullptr
  int64_t vocab;           ///< 0: unknown (ids not checked)
  int64_t ignoreIndex;     ///< labels equal to it do not count
  /// The evaluation (forward-only) step's lists, as actions/actionBegin:
  /// the compiler's verified forward_only schedule (`run --eval-data`).
  const ActionSpec *evalActions;
  const int *evalActionBegin; ///< numRanks + 1 entries
};

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
