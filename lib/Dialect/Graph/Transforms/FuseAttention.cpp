//===- FuseAttention.cpp - attention chains -> graph.attention ------------===//
//
// A pattern anchored at each softmax: walked down to the scores matmul
// (masks, then the scale) and up to the matmul with v. Only the shapes and
// orders exporters write are matched; anything else is left as it is, which
// is always correct.
//
//===----------------------------------------------------------------------===//

#include "ChainMatch.h"
#include "FusionDriver.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/IR/Literal.h"
#include "lamina/Dialect/Graph/IR/NodeName.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Format.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHFUSEATTENTION
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
/// Fill values at or below this mask a score as surely as -inf does: exp of
/// the difference to any unmasked f32 score is 0.
constexpr double kMaskedBelow = -1e30;
/// A causal mask filling at or below this (GPT-2's `masked_bias`, -1e4) is
/// taken as -inf too: a masked key's probability exp(fill - max) is 0 in
/// f32 once the row's largest kept score exceeds the fill by kUnderflow,
/// so the probabilities are the model's (the compile says so).
constexpr double kCausalFillBelow = -1e4;
constexpr double kUnderflow = 104;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Element (i, j) of a mask as a function of the indices, for values
/// shaped [..., R, C] that are the same matrix at every leading index (a
/// dim of size 1 broadcasts): masks are often computed in the graph (trilu
/// of a splat, cast to i1, sliced from a larger buffer, a `less_equal` of
/// two position ranges and-ed with an all-true padding mask) because their
/// constant is too large to fold. Every op modelled keeps a value the same
/// along the leading dims when its operands are, so only constants are
/// checked. Null when `v` is made by ops this does not model.
using ElementFn = std::function<double(int64_t, int64_t)>;

/// Whether a constant's elements repeat its last [R, C] matrix at every
/// leading index (a batch of identical masks, as TorchScript folds them).
bool sameAtEveryLeadingIndex(const Literal &lit, int64_t matrix) {
  if (lit.splat)
    return true;
  for (int64_t k = matrix; k < lit.size(); ++k)
    if (lit.isFloat() ? lit.f[k] != lit.f[k % matrix]
                      : lit.i[k] != lit.i[k % matrix])
      return false;
  return true;
}

/// The one value a gather of a splat constant reads, if `def` is one.
std::optional<double> gatheredSplat(Operation *def) {
  if (!isa<GatherOp, GatherNDOp>(def))
    return std::nullopt;
  DenseElementsAttr data;
  if (!matchPattern(def->getOperand(0), m_Constant(&data)))
    return std::nullopt;
  return chain::splatValue(data);
}

