//===- GraphFolds.cpp - constant folding of graph ops ---------------------===//
//
// Folds make shape arithmetic vanish at import time: the importer builds
// every op with createOrFold, so an op whose operands are constants becomes a
// constant (up to kMaxFoldElements elements, or any size for splats).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/Literal.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include <cmath>

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
using FloatFn = std::function<double(ArrayRef<double>)>;
using IntFn = std::function<int64_t(ArrayRef<int64_t>)>;

/// Elementwise fold of `operands` (already broadcast-compatible) into a
/// result of `resultType`. Float and integer semantics are chosen by the
/// operands' element type; a missing function means "do not fold".
OpFoldResult foldElementwise(ArrayRef<Attribute> operands,
                             RankedTensorType resultType, FloatFn ff,
                             IntFn fi) {
  SmallVector<Literal> lits;
  for (Attribute a : operands) {
    auto lit = Literal::read(a);
    if (!lit)
      return {};
    lits.push_back(std::move(*lit));
  }
  // Select's condition is boolean; the data operands decide the semantics.
  const Literal &data = lits.size() == 3 ? lits[1] : lits[0];
  bool isFloat = data.isFloat();
  if ((isFloat && !ff) || (!isFloat && !fi))
    return {};
  bool allSplat = llvm::all_of(lits, [](const Literal &l) { return l.splat; });
  if (!allSplat && resultType.getNumElements() > kMaxFoldElements)
    return {};

  Literal out;
  out.type = resultType;
  out.splat = allSplat;
  bool resultFloat = isa<FloatType>(resultType.getElementType());
  bool unrepresentable = false;
  SmallVector<double> fargs(lits.size());
  SmallVector<int64_t> iargs(lits.size());
  auto emit = [&](ArrayRef<int64_t> positions) {
    for (size_t k = 0; k < lits.size(); ++k) {
      if (lits[k].isFloat())
        fargs[k] = lits[k].f[positions[k]];
      else
        iargs[k] = lits[k].i[positions[k]];
    }
    // Select mixes a boolean condition with data: pass the condition as a
    // number on the data's side.
    if (lits.size() == 3) {
      if (isFloat)
        fargs[0] = static_cast<double>(lits[0].i[positions[0]]);
      else
        iargs[0] = lits[0].i[positions[0]];
    }
    if (isFloat) {
      double v = ff(fargs);
      if (resultFloat) {
        out.f.push_back(v);
      } else if (std::isnan(v) || v >= 9.2e18 || v <= -9.2e18) {
        unrepresentable = true; // float->int of NaN or out of range
        out.i.push_back(0);
      } else {
        out.i.push_back(static_cast<int64_t>(v));
      }
    } else {
      int64_t v = fi(iargs);
      if (resultFloat)
        out.f.push_back(static_cast<double>(v));
      else
        out.i.push_back(v);
    }
  };
  if (allSplat) {
    emit(SmallVector<int64_t>(lits.size(), 0));
    return unrepresentable ? OpFoldResult() : out.write();
  }
  // Broadcast strides: 0 along dimensions an operand stretches.
  ArrayRef<int64_t> shape = resultType.getShape();
  SmallVector<SmallVector<int64_t>> strides;
  for (const Literal &l : lits) {
    SmallVector<int64_t> s(shape.size(), 0);
    if (!l.splat) {
      auto own = stridesOf(l.type.getShape());
      size_t offset = shape.size() - l.type.getRank();
      for (size_t d = 0; d < own.size(); ++d)
        s[d + offset] = l.type.getDimSize(d) == 1 ? 0 : own[d];
    }
    strides.push_back(std::move(s));
  }
  SmallVector<int64_t> positions(lits.size());
  forEachIndex(shape, [&](ArrayRef<int64_t> index, int64_t) {
    for (size_t k = 0; k < lits.size(); ++k) {
      positions[k] = 0;
      for (size_t d = 0; d < index.size(); ++d)
        positions[k] += index[d] * strides[k][d];
    }
    emit(positions);
  });
  // Leave conversions the target type cannot hold to the runtime.
  return unrepresentable ? OpFoldResult() : out.write();
}

RankedTensorType resultTypeOf(Operation *op) {
  return cast<RankedTensorType>(op->getResult(0).getType());
}

double erfGelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double tanhGelu(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
} // namespace

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define UNARY_FOLD(OP, FEXPR, IEXPR)                                           \
  OpFoldResult OP::fold(FoldAdaptor adaptor) {                                 \
    return foldElementwise(                                                    \
        adaptor.getOperands(), resultTypeOf(*this),                            \
        [](ArrayRef<double> a) { double x = a[0]; (void)x; return FEXPR; },    \
        IEXPR);                                                                \
  }
