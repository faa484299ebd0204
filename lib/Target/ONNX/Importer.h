//===- Importer.h - ONNX import internals -----------------------*- C++ -*-===//
//
// The importer walks ONNX graphs node by node. Each op type has a handler
// (registered by op family in Ops*.cpp) that reads its node through a
// NodeContext and builds graph ops with createOrFold semantics, so shape
// arithmetic folds away as it is built. Opset differences (an attribute that
// became an input) are resolved inside each handler from `ctx.opset`.
//
//===----------------------------------------------------------------------===//
#ifndef LAMINA_LIB_TARGET_ONNX_IMPORTER_H
#define LAMINA_LIB_TARGET_ONNX_IMPORTER_H

#include "ModelLoader.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"

namespace lamina::onnx {

/// What an ONNX value name is bound to during import: a tensor, or (for the
/// sequence ops exporters emit around concatenation) a list of tensors.
struct Slot {
  mlir::Value tensor;
  llvm::SmallVector<mlir::Value> sequence;
  bool isSequence = false;
};

class ModelImporter;
/// The builder the importer inserts ops with.
mlir::OpBuilder &builderOf(ModelImporter &importer);
/// The reader for tensors stored in the model (Constant node values).
TensorReader &tensorReaderOf(ModelImporter &importer);
/// Keeps an initializer that the model only reads as data (a loss's class
/// weights) out of training: its argument becomes `constant`, not
/// `trainable`. No effect on any other value.
void keepConstant(ModelImporter &importer, mlir::Value v);

/// One node being imported: its inputs, attributes (with function-call
/// references already resolved) and the builder.
class NodeContext {
public:
  using Attr = std::pair<llvm::StringRef, const ::onnx::AttributeProto *>;
  NodeContext(ModelImporter &importer, const ::onnx::NodeProto &node,
              llvm::ArrayRef<Attr> attrs,
              llvm::ArrayRef<Slot *> inputs, int64_t opset,
              mlir::Location loc, llvm::StringRef name);

  const ::onnx::NodeProto &node;
  int64_t opset;
  mlir::Location loc;
  llvm::StringRef name; // node name, unique within the model
  mlir::OpBuilder &b;

  // Inputs -----------------------------------------------------------------
  size_t numInputs() const { return inputs.size(); }
  /// Whether input `i` is present (ONNX marks omitted optionals with "").
  bool has(size_t i) const { return i < inputs.size() && inputs[i]; }
  /// Tensor input `i`; emits an error and returns null when missing.
  mlir::Value input(size_t i);
  mlir::RankedTensorType inputType(size_t i);
  llvm::ArrayRef<int64_t> inputShape(size_t i) { return inputType(i).getShape(); }
  const Slot *slot(size_t i) const { return has(i) ? inputs[i] : nullptr; }
  /// Constant integer values of input `i` (shape-like inputs must be known at
  /// compile time once dims are bound); errors when it is not constant.
  std::optional<llvm::SmallVector<int64_t>> constInts(size_t i);
  /// The constant attribute of input `i`, or null.
  mlir::DenseElementsAttr constant(size_t i);

  // Attributes -------------------------------------------------------------
  const ::onnx::AttributeProto *attr(llvm::StringRef name) const;
  int64_t attrInt(llvm::StringRef name, int64_t dflt) const;
  float attrFloat(llvm::StringRef name, float dflt) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef dflt) const;
  std::optional<llvm::SmallVector<int64_t>> attrInts(llvm::StringRef name) const;

  // Outputs ----------------------------------------------------------------
  size_t numOutputs() const { return node.output_size(); }
  /// Whether output `i` is used (listed with a non-empty name).
  bool wantsOutput(size_t i) const {
    return i < numOutputs() && !node.output(i).empty();
  }
  void setOutput(size_t i, mlir::Value v);
  /// Sets output 0 to `v`; failure when `v` is null (its error was emitted).
  mlir::LogicalResult result(mlir::Value v) {
    if (!v)
      return mlir::failure();
    setOutput(0, v);
    return mlir::success();
  }
  void setSequenceOutput(size_t i, llvm::SmallVector<mlir::Value> values);

