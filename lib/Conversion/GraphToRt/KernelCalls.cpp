//===- KernelCalls.cpp - which host kernel each graph op runs -------------===//
//
// One function per op family (GraphToRt.h). Signatures are those of
// include/lamina/Runtime/Kernels.h, or of the small adapters in
// include/lamina/Runtime/Generated.h where a kernel's C++ signature cannot be
// written as a flat argument list (optional tensors, variadic inputs).
//
//===----------------------------------------------------------------------===//

#include "lamina/Conversion/GraphToRt/GraphToRt.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/IR/NodeName.h"
#include "lamina/Runtime/Kernels.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::graph;

namespace {
/// Builds one call: buffer references and literals in C++ argument order.
class CallBuilder {
public:
  CallBuilder(Operation *op, Builder &b) : op(op), b(b) {}

  /// Operand i.
  Attribute in(unsigned i) const { return b.getIndexAttr(i); }
  /// Result buffer k (after all operands).
  Attribute out(unsigned k = 0) const {
    return b.getIndexAttr(op->getNumOperands() + k);
  }
  Attribute i64(int64_t v) const { return b.getI64IntegerAttr(v); }
  Attribute f64(double v) const { return b.getF64FloatAttr(v); }
  Attribute flag(bool v) const { return b.getBoolAttr(v); }
  Attribute array(ArrayRef<int64_t> v) const {
    return b.getDenseI64ArrayAttr(v);
  }
  Attribute enumerator(StringRef name) const { return b.getStringAttr(name); }
  /// The attention ops' layout (graph `seq_major`).
  Attribute layout(bool seqMajor) const {
    return enumerator(seqMajor ? "lamina::rt::AttentionLayout::SeqMajor"
                               : "lamina::rt::AttentionLayout::HeadMajor");
  }

  KernelCall call(StringRef callee, ArrayRef<Attribute> args) const {
    return KernelCall{("lamina::rt::" + callee).str(),
                      SmallVector<Attribute>(args.begin(), args.end())};
  }
  KernelCall unary(StringRef kind) const {
    return call("unary", {enumerator(("lamina::rt::UnaryOp::" + kind).str()),
                          in(0), out()});
  }
  KernelCall binary(StringRef kind) const {
    return call("binary", {enumerator(("lamina::rt::BinaryOp::" + kind).str()),
                           in(0), in(1), out()});
  }
  /// gen::fusedElementwise(result, steps, numSteps, inputs...): the steps as
  /// a static array of (isBinary, op, lhs, rhs) per step (Generated.h); with
  /// a sum, gen::fusedElementwiseSum(result, sum, steps, numSteps, inputs...).
  KernelCall fused(FusedElementwiseOp o) const;
  KernelCall compare(StringRef kind) const {
    return call("compare",
                {enumerator(("lamina::rt::CompareOp::" + kind).str()), in(0),
                 in(1), out()});
  }
  template <typename ReduceOpT>
  KernelCall reduce(StringRef kind, ReduceOpT o) const {
    ArrayRef<int64_t> axes = o.getAxes();
    return call("reduce", {enumerator(("lamina::rt::ReduceOp::" + kind).str()),
                           in(0), array(axes), i64(int64_t(axes.size())),
                           flag(o.getKeepdims()), out()});
  }

private:
  Operation *op;
  Builder &b;
};
} // namespace