#define INT_NONE IntFn()
#define INT_FN(EXPR) [](ArrayRef<int64_t> a) -> int64_t { int64_t x = a[0]; return EXPR; }

UNARY_FOLD(NegOp, -x, INT_FN(-x))
UNARY_FOLD(AbsOp, std::fabs(x), INT_FN(x < 0 ? -x : x))
UNARY_FOLD(ExpOp, std::exp(x), INT_NONE)
UNARY_FOLD(LogOp, std::log(x), INT_NONE)
UNARY_FOLD(SqrtOp, std::sqrt(x), INT_NONE)
UNARY_FOLD(ReciprocalOp, 1.0 / x, INT_NONE)
UNARY_FOLD(TanhOp, std::tanh(x), INT_NONE)
UNARY_FOLD(ErfOp, std::erf(x), INT_NONE)
UNARY_FOLD(SigmoidOp, 1.0 / (1.0 + std::exp(-x)), INT_NONE)
UNARY_FOLD(ReluOp, x > 0 ? x : 0.0, INT_FN(x > 0 ? x : 0))
UNARY_FOLD(CosOp, std::cos(x), INT_NONE)
UNARY_FOLD(SinOp, std::sin(x), INT_NONE)
UNARY_FOLD(NotOp, 0.0, INT_FN(x ? 0 : 1))

OpFoldResult GeluOp::fold(FoldAdaptor adaptor) {
  bool approx = getTanh();
  return foldElementwise(
      adaptor.getOperands(), resultTypeOf(*this),
      [approx](ArrayRef<double> a) { return approx ? tanhGelu(a[0]) : erfGelu(a[0]); },
      IntFn());
}

/// Integer division and modulo as ONNX defines them: truncating; division by
/// zero is left unfolded (signalled by nullopt) rather than invoking UB.
static std::optional<int64_t> truncDiv(int64_t a, int64_t b) {
  if (b == 0 || (a == INT64_MIN && b == -1))
    return std::nullopt;
  return a / b;
}

#define BINARY_FOLD(OP, FEXPR, IEXPR)                                          \
  OpFoldResult OP::fold(FoldAdaptor adaptor) {                                 \
    return foldElementwise(                                                    \
        adaptor.getOperands(), resultTypeOf(*this),                            \
        [](ArrayRef<double> v) { double a = v[0], b = v[1]; (void)a; (void)b;  \
                                 return FEXPR; },                              \
        IEXPR);                                                                \
  }
#define INT2(EXPR)                                                             \
  [](ArrayRef<int64_t> v) -> int64_t {                                         \
    int64_t a = v[0], b = v[1]; (void)a; (void)b; return EXPR; }

BINARY_FOLD(AddOp, a + b, INT2(static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b))))
BINARY_FOLD(SubOp, a - b, INT2(static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b))))
BINARY_FOLD(MulOp, a * b, INT2(static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b))))
BINARY_FOLD(PowOp, std::pow(a, b), INT_NONE)
BINARY_FOLD(MinOp, std::fmin(a, b), INT2(std::min(a, b)))
BINARY_FOLD(MaxOp, std::fmax(a, b), INT2(std::max(a, b)))
BINARY_FOLD(AndOp, 0.0, INT2((a && b) ? 1 : 0))
BINARY_FOLD(OrOp, 0.0, INT2((a || b) ? 1 : 0))
BINARY_FOLD(EqualOp, a == b ? 1.0 : 0.0, INT2(a == b ? 1 : 0))
BINARY_FOLD(GreaterOp, a > b ? 1.0 : 0.0, INT2(a > b ? 1 : 0))
BINARY_FOLD(GreaterEqualOp, a >= b ? 1.0 : 0.0, INT2(a >= b ? 1 : 0))
BINARY_FOLD(LessOp, a < b ? 1.0 : 0.0, INT2(a < b ? 1 : 0))
BINARY_FOLD(LessEqualOp, a <= b ? 1.0 : 0.0, INT2(a <= b ? 1 : 0))

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  // A zero divisor anywhere keeps the op: runtime semantics decide.
  bool zeroDivisor = false;
  OpFoldResult r = foldElementwise(
      adaptor.getOperands(), resultTypeOf(*this),
      [](ArrayRef<double> v) { return v[0] / v[1]; },
      [&](ArrayRef<int64_t> v) -> int64_t {
        auto q = truncDiv(v[0], v[1]);
        zeroDivisor |= !q;
        return q.value_or(0);
      });
  return zeroDivisor ? OpFoldResult() : r;
}

