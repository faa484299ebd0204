//===- NodeContext.cpp - what an op handler sees of its node --------------===//

#include "Importer.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace lamina::onnx;
using ::onnx::AttributeProto;

NodeContext::NodeContext(ModelImporter &importer, const ::onnx::NodeProto &node,
                         ArrayRef<Attr> attrs, ArrayRef<Slot *> inputs,
                         int64_t opset, Location loc, StringRef name)
    : node(node), opset(opset), loc(loc), name(name), b(builderOf(importer)),
      importer(importer), attrs(attrs), inputs(inputs),
      outputs(node.output_size()), produced(node.output_size(), false) {}

InFlightDiagnostic NodeContext::error() {
  return emitError(loc) << "node '" << name << "' (" << node.op_type() << "): ";
}

Value NodeContext::input(size_t i) {
  if (!has(i)) {
    error() << "missing input " << i;
    return {};
  }
  if (inputs[i]->isSequence) {
    error() << "input " << i << " is a sequence, a tensor is expected";
    return {};
  }
  return inputs[i]->tensor;
}

RankedTensorType NodeContext::inputType(size_t i) {
  return llvm::cast<RankedTensorType>(inputs[i]->tensor.getType());
}

DenseElementsAttr NodeContext::constant(size_t i) {
  if (!has(i) || inputs[i]->isSequence)
    return {};
  DenseElementsAttr attr;
  if (!matchPattern(inputs[i]->tensor, m_Constant(&attr)))
    return {};
  return attr;
}

std::optional<SmallVector<int64_t>> NodeContext::constInts(size_t i) {
  if (!has(i)) {
    error() << "missing input " << i;
    return std::nullopt;
  }
  DenseElementsAttr attr = constant(i);
  if (!attr || !isa<IntegerType>(attr.getElementType())) {
    error() << "input " << i << " ('" << node.input(i)
            << "') must be an integer tensor known at compile time (bind "
               "symbolic dims with --dim)";
    return std::nullopt;
  }
  if (attr.getNumElements() > (1 << 16)) {
    error() << "input " << i << " is too large for a shape-like input";
    return std::nullopt;
  }
  SmallVector<int64_t> values;
  for (const APInt &v : attr.getValues<APInt>())
    values.push_back(v.getSExtValue());
  return values;
}

const AttributeProto *NodeContext::attr(StringRef attrName) const {
  for (auto [n, a] : attrs)
    if (n == attrName)
      return a;
  return nullptr;
}

int64_t NodeContext::attrInt(StringRef attrName, int64_t dflt) const {
  const AttributeProto *a = attr(attrName);
  return a ? a->i() : dflt;
}

float NodeContext::attrFloat(StringRef attrName, float dflt) const {
  const AttributeProto *a = attr(attrName);
  return a ? a->f() : dflt;
}

std::string NodeContext::attrString(StringRef attrName, StringRef dflt) const {
  const AttributeProto *a = attr(attrName);
  return a ? a->s() : dflt.str();
}

std::optional<SmallVector<int64_t>>
NodeContext::attrInts(StringRef attrName) const {
  const AttributeProto *a = attr(attrName);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

void NodeContext::setOutput(size_t i, Value v) {
  if (i >= outputs.size())
    return;
  outputs[i].tensor = v;
  produced[i] = true;
}

void NodeContext::setSequenceOutput(size_t i, SmallVector<Value> values) {
  if (i >= outputs.size())
    return;
  outputs[i].isSequence = true;
  outputs[i].sequence = std::move(values);
  produced[i] = true;
}

std::optional<int64_t> NodeContext::axis(int64_t value, int64_t rank) {
  int64_t a = value < 0 ? value + rank : value;
  if (a < 0 || a >= rank) {
    error() << "axis " << value << " out of range for rank " << rank;
    return std::nullopt;
  }
  return a;
}

Value NodeContext::finish(Operation *op, bool infer) {
  if (infer) {
    SmallVector<Type> types;
    auto iface = llvm::cast<InferTypeOpInterface>(op);
    if (failed(iface.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
            op->getRegions(), types))) {
      op->erase();
      error() << "operands do not fit (see the diagnostic above)";
      return {};
    }
    op->getResult(0).setType(types[0]);
  }
  // Inferred shapes multiply dims the file chose (Gather, Tile, ...): keep
  // every tensor within the element limit so later size arithmetic is safe.
  for (Type t : op->getResultTypes()) {
    auto ranked = dyn_cast<RankedTensorType>(t);
    if (ranked && checkedNumElements(ranked.getShape()) < 0) {
      op->erase();
      error() << "result " << t << " is too large (more than 2^48 elements)";
      return {};
    }
  }
  if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
    op->erase();
    error() << "produced an invalid op (see the diagnostic above)";
    return {};
  }
  // Fold as createOrFold would: constant operands make constant results.
  SmallVector<Value> folded;
  if (succeeded(b.tryFold(op, folded)) && !folded.empty()) {
    op->erase();
    return folded[0];
  }
  return op->getResult(0);
}

Value NodeContext::reshape(Value v, ArrayRef<int64_t> shape) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  return build<ir::graph::ReshapeOp>(
      RankedTensorType::get(shape, type.getElementType()), v);
}

Value NodeContext::cast(Value v, Type elementType) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  if (type.getElementType() == elementType)
    return v;
  return build<ir::graph::CastOp>(type.clone(elementType), v);
}

Value NodeContext::constantOf(DenseElementsAttr value) {
  return ir::graph::ConstantOp::create(b, loc, value);
}

Value NodeContext::scalar(double value, Type elementType) {
  auto type = RankedTensorType::get({}, elementType);
  if (auto f = dyn_cast<FloatType>(elementType)) {
    APFloat x(value);
    bool lost;
    x.convert(f.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return constantOf(DenseElementsAttr::get(type, x));
  }
  unsigned width = elementType.getIntOrFloatBitWidth();
  return constantOf(DenseElementsAttr::get(
      type, APInt(width, static_cast<uint64_t>(static_cast<int64_t>(value)),
                  true, true)));
}

std::optional<SmallVector<int64_t>>
lamina::onnx::normaliseAxes(NodeContext &ctx, ArrayRef<int64_t> axes,
                            int64_t rank) {
  SmallVector<int64_t> out;
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d)
      out.push_back(d);
    return out;
  }
  for (int64_t a : axes) {
    auto n = ctx.axis(a, rank);
    if (!n)
      return std::nullopt;
    out.push_back(*n);
  }
  llvm::sort(out);
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    ctx.error() << "repeated axis";
    return std::nullopt;
  }
  return out;
}