namespace {
/// The runtime's enumerator for a fused step op name (the op's verifier
/// allows only these).
uint8_t stepEnumerator(StringRef name) {
  using lamina::rt::BinaryOp;
  using lamina::rt::UnaryOp;
  return llvm::StringSwitch<uint8_t>(name)
      .Case("neg", uint8_t(UnaryOp::Neg))
      .Case("abs", uint8_t(UnaryOp::Abs))
      .Case("relu", uint8_t(UnaryOp::Relu))
      .Case("exp", uint8_t(UnaryOp::Exp))
      .Case("log", uint8_t(UnaryOp::Log))
      .Case("sqrt", uint8_t(UnaryOp::Sqrt))
      .Case("reciprocal", uint8_t(UnaryOp::Reciprocal))
      .Case("tanh", uint8_t(UnaryOp::Tanh))
      .Case("erf", uint8_t(UnaryOp::Erf))
      .Case("sigmoid", uint8_t(UnaryOp::Sigmoid))
      .Case("gelu", uint8_t(UnaryOp::Gelu))
      .Case("gelu_tanh", uint8_t(UnaryOp::GeluTanh))
      .Case("gelu_derivative", uint8_t(UnaryOp::GeluDerivative))
      .Case("gelu_tanh_derivative", uint8_t(UnaryOp::GeluTanhDerivative))
      .Case("cos", uint8_t(UnaryOp::Cos))
      .Case("sin", uint8_t(UnaryOp::Sin))
      .Case("add", uint8_t(BinaryOp::Add))
      .Case("sub", uint8_t(BinaryOp::Sub))
      .Case("mul", uint8_t(BinaryOp::Mul))
      .Case("div", uint8_t(BinaryOp::Div))
      .Case("pow", uint8_t(BinaryOp::Pow))
      .Case("min", uint8_t(BinaryOp::Min))
      .Case("max", uint8_t(BinaryOp::Max));
}
} // namespace

KernelCall CallBuilder::fused(FusedElementwiseOp o) const {
  SmallVector<int64_t> packed;
  for (auto [name, lhs, rhs] : llvm::zip_equal(
           o.getOps().getAsValueRange<StringAttr>(), o.getLhs(), o.getRhs())) {
    bool binary = false;
    FusedElementwiseOp::isStepOp(name, binary);
    packed.append({binary ? 1 : 0, stepEnumerator(name), lhs,
                   binary ? rhs : 0});
  }
  SmallVector<Attribute> args = {out()};
  if (o.getSum())
    args.push_back(out(1));
  args.append({array(packed), i64(int64_t(o.getOps().size()))});
  for (unsigned i = 0; i < o.getInputs().size(); ++i)
    args.push_back(in(i));
  return call(o.getSum() ? "gen::fusedElementwiseSum" : "gen::fusedElementwise",
              args);
}

KernelCall lamina::getMatMulCall(Operation *op, Builder &b, bool transposeLhs,
                                 bool transposeRhs) {
  CallBuilder c(op, b);
  auto fused = dyn_cast<FusedMatMulOp>(op);
  if (!fused)
    return c.call("matmul", {c.in(0), c.in(1), c.out(), c.flag(transposeLhs),
                             c.flag(transposeRhs)});
  // The optional operands follow lhs and rhs in order; absent ones are
  // nullptr (a unit attribute).
  unsigned next = 2;
  auto optional = [&](Value v) {
    return v ? c.in(next++) : Attribute(b.getUnitAttr());
  };
  Attribute bias = optional(fused.getBias());
  Attribute addend = optional(fused.getAddend());
  return c.call("gen::matmulEpilogue",
                {c.in(0), c.in(1), bias, addend, c.out(),
                 c.flag(transposeLhs), c.flag(transposeRhs)});
}

namespace {
using Result = std::optional<KernelCall>;

Result noCall(Operation *) { return std::nullopt; }
} // namespace