OpFoldResult SelectOp::fold(FoldAdaptor adaptor) {
  return foldElementwise(
      adaptor.getOperands(), resultTypeOf(*this),
      [](ArrayRef<double> v) { return v[0] != 0.0 ? v[1] : v[2]; },
      [](ArrayRef<int64_t> v) { return v[0] ? v[1] : v[2]; });
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  auto result = resultTypeOf(*this);
  Type to = result.getElementType();
  bool toBool = to.isInteger(1);
  return foldElementwise(
      adaptor.getOperands(), result,
      [toBool](ArrayRef<double> v) {
        if (toBool)
          return v[0] != 0.0 ? 1.0 : 0.0;
        return v[0]; // truncation toward zero happens in the float->int store
      },
      [toBool](ArrayRef<int64_t> v) -> int64_t {
        return toBool ? (v[0] != 0) : v[0];
      });
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
enum class ReduceKind { Sum, Mean, Max, Prod };

OpFoldResult foldReduce(Attribute operand, RankedTensorType resultType,
                        ArrayRef<int64_t> axes, ReduceKind kind) {
  auto lit = Literal::read(operand);
  if (!lit)
    return {};
  if (!lit->splat && lit->type.getNumElements() > kMaxFoldElements)
    return {};
  Literal in = lit->expanded();
  ArrayRef<int64_t> inShape = in.type.getShape();
  // Map each input element to its output position: reduced dims collapse.
  SmallVector<int64_t> outShape;
  for (int64_t d = 0; d < in.type.getRank(); ++d)
    outShape.push_back(llvm::is_contained(axes, d) ? 1 : inShape[d]);
  auto outStrides = stridesOf(outShape);
  int64_t outCount = resultType.getNumElements();
  int64_t group = in.type.getNumElements() / std::max<int64_t>(outCount, 1);
  auto outIndex = [&](ArrayRef<int64_t> index) {
    int64_t o = 0;
    for (size_t d = 0; d < index.size(); ++d)
      if (outShape[d] != 1 || inShape[d] == 1)
        o += index[d] * outStrides[d];
    return o;
  };
  Literal out;
  out.type = resultType;
  if (in.isFloat()) {
    double init = kind == ReduceKind::Prod  ? 1.0
                  : kind == ReduceKind::Max ? -INFINITY
                                            : 0.0;
    out.f.assign(outCount, init);
    forEachIndex(inShape, [&](ArrayRef<int64_t> index, int64_t linear) {
      double &acc = out.f[outIndex(index)];
      double v = in.f[linear];
      acc = kind == ReduceKind::Prod  ? acc * v
            : kind == ReduceKind::Max ? std::max(acc, v)
                                      : acc + v;
    });
    if (kind == ReduceKind::Mean)
      for (double &v : out.f)
        v /= static_cast<double>(group);
    return out.write();
  }
  // Integers wrap on overflow, as a runtime kernel would (no UB here).
  if (kind == ReduceKind::Mean && group == 0)
    return {};
  int64_t init = kind == ReduceKind::Prod  ? 1
                 : kind == ReduceKind::Max ? INT64_MIN
                                           : 0;
  out.i.assign(outCount, init);
  forEachIndex(inShape, [&](ArrayRef<int64_t> index, int64_t linear) {
    int64_t &acc = out.i[outIndex(index)];
    uint64_t a = static_cast<uint64_t>(acc), v = static_cast<uint64_t>(in.i[linear]);
    acc = kind == ReduceKind::Prod  ? static_cast<int64_t>(a * v)
          : kind == ReduceKind::Max ? std::max(acc, in.i[linear])
                                    : static_cast<int64_t>(a + v);
  });
  if (kind == ReduceKind::Mean)
    for (int64_t &v : out.i)
      v /= group;
  return out.write();
}
} // namespace

#define REDUCE_FOLD(OP, KIND)                                                  \
  OpFoldResult OP::fold(FoldAdaptor adaptor) {                                 \
    if (getAxes().empty() && getInput().getType() == getResult().getType())    \
      return getInput();                                                       \
    return foldReduce(adaptor.getInput(), resultTypeOf(*this), getAxes(),      \
                      ReduceKind::KIND);                                       \
  }
REDUCE_FOLD(ReduceSumOp, Sum)
REDUCE_FOLD(ReduceMeanOp, Mean)
REDUCE_FOLD(ReduceMaxOp, Max)
REDUCE_FOLD(ReduceProdOp, Prod)

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // reshape(reshape(x)) == reshape(x).
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

