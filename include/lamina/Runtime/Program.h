//===- Program.h - the driver of a generated program ------------*- C++ -*-===//
//
// `lamina compile` emits one C++ file that defines the model's entry
// function and a ProgramSpec describing its signature, then calls
// programMain. Everything that is not the model itself lives here, in the
// runtime: command-line parsing, reading the weights from the ONNX file (or
// its external data) at start-up, reading and checking the inputs
// (.npy, ONNX TensorProto .pb), allocating the arena, writing the outputs.
//
// No MLIR dependency; protobuf (the vendored onnx-ml.proto) for the weights.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_PROGRAM_H
#define LAMINA_RUNTIME_PROGRAM_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <stddef.h>
#include <stdint.h>
#include <string>

namespace lamina::rt {

class Device;

/// Where an entry argument's value comes from.
enum class ArgKind : uint8_t {
  Input,     ///< --input NAME=FILE on the command line
  Trainable, ///< an ONNX initializer (float parameter)
  Constant,  ///< an ONNX initializer that is not trained
  // Only in distributed programs' module functions (DistProgram.h):
  Boundary,  ///< an activation handed over by the previous module
  Residual,  ///< a forward value kept for the backward
  Cotangent, ///< the gradient of a forward output
  // Only in train steps (graph-hoist-param-casts) and distributed module
  // functions (dist-hoist-param-casts):
  ParamCopy, ///< the f16/bf16 copy of the Trainable argument of the same
             ///< name, which the driver keeps current (trainMain, the
             ///< distributed executor)
};

/// One argument of the entry function, in order. `name` is the ONNX name.
struct ArgSpec {
  const char *name;
  ArgKind kind;
  DType dtype;
  int rank;
  const int64_t *shape; ///< nullptr when rank == 0
  /// Tensor-parallel module functions (DistProgram.h): the dim of the whole
  /// value this rank's block splits over its group (`shape` is the block's);
  /// -1: every rank holds it whole.
  int splitDim = -1;
  /// The whole split dim is this many equal parts side by side (a fused
  /// q/k/v projection's three): a rank's block holds its share of each part,
  /// the parts in order (the layout graph-tp-regroup-projections gives it).
  int splitParts = 1;
  /// Expert-parallel module functions: a layer's experts (dim 0) split
  /// over groups of this many consecutive replicas of the stage, replica d
  /// holding block d % expertSplit (`shape` is the block's); 0: not split.
  int expertSplit = 0;
};

/// One result of the entry function: it lives in the arena at `offset`.
struct OutputSpec {
  const char *name;
  DType dtype;
  int rank;
  const int64_t *shape;
  size_t offset;
};

/// The generated entry: args[i] views the value of ArgSpec i; the arena has
/// arenaBytes bytes, 64-byte aligned. Errors are reported through
/// checkKernel (below), so the entry itself returns nothing.
using EntryFn = void (*)(const Tensor *args, void *arena);

struct ProgramSpec {
  /// The ONNX file the program was compiled from (absolute path). --model
  /// overrides it; weights are read from it and its external data.
  const char *modelPath;
  const ArgSpec *args;
  int numArgs;
  const OutputSpec *outputs;
  int numOutputs;
  size_t arenaBytes;
  EntryFn entry;
};

/// `OUTDIR/run --input NAME=FILE ... --output-dir DIR [--model FILE]
/// [--threads N] [--repeat N] [--time]`; returns the process exit code.
/// Bad input (unknown or missing input names, wrong dtype or shape,
/// unreadable files, a model whose initializers do not match the compiled
/// signature) is an error naming the argument, exit code 1, and no output
/// file written.
int programMain(int argc, char **argv, const ProgramSpec &spec);
/// The same on `device` (Device.h): arguments are copied to it, the entry
/// runs there, outputs are copied back before anything is written.
int programMain(int argc, char **argv, const ProgramSpec &spec,
                Device &device);

/// `run --kernels` of every program: sets `threads` (when > 0) on the device
/// and prints what runs the kernels (Device::kernels); the exit code.
int printKernels(Device &device, int64_t threads);

/// What a training program's loss is, which says how micro-batches weigh
/// (distributed programs, run --grad-accum): by their labels' count, or
/// alike.
enum class LossKind : uint8_t {
  CausalLM,     ///< labels are the token window shifted by one
  CrossEntropy, ///< labels come from input `labelsInput`
  Output,       ///< the model's own scalar loss: every part weighs alike
};

/// What a training program knows beyond its ProgramSpec (convert-rt-to-emitc
/// with mode=train emits it): the entry input that takes the labels
/// (nullptr: causal LM, labels come from the inputs), the vocabulary
/// size token ids are checked against (0: unknown, not checked), the
/// evaluation entry (nullptr: none): the forward and loss alone, with the
/// train step's arguments and its one result the loss, for --eval-data;
/// the loss and the label value it ignores (--grad-accum weighs
/// micro-batches by their counted labels, as a larger batch would).
struct TrainSpec {
  const char *labelsInput;
  int64_t vocab;
  const ProgramSpec *eval = nullptr;
  LossKind loss = LossKind::CausalLM;
  int64_t ignoreIndex = -100;
};

/// `OUTDIR/run --data FILE --steps N ...` (lib/Runtime/Program/Train.cpp,
/// docs/training.md "Training executable"): the spec's entry is a train
/// step (result 0 the loss, result i > 0 the gradient of the i-th trainable
/// argument); each step draws a batch, runs it, clips, and applies the
/// optimizer to the parameters in place. Exit codes as programMain.
int trainMain(int argc, char **argv, const ProgramSpec &spec,
              const TrainSpec &train);
/// The same on `device`: parameters (f32 master weights), optimizer state,
/// gradients and the arena live there; batches are copied in per step, the
/// loss out; checkpoints, --dump-outputs and --export copy back to the host.
int trainMain(int argc, char **argv, const ProgramSpec &spec,
              const TrainSpec &train, Device &device);

/// The file programMain writes output `name` to, inside --output-dir:
/// `name` + ".npy", with every byte outside [A-Za-z0-9_.-] (and a leading
/// '.') written as %XX, so "logits" -> "logits.npy", "out:0" ->
/// "out%3A0.npy", "a/b" -> "a%2Fb.npy"; an empty name gives "%.npy". The
/// mapping is injective: distinct outputs never share a file.
std::string outputFileName(const char *name);

/// Called by generated code after every kernel: on error, prints
/// "error: at <where>: <message>" to stderr and exits with status 1.
void checkKernel(const Status &status, const char *where);

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_PROGRAM_H