/// Unary, binary, compare, select, cast and fused chains: elementwise with
/// broadcasting.
static Result elementwiseCall(Operation *op, Builder &b) {
  CallBuilder c(op, b);
  return llvm::TypeSwitch<Operation *, Result>(op)
      // Unary.
      .Case([&](NegOp) { return c.unary("Neg"); })
      .Case([&](AbsOp) { return c.unary("Abs"); })
      .Case([&](ReluOp) { return c.unary("Relu"); })
      .Case([&](ExpOp) { return c.unary("Exp"); })
      .Case([&](LogOp) { return c.unary("Log"); })
      .Case([&](SqrtOp) { return c.unary("Sqrt"); })
      .Case([&](ReciprocalOp) { return c.unary("Reciprocal"); })
      .Case([&](TanhOp) { return c.unary("Tanh"); })
      .Case([&](ErfOp) { return c.unary("Erf"); })
      .Case([&](SigmoidOp) { return c.unary("Sigmoid"); })
      .Case([&](CosOp) { return c.unary("Cos"); })
      .Case([&](SinOp) { return c.unary("Sin"); })
      .Case([&](NotOp) { return c.unary("Not"); })
      .Case(
          [&](GeluOp o) { return c.unary(o.getTanh() ? "GeluTanh" : "Gelu"); })
      .Case([&](GeluDerivativeOp o) {
        return c.unary(o.getTanh() ? "GeluTanhDerivative" : "GeluDerivative");
      })
      // Binary, compare, select, cast.
      .Case([&](AddOp) { return c.binary("Add"); })
      .Case([&](SubOp) { return c.binary("Sub"); })
      .Case([&](MulOp) { return c.binary("Mul"); })
      .Case([&](DivOp) { return c.binary("Div"); })
      .Case([&](PowOp) { return c.binary("Pow"); })
      .Case([&](MinOp) { return c.binary("Min"); })
      .Case([&](MaxOp) { return c.binary("Max"); })
      .Case([&](AndOp) { return c.binary("And"); })
      .Case([&](OrOp) { return c.binary("Or"); })
      .Case([&](EqualOp) { return c.compare("Equal"); })
      .Case([&](GreaterOp) { return c.compare("Greater"); })
      .Case([&](GreaterEqualOp) { return c.compare("GreaterEqual"); })
      .Case([&](LessOp) { return c.compare("Less"); })
      .Case([&](LessEqualOp) { return c.compare("LessEqual"); })
      .Case([&](SelectOp) {
        return c.call("select", {c.in(0), c.in(1), c.in(2), c.out()});
      })
      .Case([&](CastOp) {
        return c.call("cast", {c.in(0), c.out()});
      })
      .Case([&](FusedElementwiseOp o) { return c.fused(o); })
      .Default(noCall);
}

/// Reductions, the softmaxes and the norms (and their gradients).
static Result reductionCall(Operation *op, Builder &b) {
  CallBuilder c(op, b);
  return llvm::TypeSwitch<Operation *, Result>(op)
      // Reductions.
      .Case([&](ReduceSumOp o) { return c.reduce("Sum", o); })
      .Case([&](ReduceMeanOp o) { return c.reduce("Mean", o); })
      .Case([&](ReduceMaxOp o) { return c.reduce("Max", o); })
      .Case([&](ReduceProdOp o) { return c.reduce("Prod", o); })
      .Case([&](CumSumOp o) {
        return c.call("cumsum",
                      {c.in(0), c.i64(o.getAxis()), c.flag(o.getExclusive()),
                       c.flag(o.getReverse()), c.out()});
      })
      // Normalisation.
      .Case([&](SoftmaxOp o) {
        return c.call("softmax", {c.in(0), c.i64(o.getAxis()), c.out()});
      })
      .Case([&](LogSoftmaxOp o) {
        return c.call("logSoftmax", {c.in(0), c.i64(o.getAxis()), c.out()});
      })
      .Case([&](SoftmaxGradOp o) {
        return c.call("softmaxBackward",
                      {c.in(0), c.in(1), c.i64(o.getAxis()), c.out()});
      })
      .Case([&](LogSoftmaxGradOp o) {
        return c.call("logSoftmaxBackward",
                      {c.in(0), c.in(1), c.i64(o.getAxis()), c.out()});
      })
      .Case([&](LayerNormOp o) {
        Attribute bias = o.getBias() ? c.in(2) : Attribute(b.getUnitAttr());
        return c.call("gen::layerNorm",
                      {c.in(0), c.in(1), bias, c.i64(o.getAxis()),
                       c.f64(o.getEpsilonAttr().getValueAsDouble()), c.out()});
      })
      .Case([&](RMSNormOp o) {
        return c.call("rmsNorm",
                      {c.in(0), c.in(1), c.i64(o.getAxis()),
                       c.f64(o.getEpsilonAttr().getValueAsDouble()), c.out()});
      })
      .Case([&](LayerNormGradOp o) {
        Attribute bias = o.getGradBias() ? c.out(2) : Attribute(b.getUnitAttr());
        Attribute addend = o.getAddend() ? c.in(3) : Attribute(b.getUnitAttr());
        return c.call("gen::layerNormBackward",
                      {c.in(0), c.in(1), c.in(2), addend, c.i64(o.getAxis()),
                       c.f64(o.getEpsilonAttr().getValueAsDouble()), c.out(0),
                       c.out(1), bias});
      })
      .Case([&](RMSNormGradOp o) {
        Attribute addend = o.getAddend() ? c.in(3) : Attribute(b.getUnitAttr());
        return c.call("gen::rmsNormBackward",
                      {c.in(0), c.in(1), c.in(2), addend, c.i64(o.getAxis()),
                       c.f64(o.getEpsilonAttr().getValueAsDouble()), c.out(0),
                       c.out(1)});
      })
      .Default(noCall);
}