ElementFn elementFn(Value v, int depth = 0) {
  auto t = typeOf(v);
  int64_t r = t.getRank();
  ArrayRef<int64_t> shape = t.getShape();
  Operation *def = v.getDefiningOp();
  if (!def || depth > 12)
    return {};
  int64_t rows = r >= 2 ? shape[r - 2] : 1, cols = r >= 1 ? shape[r - 1] : 1;
  auto index = [rows, cols](int64_t &i, int64_t &j) {
    i = rows == 1 ? 0 : i;
    j = cols == 1 ? 0 : j;
  };
  auto tail = [&](Value x) {
    auto xt = typeOf(x);
    return xt.getShape().take_back(std::min<int64_t>(xt.getRank(), 2));
  };
  if (auto c = dyn_cast<ConstantOp>(def)) {
    // Any size: a mask constant is read once per mask (MaskCache).
    std::optional<Literal> read =
        Literal::read(c.getValue(), std::numeric_limits<int64_t>::max());
    if (!read || !sameAtEveryLeadingIndex(*read, rows * cols))
      return {};
    auto lit = std::make_shared<const Literal>(std::move(*read));
    return [lit, index, cols](int64_t i, int64_t j) {
      size_t k = 0;
      if (!lit->splat) {
        index(i, j);
        k = size_t(i * cols + j);
      }
      return lit->isFloat() ? lit->f[k] : double(lit->i[k]);
    };
  }
  if (isa<ReshapeOp, BroadcastOp>(def)) {
    Value in = def->getOperand(0);
    if (isa<ReshapeOp>(def) &&
        tail(in) != shape.take_back(std::min<int64_t>(r, 2)))
      return {};
    ElementFn f = elementFn(in, depth + 1);
    auto inTail = tail(in);
    bool rowsBroadcast = inTail.size() < 2 || inTail[inTail.size() - 2] == 1;
    bool colsBroadcast = inTail.empty() || inTail.back() == 1;
    if (!f)
      return {};
    return [f, rowsBroadcast, colsBroadcast](int64_t i, int64_t j) {
      return f(rowsBroadcast ? 0 : i, colsBroadcast ? 0 : j);
    };
  }
  if (auto tri = dyn_cast<TriluOp>(def)) {
    ElementFn f = elementFn(tri.getInput(), depth + 1);
    if (!f || r < 2)
      return {};
    return [f, k = int64_t(tri.getK()), upper = tri.getUpper(),
            index](int64_t i, int64_t j) {
      index(i, j);
      bool keep = upper ? j - i >= k : j - i <= k;
      return keep ? f(i, j) : 0.0;
    };
  }
  if (auto cast = dyn_cast<CastOp>(def)) {
    ElementFn f = elementFn(cast.getInput(), depth + 1);
    Type to = t.getElementType();
    if (!f || !(isa<FloatType>(to) || to.isInteger(1)))
      return {};
    bool toBool = to.isInteger(1);
    return [f, toBool](int64_t i, int64_t j) {
      double x = f(i, j);
      return toBool ? double(x != 0) : x;
    };
  }
  if (auto slice = dyn_cast<SliceOp>(def)) {
    auto in = typeOf(slice.getInput());
    ArrayRef<int64_t> starts = slice.getStarts(), steps = slice.getSteps();
    ElementFn f = elementFn(slice.getInput(), depth + 1);
    if (!f || in.getRank() != r || r < 2)
      return {};
    return [f, r0 = starts[r - 2], c0 = starts[r - 1], rs = steps[r - 2],
            cs = steps[r - 1], index](int64_t i, int64_t j) {
      index(i, j);
      return f(r0 + i * rs, c0 + j * cs);
    };
  }
  if (auto sel = dyn_cast<SelectOp>(def)) {
    ElementFn c = elementFn(sel.getCondition(), depth + 1),
              a = elementFn(sel.getLhs(), depth + 1),
              b = elementFn(sel.getRhs(), depth + 1);
    if (!c || !a || !b)
      return {};
    return [c, a, b](int64_t i, int64_t j) {
      return c(i, j) != 0 ? a(i, j) : b(i, j);
    };
  }
  if (std::optional<double> x = gatheredSplat(def))
    return [x = *x](int64_t, int64_t) { return x; };
  if (auto n = dyn_cast<NotOp>(def)) {
    ElementFn f = elementFn(n.getInput(), depth + 1);
    if (!f)
      return {};
    return [f](int64_t i, int64_t j) { return double(f(i, j) == 0); };
  }
  if (isa<AndOp, OrOp, EqualOp, LessOp, LessEqualOp, GreaterOp, GreaterEqualOp>(
          def)) {
    ElementFn a = elementFn(def->getOperand(0), depth + 1),
              b = elementFn(def->getOperand(1), depth + 1);
    if (!a || !b)
      return {};
    int kind = isa<AndOp>(def)         ? 0
               : isa<OrOp>(def)        ? 1
               : isa<EqualOp>(def)     ? 2
               : isa<LessOp>(def)      ? 3
               : isa<LessEqualOp>(def) ? 4
               : isa<GreaterOp>(def)   ? 5
                                       : 6;
    return [a, b, kind](int64_t i, int64_t j) {
      double x = a(i, j), y = b(i, j);
      switch (kind) {
      case 0:
        return double(x != 0 && y != 0);
      case 1:
        return double(x != 0 || y != 0);
      case 2:
        return double(x == y);
      case 3:
        return double(x < y);
      case 4:
        return double(x <= y);
      case 5:
        return double(x > y);
      default:
        return double(x >= y);
      }
    };
  }
  if (isa<AddOp, SubOp, MulOp>(def)) {
    ElementFn a = elementFn(def->getOperand(0), depth + 1),
              b = elementFn(def->getOperand(1), depth + 1);
    if (!a || !b || !isa<FloatType>(t.getElementType()))
      return {};
    int kind = isa<AddOp>(def) ? 0 : isa<SubOp>(def) ? 1 : 2;
    return [a, b, kind](int64_t i, int64_t j) {
      double x = a(i, j), y = b(i, j);
      return kind == 0 ? x + y : kind == 1 ? x - y : x * y;
    };
  }
  return {};
}