  // Building ---------------------------------------------------------------
  /// Builds `Op` with `resultType` (null: inferred), verifies it and folds it.
  /// On failure the op is erased and a diagnostic names this node.
  template <typename Op, typename... Args>
  mlir::Value build(mlir::Type resultType, Args &&...args) {
    mlir::OperationState state(loc, Op::getOperationName());
    Op::build(b, state,
              resultType ? resultType : b.getNoneType(),
              std::forward<Args>(args)...);
    return finish(b.create(state), /*infer=*/!resultType);
  }
  /// Shorthands for the common cases.
  mlir::Value reshape(mlir::Value v, llvm::ArrayRef<int64_t> shape);
  mlir::Value cast(mlir::Value v, mlir::Type elementType);
  mlir::Value scalar(double value, mlir::Type elementType);
  mlir::Value constantOf(mlir::DenseElementsAttr value);

  /// Normalises a possibly negative axis against `rank`; errors if outside.
  std::optional<int64_t> axis(int64_t value, int64_t rank);

  /// An error located at this node; the message is prefixed with its name
  /// and op type.
  mlir::InFlightDiagnostic error();

  ModelImporter &importer;

private:
  mlir::Value finish(mlir::Operation *op, bool infer);
  llvm::ArrayRef<Attr> attrs;
  llvm::ArrayRef<Slot *> inputs;

public:
  /// What the handler produced, one slot per node output.
  llvm::SmallVector<Slot> outputs;
  llvm::SmallVector<bool> produced;
};

/// A handler imports one node; returns failure after emitting a diagnostic.
using OpHandler = mlir::LogicalResult (*)(NodeContext &ctx);

/// Handlers by ONNX op type (default domain).
class OpRegistry {
public:
  void add(llvm::StringRef opType, OpHandler handler) { map[opType] = handler; }
  OpHandler lookup(llvm::StringRef opType) const {
    auto it = map.find(opType);
    return it == map.end() ? nullptr : it->second;
  }
  static const OpRegistry &get();

private:
  llvm::StringMap<OpHandler> map;
};

// Per-family registration (one file each).
void registerElementwiseOps(OpRegistry &registry);
void registerNNOps(OpRegistry &registry);
void registerTensorOps(OpRegistry &registry);
void registerShapeOps(OpRegistry &registry);
void registerVisionOps(OpRegistry &registry);
/// TopK, and the `ai.lamina` MoEExperts node recognizeEagerExperts makes
/// (registered as "ai.lamina.MoEExperts").
void registerMoEOps(OpRegistry &registry);

/// Lamina's own ONNX domain: nodes the importer makes from a recognised
/// block (never written to files).
inline constexpr llvm::StringLiteral kLaminaDomain = "ai.lamina";
inline constexpr llvm::StringLiteral kMoEExperts = "MoEExperts";
/// Replaces each eager mixture-of-experts loop of `graph` (the unrolled
/// per-expert loop of Hugging Face's eager experts) by one MoEExperts node;
/// `notes` says what was replaced. Returns an error message naming the
/// block's one-hot node when a block is recognised only in part, or "".
std::string recognizeEagerExperts(::onnx::GraphProto &graph,
                                  std::vector<std::string> &notes);
/// Replaces each block of Hugging Face's batched experts
/// (`experts_implementation="batched_mm"`, what the dynamo exporter can
/// export: every (token, pick) pair's expert weights gathered, batched
/// GEMMs, a sum over the picks) by one MoEExperts node; the same contract.
std::string recognizeBatchedExperts(::onnx::GraphProto &graph,
                                    std::vector<std::string> &notes);
/// Notes each ScatterElements without a reduction that writes at a TopK's
/// picks: repeated picks overwrite instead of adding (TorchScript's export
/// of torch.histc, which counts the tokens per expert in Hugging Face's
/// load-balancing loss), so the file computes something else than PyTorch.
void noteRoutingHistograms(const ::onnx::GraphProto &graph,
                           std::vector<std::string> &notes);

/// Normalises ONNX reduction axes (attribute or input) for `rank`; an empty
/// list means all axes.
std::optional<llvm::SmallVector<int64_t>>
normaliseAxes(NodeContext &ctx, llvm::ArrayRef<int64_t> axes, int64_t rank);

/// Index tuples [I..., r] for an `indices` tensor I of rank r: position i
/// addresses (i_0, .., indices[i], .., i_{r-1}) with indices[i] at `axis`,
/// so GatherElements/ScatterElements (and the losses' class picks) are
/// gather_nd/scatter_nd, whose gradients and kernels every backend has.
mlir::Value elementTuples(NodeContext &ctx, mlir::Value indices, int64_t axis);

} // namespace lamina::onnx

#endif
