//===- Evaluator.h - run an imported graph on the host kernels --*- C++ -*-===//
//
// A reference evaluator: executes the graph ops of an imported module's
// @forward function one by one with the lamina_runtime kernels, so the
// importer can be checked numerically (ONNX backend node tests, onnxruntime)
// before code generation exists. It is slow and simple by design: every
// value gets its own buffer, nothing is fused or reused.
//
// Errors are returned as messages ("" on success); an op that fails names
// its location (the ONNX node name).
//
//===----------------------------------------------------------------------===//
#ifndef LAMINA_EVAL_EVALUATOR_H
#define LAMINA_EVAL_EVALUATOR_H

#include "lamina/Runtime/Tensor.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringRef.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lamina::eval {

/// An owning dense row-major host tensor (8-byte aligned storage).
struct HostTensor {
  rt::DType dtype = rt::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;

  HostTensor() = default;
  HostTensor(rt::DType dtype, std::vector<int64_t> shape);

  int64_t numElements() const;
  size_t byteSize() const { return size_t(numElements()) * rt::dtypeSize(dtype); }
  void *data() { return storage.data(); }
  const void *data() const { return storage.data(); }
  /// A kernel view; valid while this tensor lives and is not resized.
  rt::Tensor view() const;
};

/// The runtime type of an MLIR element type; false if it has none.
bool dtypeOf(mlir::Type elementType, rt::DType &out);
/// "tensor<2x3xf32>"-style text of a host tensor, for messages.
std::string describe(const HostTensor &t);
/// "tensor<2x3xf32>"-style text of an MLIR type.
std::string describe(mlir::Type type);

/// Materialises `attr` (splat or not) as a host tensor.
std::string fromElementsAttr(mlir::ElementsAttr attr, HostTensor &out);

/// Name -> value of every `trainable` / `constant` argument of `func` (the
/// module's first func.func when `functionName` is empty), read from the
/// initializers of the ONNX model at `modelPath` (main graph and subgraphs;
/// external data resolved in the model's folder).
std::string loadInitializers(mlir::ModuleOp module, llvm::StringRef modelPath,
                             std::map<std::string, HostTensor> &out,
                             llvm::StringRef functionName = "forward");

/// Runs @functionName of `module`. `args` maps every argument's `graph.name`
/// to its value (inputs and parameters); names, element types and shapes are
/// checked. `outputs` receives (output name, value) in result order.
std::string evaluate(mlir::ModuleOp module,
                     const std::map<std::string, HostTensor> &args,
                     std::vector<std::pair<std::string, HostTensor>> &outputs,
                     llvm::StringRef functionName = "forward");

//===----------------------------------------------------------------------===//
// File I/O (NpyIO.cpp)
//===----------------------------------------------------------------------===//

/// Reads a .npy file (little-endian or byte-sized dtypes, C order).
std::string readNpy(llvm::StringRef path, HostTensor &out);
/// Writes `t` as .npy; bf16 has no numpy dtype and is written as f4.
std::string writeNpy(llvm::StringRef path, const HostTensor &t);
/// Reads a serialized onnx TensorProto (`input_0.pb`); `name` receives its
/// name field ("" when unset).
std::string readTensorProto(mlir::MLIRContext *context, llvm::StringRef path,
                            HostTensor &out, std::string &name);

/// Runs @functionName in its SPMD form (upstream's shard-partition over a
/// one-dimensional grid) on `args.size()` ranks in lockstep: each rank's
/// ops on its own values, and at each `shard.all_reduce` (a sum),
/// `shard.all_gather` or `shard.all_slice` every rank's value combined
/// as the collective would. The tensor-parallel check's reference
/// (test/lib/Eval/TpCheck.cpp): one process, no communicator.
std::string evaluateSpmd(
    mlir::ModuleOp module,
    const std::vector<std::map<std::string, HostTensor>> &args,
    std::vector<std::vector<std::pair<std::string, HostTensor>>> &outputs,
    llvm::StringRef functionName);
/// Rank `rank`'s block of `whole` split evenly over `ranks` on each of
/// `splitDims` in turn.
HostTensor shardOf(const HostTensor &whole, llvm::ArrayRef<int64_t> splitDims,
                   int64_t ranks, int64_t rank);

} // namespace lamina::eval

#endif // LAMINA_EVAL_EVALUATOR_H