/// Whether mask `v` ([..., Sq, Sk], leading dims 1) is, element for
/// element, `pred(i, j)` as a boolean or, as a float, 0 where `pred` is
/// false and masked (<= kCausalFillBelow) where it is true. The answer is
/// the largest masked value (-inf for a boolean), nullopt for no match.
std::optional<double>
maskMatchesUncached(Value v, int64_t sq, int64_t sk,
                    llvm::function_ref<bool(int64_t, int64_t)> pred) {
  auto t = typeOf(v);
  if (t.getRank() < 2 || t.getShape().take_back(2) != ArrayRef<int64_t>{sq, sk})
    return std::nullopt;
  ElementFn f = elementFn(v);
  if (!f)
    return std::nullopt;
  bool boolean = t.getElementType().isInteger(1);
  if (!boolean && !isa<FloatType>(t.getElementType()))
    return std::nullopt;
  double fill = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j) {
      double x = f(i, j);
      bool want = pred(i, j);
      if (boolean ? (x != 0) != want : want ? !(x <= kCausalFillBelow) : x != 0)
        return std::nullopt;
      if (!boolean && want)
        fill = std::max(fill, x);
    }
  return fill;
}

/// maskMatchesUncached's answers by (mask, Sq, Sk, predicate kind): every
/// layer reads the same mask.
using MaskCache =
    std::map<std::tuple<void *, int64_t, int64_t, int>, std::optional<double>>;

std::optional<double>
maskMatches(MaskCache &cache, int kind, Value v, int64_t sq, int64_t sk,
            llvm::function_ref<bool(int64_t, int64_t)> pred) {
  auto key = std::make_tuple(v.getAsOpaquePointer(), sq, sk, kind);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  return cache[key] = maskMatchesUncached(v, sq, sk, pred);
}

/// A bias the op can take: float, broadcastable to [B, H, Sq, Sk], no
/// gradient needed.
bool isBias(Value bias, ArrayRef<int64_t> full) {
  auto t = typeOf(bias);
  auto joint = broadcastShapes(t.getShape(), full);
  return isa<FloatType>(t.getElementType()) && t.getRank() <= 4 && joint &&
         ArrayRef<int64_t>(*joint) == full && !dependsOnTrainable(bias);
}

/// What one attention chain reads, and the ops it replaces.
struct Match {
  Value q, kT, v, bias;
  double scale = 1;
  bool causal = false;
  /// The causal mask's largest masked value (-inf: a boolean mask or a
  /// fill <= kMaskedBelow; else taken as -inf, see kCausalFillBelow).
  double causalFill = -std::numeric_limits<double>::infinity();
  /// A boolean mask that is not causal (BERT's padding): the bias becomes
  /// `select(boolMask, fill, 0)` (0 and fill swapped when its true keys are
  /// kept), built from the condition before its broadcast.
  Value boolMask;
  double fill = 0;
  bool keepIsTrue = false;
  MatMulOp scores, output;
  SmallVector<Operation *> chain; // output first, scores last
};

/// For x * c, c * x or x / c with a scalar constant c: the factor, and x in
/// `operand`.
std::optional<double> scalarFactor(Value v, Value &operand) {
  if (auto div = v.getDefiningOp<DivOp>()) {
    std::optional<double> c = chain::scalar(div.getRhs());
    if (!c || *c == 0 || div.getLhs().getType() != v.getType())
      return std::nullopt;
    operand = div.getLhs();
    return 1 / *c;
  }
  if (auto mul = v.getDefiningOp<MulOp>()) {
    for (auto [x, factor] : {std::pair(mul.getLhs(), mul.getRhs()),
                             std::pair(mul.getRhs(), mul.getLhs())})
      if (std::optional<double> c = chain::scalar(factor);
          c && x.getType() == v.getType()) {
        operand = x;
        return c;
      }
  }
  return std::nullopt;
}