/// Folds a data-movement op whose element k comes from input element
/// `source(k index)`.
static OpFoldResult
foldMovement(Attribute input, RankedTensorType resultType,
             function_ref<int64_t(ArrayRef<int64_t>)> source) {
  auto lit = Literal::read(input);
  if (!lit)
    return {};
  if (lit->splat)
    return lit->gather(resultType, {}).write();
  if (resultType.getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<int64_t> map;
  map.reserve(resultType.getNumElements());
  forEachIndex(resultType.getShape(),
               [&](ArrayRef<int64_t> index, int64_t) { map.push_back(source(index)); });
  return lit->gather(resultType, map).write();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  auto inType = getInput().getType();
  auto strides = stridesOf(inType.getShape());
  size_t offset = getType().getRank() - inType.getRank();
  return foldMovement(adaptor.getInput(), getType(), [&](ArrayRef<int64_t> idx) {
    int64_t s = 0;
    for (int64_t d = 0; d < inType.getRank(); ++d)
      if (inType.getDimSize(d) != 1)
        s += idx[d + offset] * strides[d];
    return s;
  });
}

SmallVector<int64_t> TransposeOp::lastTwoDimsSwap(int64_t rank) {
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  if (rank >= 2)
    std::swap(perm[rank - 2], perm[rank - 1]);
  return perm;
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int64_t> perm = getPerm();
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return getInput();
  auto strides = stridesOf(getInput().getType().getShape());
  return foldMovement(adaptor.getInput(), getType(), [&](ArrayRef<int64_t> idx) {
    int64_t s = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      s += idx[d] * strides[perm[d]];
    return s;
  });
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int64_t> starts = getStarts(), steps = getSteps();
  if (getInput().getType() == getType() &&
      llvm::all_of(starts, [](int64_t s) { return s == 0; }) &&
      llvm::all_of(steps, [](int64_t s) { return s == 1; }))
    return getInput();
  auto strides = stridesOf(getInput().getType().getShape());
  return foldMovement(adaptor.getInput(), getType(), [&](ArrayRef<int64_t> idx) {
    int64_t s = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      s += (starts[d] + idx[d] * steps[d]) * strides[d];
    return s;
  });
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1)
    return getInputs()[0];
  auto type = getType();
  if (type.getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<Literal> parts;
  for (Attribute a : adaptor.getInputs()) {
    auto lit = Literal::read(a);
    if (!lit)
      return {};
    parts.push_back(lit->expanded());
  }
  int64_t axis = getAxis();
  Literal out;
  out.type = type;
  // Row-major: for each outer index, copy each part's contiguous block.
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= type.getDimSize(d);
  for (int64_t o = 0; o < outer; ++o)
    for (const Literal &p : parts) {
      int64_t block = p.type.getNumElements() / std::max<int64_t>(outer, 1);
      for (int64_t k = 0; k < block; ++k) {
        if (p.isFloat())
          out.f.push_back(p.f[o * block + k]);
        else
          out.i.push_back(p.i[o * block + k]);
      }
    }
  return out.write();
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  auto indices = Literal::read(adaptor.getIndices());
  if (!indices)
    return {};
  Literal idx = indices->expanded();
  auto dataType = getData().getType();
  int64_t axis = getAxis(), dim = dataType.getDimSize(axis);
  for (int64_t v : idx.i)
    if (v < -dim || v >= dim)
      return {}; // out of range: leave it for the runtime to report
  auto strides = stridesOf(dataType.getShape());
  int64_t q = idx.type.getRank();
  auto idxStrides = stridesOf(idx.type.getShape());
  return foldMovement(adaptor.getData(), getType(), [&](ArrayRef<int64_t> r) {
    int64_t s = 0, j = 0;
    for (int64_t d = 0; d < q; ++d)
      j += r[axis + d] * idxStrides[d];
    int64_t at = idx.i[j] < 0 ? idx.i[j] + dim : idx.i[j];
    for (int64_t d = 0; d < axis; ++d)
      s += r[d] * strides[d];
    s += at * strides[axis];
    for (int64_t d = axis + 1; d < dataType.getRank(); ++d)
      s += r[d - 1 + q] * strides[d];
    return s;
  });
}

OpFoldResult TriluOp::fold(FoldAdaptor adaptor) {
  auto lit = Literal::read(adaptor.getInput());
  if (!lit || getType().getNumElements() > kMaxFoldElements)
    return {};
  Literal out = lit->expanded();
  bool upper = getUpper();
  int64_t k = getK(), rank = getType().getRank();
  forEachIndex(getType().getShape(), [&](ArrayRef<int64_t> idx, int64_t linear) {
    int64_t diff = idx[rank - 1] - idx[rank - 2];
    bool keep = upper ? diff >= k : diff <= k;
    if (!keep) {
      if (out.isFloat())
        out.f[linear] = 0.0;
      else
        out.i[linear] = 0;
    }
  });
  return out.write();
}
