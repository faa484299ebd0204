//===- GraphCost.cpp - what each graph op costs ---------------------------===//
//
// FLOPs per execution for CostOpInterface. Conventions: one FLOP per
// multiply or add (a GEMM is 2*M*N*K), one per special-function evaluation
// (exp, erf, ...), so composite ops count their parts (sigmoid: exp, add,
// divide). Data movement, casts and constants do no arithmetic; the cost
// model charges them by getBytesAccessed.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
int64_t elements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}
int64_t bytes(Type t) {
  auto ranked = cast<RankedTensorType>(t);
  int64_t bits = ranked.getElementTypeBitWidth();
  return ranked.getNumElements() * std::max<int64_t>(1, bits / 8);
}
} // namespace

int64_t lamina::ir::graph::detail::operandAndResultBytes(Operation *op) {
  int64_t total = 0;
  for (Type t : llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes()))
    total += bytes(t);
  return total;
}

#include "lamina/Dialect/Graph/IR/GraphInterfaces.cpp.inc"

// Per result element, for ops that compute each result element alike.
#define PER_ELEMENT(OP, N)                                                     \
  int64_t OP::getFlops() { return (N) * elements(getResult()); }
PER_ELEMENT(NegOp, 1)
PER_ELEMENT(AbsOp, 1)
PER_ELEMENT(ExpOp, 1)
PER_ELEMENT(LogOp, 1)
PER_ELEMENT(SqrtOp, 1)
PER_ELEMENT(ReciprocalOp, 1)
PER_ELEMENT(TanhOp, 1)
PER_ELEMENT(ErfOp, 1)
PER_ELEMENT(SigmoidOp, 3)  // exp, add, divide
PER_ELEMENT(ReluOp, 1)
PER_ELEMENT(CosOp, 1)
PER_ELEMENT(SinOp, 1)
PER_ELEMENT(NotOp, 1)
PER_ELEMENT(AddOp, 1)
PER_ELEMENT(SubOp, 1)
PER_ELEMENT(MulOp, 1)
PER_ELEMENT(DivOp, 1)
PER_ELEMENT(PowOp, 1)
PER_ELEMENT(MinOp, 1)
PER_ELEMENT(MaxOp, 1)
PER_ELEMENT(AndOp, 1)
PER_ELEMENT(OrOp, 1)
PER_ELEMENT(EqualOp, 1)
PER_ELEMENT(GreaterOp, 1)
PER_ELEMENT(GreaterEqualOp, 1)
PER_ELEMENT(LessOp, 1)
PER_ELEMENT(LessEqualOp, 1)
PER_ELEMENT(SelectOp, 1)
PER_ELEMENT(SoftmaxOp, 5)    // max, subtract, exp, sum, divide
PER_ELEMENT(LogSoftmaxOp, 5) // max, subtract, exp, sum, subtract log
PER_ELEMENT(SoftmaxGradOp, 4)    // multiply, sum, subtract, multiply
PER_ELEMENT(LogSoftmaxGradOp, 4) // sum, exp, multiply, subtract
PER_ELEMENT(LayerNormOp, 8)  // mean, centre, square, mean, scale, shift...
PER_ELEMENT(RMSNormOp, 5)    // square, mean, scale, weight
PER_ELEMENT(CumSumOp, 1)
#undef PER_ELEMENT

// Per input element: the backward norms recompute the statistics (layer
// norm 4, rms 2), form dxhat and two row sums (4), dx (4), and the
// parameter gradients (layer norm 3, rms 2).
int64_t LayerNormGradOp::getFlops() { return 15 * elements(getInput()); }
int64_t RMSNormGradOp::getFlops() { return 12 * elements(getInput()); }
// Per logit: max, subtract, exp, sum; the gradient: subtract, exp, scale,
// subtract the label, multiply.
// Attention counts the (query, key) pairs it computes: causal rows see a
// prefix. Forward: QK^T and PV GEMMs plus the softmax (~5 per score);
// backward: the recomputed scores, dV, dP, dQ and dK GEMMs.
static int64_t attentionPairs(Value q, Value k, bool causal, bool seqMajor) {
  auto qs = cast<RankedTensorType>(q.getType()).getShape();
  auto ks = cast<RankedTensorType>(k.getType()).getShape();
  int s = seqMajor ? 1 : 2; // the sequence dim; heads in the other of 1, 2
  int64_t sq = qs[s], sk = ks[s], rows = 0;
  if (!causal)
    rows = sq * sk;
  else
    for (int64_t i = 0; i < sq; ++i)
      rows += std::clamp<int64_t>(i + sk - sq + 1, 0, sk);
  return qs[0] * qs[3 - s] * rows;
}
int64_t AttentionOp::getFlops() {
  int64_t d = getQ().getType().getShape()[3], dv = getV().getType().getShape()[3];
  return attentionPairs(getQ(), getK(), getCausal(), getSeqMajor()) *
         (2 * d + 2 * dv + 5);
}
int64_t AttentionGradOp::getFlops() {
  int64_t d = getQ().getType().getShape()[3], dv = getV().getType().getShape()[3];
  return attentionPairs(getQ(), getK(), getCausal(), getSeqMajor()) *
         (6 * d + 4 * dv + 4);
}
// The packed ops count as graph.attention on the slices (causal: Sq == Sk).
static int64_t packedPairs(RankedTensorType out, bool causal) {
  int64_t b = out.getShape()[0], s = out.getShape()[1], h = out.getShape()[2];
  return b * h * (causal ? s * (s + 1) / 2 : s * s);
}
int64_t PackedAttentionOp::getFlops() {
  int64_t d = getOut().getType().getShape()[3];
  return packedPairs(getOut().getType(), getCausal()) * (4 * d + 5);
}
int64_t PackedAttentionGradOp::getFlops() {
  int64_t d = getOut().getType().getShape()[3];
  return packedPairs(getOut().getType(), getCausal()) * (10 * d + 4);
}
int64_t SoftmaxCrossEntropyOp::getFlops() { return 4 * elements(getLogits()); }
int64_t SoftmaxCrossEntropyGradOp::getFlops() {
  return 8 * elements(getLogits());
}