/// `x` as remarks print numbers: -10000, -3.40282e+38.
std::string number(double x) {
  std::string out;
  llvm::raw_string_ostream(out) << llvm::format("%g", x);
  return out;
}

/// Whether `softmax` looks like attention's: its probabilities are the left
/// operand of a matmul. Only those are reported when left unfused.
bool looksLikeAttention(SoftmaxOp softmax) {
  return llvm::any_of(softmax->getUsers(), [&](Operation *user) {
    auto mm = dyn_cast<MatMulOp>(user);
    return mm && mm.getLhs() == softmax.getResult();
  });
}

/// From the softmax down to the scores: masks (in either order), then the
/// scale, then matmul(q, k^T), whose operands may carry scales of their own
/// (DistilBERT divides q). When it does not match, `why` says what stopped
/// it (empty when the softmax is not attention's).
std::optional<Match> matchChain(SoftmaxOp softmax, MaskCache &cache,
                                std::string &why) {
  if (!looksLikeAttention(softmax))
    return std::nullopt;
  auto fail = [&](const llvm::Twine &reason) -> std::optional<Match> {
    why = reason.str();
    return std::nullopt;
  };
  auto type = typeOf(softmax.getResult());
  if (type.getRank() != 4 || softmax.getAxis() != 3)
    return fail("the scores are not [batch, heads, queries, keys] with the "
                "softmax over the keys");
  if (!softmax.getResult().hasOneUse())
    return fail("the probabilities are read elsewhere too (the model "
                "returns or reuses them)");
  auto output = dyn_cast<MatMulOp>(*softmax->getUsers().begin());
  // (A widening matmul, narrow operands and an f32 result, is not attention's
  // out, which has q's type.)
  if (output.getType().getElementType() != type.getElementType())
    return fail("the probabilities' matmul changes the element type");
  ArrayRef<int64_t> shape = type.getShape();
  int64_t sq = shape[2], sk = shape[3];
  // Keys j > i + sk - sq are the causal mask's; each row keeps one when
  // sq <= sk (else a masked softmax row is uniform, attention's is 0).
  auto masked = [&](int64_t i, int64_t j) { return j > i + sk - sq; };
  Match m;
  m.output = output;
  m.v = output.getRhs();
  m.chain = {output, softmax};
  Value cur = softmax.getInput();
  auto markCausal = [&](double fill) {
    m.causal = true;
    m.causalFill = fill;
  };
  for (;;) {
    Operation *def = cur.getDefiningOp();
    if (!def)
      break;
    if (!cur.hasOneUse())
      return fail("an intermediate value of the chain (" +
                  def->getName().getStringRef() + ") is read elsewhere too");
    if (auto sel = dyn_cast<SelectOp>(def)) {
      // select(mask, fill, s) with the masked keys true, or
      // select(mask, s, fill) with the kept keys true.
      std::optional<double> fill;
      Value scores;
      bool keepIsTrue = false;
      if ((fill = chain::scalar(sel.getLhs())))
        scores = sel.getRhs();
      else if ((fill = chain::scalar(sel.getRhs())))
        scores = sel.getLhs(), keepIsTrue = true;
      if (!fill || scores.getType() != cur.getType())
        return fail("a select on the scores does not fill with one constant");
      if (!(*fill <= kCausalFillBelow))
        return fail("a mask fills with " + number(*fill) +
                    ", above -1e4: its keys keep weight");
      bool causal = !m.causal && sq <= sk &&
                    maskMatches(cache, keepIsTrue ? 1 : 0, sel.getCondition(),
                                sq, sk, [&](int64_t i, int64_t j) {
                                  return masked(i, j) != keepIsTrue;
                                });
      if (causal) {
        markCausal(*fill);
      } else if (!(*fill <= kMaskedBelow)) {
        // Added as a bias, a fill this small would not absorb the score:
        // a row with every key masked would differ from the model's.
        return fail("a boolean mask that is not causal fills with " +
                    number(*fill) +
                    ", above -1e30 (use the dtype's minimum or -inf)");
      } else if (!m.bias && !m.boolMask) {
        // Masked keys get `fill` added instead of replacing the score:
        // the same probabilities wherever a row keeps a key.
        Value cond = sel.getCondition();
        if (auto bcast = cond.getDefiningOp<BroadcastOp>())
          cond = bcast.getInput();
        if (typeOf(cond).getRank() > 4)
          return fail("a boolean mask of rank above 4");
        m.boolMask = cond;
        m.fill = *fill;
        m.keepIsTrue = keepIsTrue;
      } else {
        return fail("more than one mask besides the causal one");
      }
      m.chain.push_back(sel);
      cur = scores;
      continue;
    }
    if (auto add = dyn_cast<AddOp>(def)) {
      bool matched = false;
      for (auto [scores, mask] : {std::pair(add.getLhs(), add.getRhs()),
                                  std::pair(add.getRhs(), add.getLhs())}) {
        if (scores.getType() != cur.getType() || mask == scores)
          continue;
        std::optional<double> causalFill;
        if (!m.causal && sq <= sk &&
            (causalFill = maskMatches(cache, 2, mask, sq, sk, masked))) {
          markCausal(*causalFill);
        } else if (!m.bias && !m.boolMask && isBias(mask, shape)) {
          m.bias = mask;
        } else {
          continue;
        }
        matched = true;
        cur = scores;
        break;
      }
      if (!matched)
        return fail("a term added to the scores is learned (depends on a "
                    "trainable parameter), does not broadcast to them, or is "
                    "a second mask");
      m.chain.push_back(add);
      continue;
    }
    break;
  }
  Value unscaled;
  if (std::optional<double> c = scalarFactor(cur, unscaled)) {
    m.scale = *c;
    m.chain.push_back(cur.getDefiningOp());
    cur = unscaled;
  }
  auto scores = cur.getDefiningOp<MatMulOp>();
  if (!scores)
    return fail("the scores are not a matmul of q and k^T (after the masks "
                "and a scale by a scalar constant)");
  if (!cur.hasOneUse())
    return fail("the scores are read elsewhere too");
  m.scores = scores;
  m.q = scores.getLhs();
  m.kT = scores.getRhs();
  m.chain.push_back(scores);
  for (Value *operand : {&m.q, &m.kT})
    if (std::optional<double> c = scalarFactor(*operand, unscaled);
        c && operand->hasOneUse() &&
        !llvm::is_contained(m.chain, operand->getDefiningOp())) {
      m.scale *= *c;
      m.chain.push_back(operand->getDefiningOp());
      *operand = unscaled;
    }
  // Same batch and head dims everywhere: no broadcasting matmul.
  auto qt = typeOf(m.q), kt = typeOf(m.kT), vt = typeOf(m.v);
  if (qt.getRank() != 4 || kt.getRank() != 4 || vt.getRank() != 4 ||
      qt.getShape().take_front(2) != shape.take_front(2) ||
      kt.getShape().take_front(2) != shape.take_front(2) ||
      vt.getShape().take_front(2) != shape.take_front(2))
    return fail("q, k and v are not [batch, heads, seq, dim] with the "
                "scores' batch and heads (a broadcasting matmul)");
  if (qt.getElementType() != type.getElementType() ||
      kt.getElementType() != type.getElementType() ||
      vt.getElementType() != type.getElementType())
    return fail("q, k, v and the scores differ in element type");
  return m;
}