/// Fused attention and its gradient.
static Result attentionCall(Operation *op, Builder &b) {
  CallBuilder c(op, b);
  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case([&](AttentionOp o) {
        Attribute bias = o.getBias() ? c.in(3) : Attribute(b.getUnitAttr());
        return c.call("gen::attention",
                      {c.in(0), c.in(1), c.in(2), bias,
                       c.f64(o.getScaleAttr().getValueAsDouble()),
                       c.flag(o.getCausal()), c.layout(o.getSeqMajor()),
                       c.out(0), c.out(1)});
      })
      .Case([&](AttentionGradOp o) {
        Attribute bias = o.getBias() ? c.in(6) : Attribute(b.getUnitAttr());
        return c.call("gen::attentionBackward",
                      {c.in(0), c.in(1), c.in(2), bias, c.in(3), c.in(4),
                       c.in(5), c.f64(o.getScaleAttr().getValueAsDouble()),
                       c.flag(o.getCausal()), c.layout(o.getSeqMajor()),
                       c.out(0), c.out(1), c.out(2)});
      })
      // Made for the CUDA target only (graph-pack-attention): no host twin.
      .Case([&](PackedAttentionOp o) {
        return c.call("packedAttention",
                      {c.in(0), c.i64(o.getHeads()), c.i64(o.getKvHeads()),
                       c.f64(o.getScaleAttr().getValueAsDouble()),
                       c.flag(o.getCausal()), c.out(0), c.out(1)});
      })
      .Case([&](PackedAttentionGradOp o) {
        return c.call("packedAttentionBackward",
                      {c.in(0), c.in(1), c.in(2), c.in(3),
                       c.i64(o.getHeads()), c.i64(o.getKvHeads()),
                       c.f64(o.getScaleAttr().getValueAsDouble()),
                       c.flag(o.getCausal()), c.out(0)});
      })
      .Default(noCall);
}

/// The fused losses.
static Result lossCall(Operation *op, Builder &b) {
  CallBuilder c(op, b);
  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case([&](SoftmaxCrossEntropyOp o) {
        return c.call("softmaxCrossEntropy",
                      {c.in(0), c.in(1), c.i64(o.getIgnoreIndex()), c.out()});
      })
      .Case([&](SoftmaxCrossEntropyGradOp o) {
        return c.call("softmaxCrossEntropyBackward",
                      {c.in(0), c.in(1), c.in(2), c.i64(o.getIgnoreIndex()),
                       c.out()});
      })
      .Default(noCall);
}