// GELU: erf form x * 0.5 * (1 + erf(x / sqrt 2)); tanh form adds the cubic.
int64_t GeluOp::getFlops() {
  return (getTanh() ? 8 : 5) * elements(getResult());
}

int64_t GeluDerivativeOp::getFlops() {
  return (getTanh() ? 12 : 9) * elements(getResult());
}

// The ops' own counts, step by step, at the result's size.
int64_t FusedElementwiseOp::getFlops() {
  int64_t perElement = 0;
  for (StringRef name : getOps().getAsValueRange<StringAttr>())
    perElement += name == "sigmoid" ? 3 : name == "gelu" ? 5
                : name == "gelu_tanh" ? 8 : name == "gelu_derivative" ? 9
                : name == "gelu_tanh_derivative" ? 12 : 1;
  return perElement * elements(getResult());
}

int64_t MatMulOp::getFlops() {
  auto lhs = getLhs().getType();
  int64_t k = lhs.getShape().back();
  return 2 * k * elements(getResult());
}

// The product, and one add per result element for each epilogue term.
int64_t FusedMatMulOp::getFlops() {
  int64_t k = getLhs().getType().getShape().back();
  int64_t adds = (getBias() ? 1 : 0) + (getAddend() ? 1 : 0);
  return (2 * k + adds) * elements(getResult());
}

// Reductions do one operation per input element.
#define PER_INPUT_ELEMENT(OP)                                                  \
  int64_t OP::getFlops() { return elements(getInput()); }
PER_INPUT_ELEMENT(ReduceSumOp)
PER_INPUT_ELEMENT(ReduceMeanOp)
PER_INPUT_ELEMENT(ReduceMaxOp)
PER_INPUT_ELEMENT(ReduceProdOp)
#undef PER_INPUT_ELEMENT

int64_t ScatterNDOp::getFlops() {
  return getReduction() == "none" ? 0 : elements(getUpdates());
}

// No arithmetic: data movement, conversion and constants.
#define NO_FLOPS(OP)                                                           \
  int64_t OP::getFlops() { return 0; }
NO_FLOPS(ConstantOp)
NO_FLOPS(CastOp)
NO_FLOPS(ReshapeOp)
NO_FLOPS(TransposeOp)
NO_FLOPS(ConcatOp)
NO_FLOPS(SliceOp)
NO_FLOPS(BroadcastOp)
NO_FLOPS(TileOp)
NO_FLOPS(TriluOp)
NO_FLOPS(GatherOp)
NO_FLOPS(GatherNDOp)
#undef NO_FLOPS

// Convolutions count 2 per multiply-add of every output against its
// window (the gradients the same products, ordered differently) plus the
// bias add; pools one per window position read.
static int64_t windowSize(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape.drop_front(2))
    n *= d;
  return n;
}
static int64_t convFlops(RankedTensorType weight, RankedTensorType result) {
  return 2 * result.getNumElements() * weight.getDimSize(1) *
         windowSize(weight.getShape());
}
int64_t ConvOp::getFlops() {
  return convFlops(getWeight().getType(), getResult().getType()) +
         (getBias() ? elements(getResult()) : 0);
}
int64_t ConvGradInputOp::getFlops() {
  return convFlops(getWeight().getType(), getGradResult().getType());
}
int64_t ConvGradWeightOp::getFlops() {
  return convFlops(getGradWeight().getType(), getGradResult().getType());
}
static int64_t kernelSize(ArrayRef<int64_t> kernel) {
  int64_t n = 1;
  for (int64_t k : kernel)
    n *= k;
  return n;
}
int64_t MaxPoolOp::getFlops() {
  return elements(getResult()) * kernelSize(getKernelShape());
}
int64_t MaxPoolIndicesOp::getFlops() {
  return elements(getIndices()) * kernelSize(getKernelShape());
}
int64_t AvgPoolOp::getFlops() {
  return elements(getResult()) * (kernelSize(getKernelShape()) + 1);
}
// The backward recomputes each window's maximum, or spreads its share.
int64_t MaxPoolGradOp::getFlops() {
  return elements(getGradResult()) * kernelSize(getKernelShape());
}
int64_t AvgPoolGradOp::getFlops() {
  return elements(getGradResult()) * (kernelSize(getKernelShape()) + 1);
}