/// `x` [B, Hk*g, S, D] that repeats each of Hk kv heads g times
/// (reshape -> broadcast -> reshape, as exporters write repeat_kv): the
/// [B, Hk, S, D] tensor; else `x` itself.
Value sharedKvHeads(Value x) {
  auto outer = x.getDefiningOp<ReshapeOp>();
  auto bcast = outer ? outer.getInput().getDefiningOp<BroadcastOp>() : nullptr;
  auto inner = bcast ? bcast.getInput().getDefiningOp<ReshapeOp>() : nullptr;
  if (!inner)
    return x;
  ArrayRef<int64_t> to = typeOf(x).getShape();
  ArrayRef<int64_t> b5 = typeOf(bcast.getResult()).getShape();
  Value kv = inner.getInput();
  auto kvType = typeOf(kv);
  if (kvType.getRank() != 4 || b5.size() != 5)
    return x;
  ArrayRef<int64_t> from = kvType.getShape();
  ArrayRef<int64_t> i5 = typeOf(inner.getResult()).getShape();
  bool ok = i5 == ArrayRef<int64_t>{from[0], from[1], 1, from[2], from[3]} &&
            b5[0] == from[0] && b5[1] == from[1] && b5[3] == from[2] &&
            b5[4] == from[3] && to[0] == from[0] && to[1] == from[1] * b5[2] &&
            to[2] == from[2] && to[3] == from[3];
  return ok ? kv : x;
}