/// Convolution and pooling.
static Result visionCall(Operation *op, Builder &b) {
  CallBuilder c(op, b);
  return llvm::TypeSwitch<Operation *, Result>(op)
      // The window attributes as arrays, the bias optional.
      .Case([&](ConvOp o) {
        Attribute bias = o.getBias() ? c.in(2) : Attribute(b.getUnitAttr());
        return c.call("gen::conv",
                      {c.in(0), c.in(1), bias, c.array(o.getStrides()),
                       c.array(o.getDilations()), c.array(o.getPads()),
                       c.i64(o.getGroup()), c.out()});
      })
      .Case([&](ConvGradInputOp o) {
        return c.call("convBackwardInput",
                      {c.in(0), c.in(1), c.array(o.getStrides()),
                       c.array(o.getDilations()), c.array(o.getPads()),
                       c.i64(o.getGroup()), c.out()});
      })
      .Case([&](ConvGradWeightOp o) {
        return c.call("convBackwardWeight",
                      {c.in(0), c.in(1), c.array(o.getStrides()),
                       c.array(o.getDilations()), c.array(o.getPads()),
                       c.i64(o.getGroup()), c.out()});
      })
      .Case([&](MaxPoolOp o) {
        return c.call("maxPool", {c.in(0), c.array(o.getKernelShape()),
                                  c.array(o.getStrides()),
                                  c.array(o.getDilations()),
                                  c.array(o.getPads()), c.out()});
      })
      .Case([&](MaxPoolIndicesOp o) {
        return c.call("maxPoolIndices",
                      {c.in(0), c.array(o.getKernelShape()),
                       c.array(o.getStrides()), c.array(o.getDilations()),
                       c.array(o.getPads()), c.flag(o.getColumnMajor()),
                       c.out()});
      })
      .Case([&](MaxPoolGradOp o) {
        return c.call("maxPoolBackward",
                      {c.in(0), c.in(1), c.array(o.getKernelShape()),
                       c.array(o.getStrides()), c.array(o.getDilations()),
                       c.array(o.getPads()), c.out()});
      })
      .Case([&](AvgPoolOp o) {
        return c.call("avgPool", {c.in(0), c.array(o.getKernelShape()),
                                  c.array(o.getStrides()),
                                  c.array(o.getDilations()),
                                  c.array(o.getPads()),
                                  c.flag(o.getCountIncludePad()), c.out()});
      })
      .Case([&](AvgPoolGradOp o) {
        return c.call("avgPoolBackward",
                      {c.in(0), c.array(o.getKernelShape()),
                       c.array(o.getStrides()), c.array(o.getDilations()),
                       c.array(o.getPads()), c.flag(o.getCountIncludePad()),
                       c.out()});
      })
      .Default(noCall);
}

/// Data movement: layout, slicing, gather and scatter.
static Result movementCall(Operation *op, Builder &b) {
  CallBuilder c(op, b);
  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case([&](ReshapeOp) {
        return c.call("reshape", {c.in(0), c.out()});
      })
      .Case([&](BroadcastOp) {
        return c.call("broadcast", {c.in(0), c.out()});
      })
      .Case([&](TransposeOp o) {
        return c.call("transpose", {c.in(0), c.array(o.getPerm()), c.out()});
      })
      .Case([&](ConcatOp o) {
        SmallVector<Attribute> args = {c.out(), c.i64(o.getAxis())};
        for (unsigned i = 0; i < op->getNumOperands(); ++i)
          args.push_back(c.in(i));
        return c.call("gen::concat", args);
      })
      .Case([&](SliceOp o) {
        return c.call("slice", {c.in(0), c.array(o.getStarts()),
                                c.array(o.getSizes()), c.array(o.getSteps()),
                                c.out()});
      })
      .Case([&](TileOp o) {
        return c.call("tile", {c.in(0), c.array(o.getRepeats()), c.out()});
      })
      .Case([&](TriluOp o) {
        return c.call("trilu", {c.in(0), c.i64(o.getK()),
                                c.flag(o.getUpper()), c.out()});
      })
      // Gather / scatter.
      .Case([&](GatherOp o) {
        return c.call("gather",
                      {c.in(0), c.in(1), c.i64(o.getAxis()), c.out()});
      })
      .Case([&](GatherNDOp o) {
        return c.call("gatherND",
                      {c.in(0), c.in(1), c.i64(o.getBatchDims()), c.out()});
      })
      .Case([&](ScatterNDOp o) -> Result {
        static const std::pair<StringRef, StringRef> kReductions[] = {
            {"none", "None"},
            {"add", "Add"},
            {"mul", "Mul"},
            {"max", "Max"},
            {"min", "Min"}};
        for (auto [name, enumerator] : kReductions)
          if (o.getReduction() == name)
            return c.call(
                "scatterND",
                {c.in(0), c.in(1), c.in(2),
                 c.enumerator(
                     ("lamina::rt::ScatterReduction::" + enumerator).str()),
                 c.out()});
        return std::nullopt;
      })
      .Default(noCall);
}