/// k [B, H, Sk, D] from k^T [B, H, D, Sk]: a transpose producing k^T is
/// composed with the swap (k itself when that is the identity).
Value untransposeKeys(OpBuilder &b, Location loc, Value kT) {
  SmallVector<int64_t> perm = {0, 1, 3, 2};
  Value source = kT;
  if (auto t = kT.getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> p = t.getPerm();
    perm = {p[0], p[1], p[3], p[2]};
    source = t.getInput();
  }
  if (perm == SmallVector<int64_t>{0, 1, 2, 3})
    return source;
  return TransposeOp::create(b, loc, source, perm);
}

/// The [B, S, heads, D] value `v` is the head-major transpose of, if any.
Value seqMajorSource(Value v) {
  auto t = v.getDefiningOp<TransposeOp>();
  return t && t.getPerm() == ArrayRef<int64_t>{0, 2, 1, 3} ? t.getInput()
                                                           : Value();
}

/// q, k and v transposed from [B, S, heads, D] and out only transposed
/// back: the op becomes seq_major, reading and writing those values, and
/// the transposes go (the projections' layout; no head transposes forward
/// or, after autodiff, backward).
bool makeSeqMajor(RewriterBase &rewriter, AttentionOp at) {
  Value q = seqMajorSource(at.getQ()), k = seqMajorSource(at.getK()),
        v = seqMajorSource(at.getV());
  if (at.getSeqMajor() || !q || !k || !v || at.getOut().use_empty() ||
      !llvm::all_of(at.getOut().getUsers(), [](Operation *user) {
        auto t = dyn_cast<TransposeOp>(user);
        return t && t.getPerm() == ArrayRef<int64_t>{0, 2, 1, 3};
      }))
    return false;
  rewriter.setInsertionPoint(at);
  SmallVector<int64_t> outShape(typeOf(at.getOut()).getShape());
  std::swap(outShape[1], outShape[2]);
  auto seq = AttentionOp::create(
      rewriter, at.getLoc(),
      TypeRange{typeOf(at.getOut()).clone(outShape), at.getLse().getType()}, q,
      k, v, at.getBias(), at.getScaleAttr(), at.getCausalAttr(),
      rewriter.getUnitAttr());
  for (Operation *user : llvm::make_early_inc_range(at.getOut().getUsers()))
    rewriter.replaceOp(user, seq.getOut());
  rewriter.replaceAllUsesWith(at.getLse(), seq.getLse());
  rewriter.eraseOp(at);
  return true;
}

/// What the pattern counts, for the pass's statistics and remarks.
struct FusionState {
  FusionState(llvm::Statistic &fused, llvm::Statistic &causal,
              llvm::Statistic &seqMajor)
      : fused(fused), causal(causal), seqMajor(seqMajor) {}

  MaskCache cache;
  /// Unfused chains by reason (the first node, how many), each softmax
  /// once.
  std::map<std::string, std::pair<std::string, int>> unfused;
  llvm::DenseSet<Operation *> reported;
  /// The causal masks whose fill was taken as -inf.
  int largeFills = 0;
  double largestFill = -std::numeric_limits<double>::infinity();
  llvm::Statistic &fused, &causal, &seqMajor;
};

/// The chain anchored at a softmax -> one graph.attention at its output
/// matmul (seq_major when its operands and users allow).
struct FuseAttentionChain : OpRewritePattern<SoftmaxOp> {
  FuseAttentionChain(MLIRContext *ctx, FusionState &state)
      : OpRewritePattern(ctx), state(state) {}

  LogicalResult matchAndRewrite(SoftmaxOp softmax,
                                PatternRewriter &rewriter) const override {
    std::string why;
    std::optional<Match> m = matchChain(softmax, state.cache, why);
    if (!m) {
      if (!why.empty() && state.reported.insert(softmax).second) {
        auto &entry = state.unfused[why];
        if (entry.second++ == 0)
          entry.first = nodeNameOf(softmax);
      }
      return failure();
    }
    if (m->causal && m->causalFill > kMaskedBelow) {
      ++state.largeFills;
      state.largestFill = std::max(state.largestFill, m->causalFill);
    }
    rewriter.setInsertionPoint(m->output);
    Location loc = m->scores.getLoc();
    Value keys = untransposeKeys(rewriter, loc, m->kT);
    Value k = sharedKvHeads(keys);
    Value v = sharedKvHeads(m->v);
    if (typeOf(k).getShape()[1] != typeOf(v).getShape()[1]) {
      // Only one of them shares heads: read both repeated.
      k = keys;
      v = m->v;
    }
    auto qt = typeOf(m->q);
    Type lseElement = qt.getElementType().isF64() ? qt.getElementType()
                                                  : Type(rewriter.getF32Type());
    auto lseType = RankedTensorType::get(qt.getShape().drop_back(), lseElement);
    if (m->boolMask) {
      Type element = typeOf(m->output.getResult()).getElementType();
      auto scalar = [&](double x) -> Value {
        auto t = RankedTensorType::get({}, element);
        return ConstantOp::create(rewriter, loc,
                                  cast<ElementsAttr>(DenseElementsAttr::get(
                                      t, rewriter.getFloatAttr(element, x))));
      };
      Value fill = scalar(m->fill), zero = scalar(0);
      m->bias = m->keepIsTrue
                    ? SelectOp::create(rewriter, loc, m->boolMask, zero, fill)
                    : SelectOp::create(rewriter, loc, m->boolMask, fill, zero);
    }
    auto attention = AttentionOp::create(
        rewriter, loc, TypeRange{m->output.getType(), lseType}, m->q, k, v,
        m->bias, rewriter.getF64FloatAttr(m->scale),
        m->causal ? rewriter.getUnitAttr() : UnitAttr());
    rewriter.replaceAllUsesWith(m->output.getResult(), attention.getOut());
    for (Operation *op : m->chain)
      rewriter.eraseOp(op);
    state.seqMajor += makeSeqMajor(rewriter, attention);
    ++state.fused;
    if (m->causal)
      ++state.causal;
    return success();
  }

  FusionState &state;
};

struct GraphFuseAttention
    : lamina::ir::graph::impl::GraphFuseAttentionBase<GraphFuseAttention> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    FusionState state(numFused, numCausal, numSeqMajor);
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseAttentionChain>(&getContext(), state);
    bool changed = false;
    if (failed(applyFusionPatterns(anchorsOf<SoftmaxOp>(func),
                                   std::move(patterns), &changed)))
      return signalPassFailure();
    // Say what the fusion changed and what it left (issue: no silent
    // performance cliffs, no silent change of what the model computes).
    if (state.largeFills)
      func.emitRemark() << state.largeFills << " attention chain"
                        << (state.largeFills > 1 ? "s" : "")
                        << " fused with a causal mask filling "
                        << number(state.largestFill)
                        << " taken as -inf: the probabilities are the model's "
                           "while every row's largest kept score exceeds the "
                           "fill by "
                        << number(kUnderflow)
                        << " (exp underflows to 0 in f32)";
    for (const auto &[why, where] : state.unfused)
      func.emitRemark() << "attention at " << where.first
                        << (where.second > 1
                                ? " (and " + std::to_string(where.second - 1) +
                                      " more)"
                                : std::string())
                        << " not fused: " << why
                        << "; it runs as matmul, softmax, matmul and keeps "
                           "the [batch, heads, queries, keys] scores";
    if (!changed)
      return;
    // The masks, transposes and kv-head repeats that only fed the chains.
    for (Block &block : func.getBody())
      eraseDeadOps(block);
  }
};
} // namespace