/// Mixture of experts: routing, the experts, expert parallelism.
static Result moeCall(Operation *op, Builder &b) {
  CallBuilder c(op, b);
  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case([&](TopKOp o) {
        return c.call("topk", {c.in(0), c.i64(o.getK()), c.out(0), c.out(1)});
      })
      .Case([&](MoEOp) {
        return c.call("moe",
                      {c.in(0), c.in(1), c.in(2), c.in(3), c.in(4), c.out()});
      })
      .Case([&](MoEGradOp) {
        return c.call("moeBackward",
                      {c.in(0), c.in(1), c.in(2), c.in(3), c.in(4), c.in(5),
                       c.out(0), c.out(1), c.out(2), c.out(3)});
      })
      // Expert parallelism's row layout and all-to-all.
      .Case([&](MoEDispatchOp o) {
        return c.call("moeDispatch", {c.in(0), c.in(1), c.i64(o.getExperts()),
                                      c.i64(o.getRanks()), c.out(0), c.out(1)});
      })
      .Case([&](MoECombineOp o) {
        return c.call("moeCombine",
                      {c.in(0), c.in(1), c.in(2), c.i64(o.getExperts()),
                       c.i64(o.getRanks()), c.out()});
      })
      .Case([&](MoECombineGradOp o) {
        return c.call("moeCombineBackward",
                      {c.in(0), c.in(1), c.in(2), c.in(3),
                       c.i64(o.getExperts()), c.i64(o.getRanks()), c.out(0),
                       c.out(1)});
      })
      .Case([&](MoERowExpertsOp) {
        return c.call("moeRowExperts", {c.in(0), c.out()});
      })
      .Case([&](MoEExchangeOp) {
        return c.call("ep::exchange", {c.in(0), c.in(1), c.out(0), c.out(1)});
      })
      .Default(noCall);
}

ArrayRef<KernelFamily> lamina::getKernelFamilies() {
  static const KernelFamily kFamilies[] = {{"elementwise", elementwiseCall},
                                           {"reduction", reductionCall},
                                           {"attention", attentionCall},
                                           {"loss", lossCall},
                                           {"vision", visionCall},
                                           {"movement", movementCall},
                                           {"moe", moeCall},
                                           {"collective", getCollectiveCall}};
  return kFamilies;
}

std::optional<KernelCall> lamina::getKernelCall(Operation *op, Builder &b) {
  if (isa<MatMulOp, FusedMatMulOp>(op))
    return getMatMulCall(op, b, false, false);
  for (const KernelFamily &family : getKernelFamilies())
    if (std::optional<KernelCall> call = family.call(op, b))
      return call;
  return std::nullopt;
}

bool lamina::kernelAllowsInPlace(Operation *op, unsigned operand) {
  // Kernels.h lists the kernels whose result may alias an input.
  if (op->getNumResults() != 1)
    return false;
  // (A reshape of an arena value is a view, never a call: not listed.)
  if (isa<CumSumOp, TriluOp, SoftmaxOp, LogSoftmaxOp, LayerNormOp, RMSNormOp>(op))
    return operand == 0;
  if (isa<ScatterNDOp>(op))
    return operand == 0;
  // A tensor-parallel all-reduce reduces its buffer in place.
  if (isa<mlir::shard::AllReduceOp>(op))
    return true;
  // cuBLASLt and sgemm read C (the addend) where they write D.
  if (auto fused = dyn_cast<FusedMatMulOp>(op))
    return fused.getAddend() && fused.getAddend() == op->getOperand(operand);
  if (isa<SoftmaxGradOp, LogSoftmaxGradOp>(op))
    return true;
  // Unary, binary, compare and select: elementwise with broadcasting.
  if (isa<NegOp, AbsOp, ReluOp, ExpOp, LogOp, SqrtOp, ReciprocalOp, TanhOp,
          ErfOp, SigmoidOp, CosOp, SinOp, NotOp, GeluOp, GeluDerivativeOp, AddOp, SubOp, MulOp,
          DivOp, PowOp, MinOp, MaxOp, AndOp, OrOp, EqualOp, GreaterOp,
          GreaterEqualOp, LessOp, LessEqualOp, SelectOp, FusedElementwiseOp>(op))
    return true;
  return false;
}

std::string lamina::describeOrigin(Operation *op) {
  return ir::graph::nodeNameOf(op) + " (" + op->getName().getStringRef().str() +
         ")";
}
