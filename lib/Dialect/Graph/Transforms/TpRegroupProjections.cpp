//===- TpRegroupProjections.cpp - fused projections for tensor parallelism ===//
//
// A fused q/k/v projection (GPT-2's c_attn) sliced on its output dim is
// not a column-parallel GEMM as it stands: rank r needs the r-th share of
// every part, not the r-th block of the weight. Stored regrouped (each
// rank's shares side by side) it is one, and the slices read the parts
// through a reshape that keeps the group's dim outermost, which the
// sharding rules carry. Done before autodiff, so the backward follows.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHTPREGROUPPROJECTIONS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {

bool isTrainableArg(func::FuncOp f, Value v, int64_t rank) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &f.getBody().front() ||
      cast<RankedTensorType>(arg.getType()).getRank() != rank)
    return false;
  auto kind = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
  return kind && kind.getValue() == kKindTrainable;
}

/// One fused projection: its weight (and bias) arguments, read by nothing
/// else, and the slices that take its parts.
struct Projection {
  BlockArgument weight, bias;
  bool transposed = false;
  Value out; // the product, or the product plus the bias
  int64_t parts = 0;
  SmallVector<std::pair<SliceOp, int64_t>> slices; // and the part each takes
};

/// The projection `mm` computes, when its output (after an optional bias)
/// is only sliced into equal parts of its last dim that `tp` divides.
std::optional<Projection> match(func::FuncOp f, MatMulOp mm, int64_t tp) {
  Projection p;
  Value w = mm.getRhs();
  Operation *transpose = nullptr;
  if (auto t = w.getDefiningOp<TransposeOp>()) {
    if (t.getPerm().size() != 2 || t.getPerm()[0] != 1 ||
        !t.getResult().hasOneUse())
      return std::nullopt;
    transpose = t;
    p.transposed = true;
    w = t.getInput();
  }
  if (!isTrainableArg(f, w, 2) ||
      !llvm::all_of(w.getUsers(), [&](Operation *u) {
        return u == mm.getOperation() || u == transpose;
      }))
    return std::nullopt;
  p.weight = cast<BlockArgument>(w);
  p.out = mm.getResult();
  auto type = cast<RankedTensorType>(p.out.getType());
  int64_t rank = type.getRank(), n = type.getDimSize(rank - 1);
  if (p.out.hasOneUse())
    if (auto add = dyn_cast<AddOp>(*p.out.getUsers().begin())) {
      Value bias = add.getLhs() == p.out ? add.getRhs() : add.getLhs();
      if (isTrainableArg(f, bias, 1) && bias.hasOneUse() &&
          add.getType() == type) {
        p.bias = cast<BlockArgument>(bias);
        p.out = add.getResult();
      }
    }
  // Equal parts of the last dim, each taken whole, every part once.
  int64_t size = 0;
  llvm::SmallDenseSet<int64_t> starts;
  for (Operation *user : p.out.getUsers()) {
    auto s = dyn_cast<SliceOp>(user);
    if (!s)
      return std::nullopt;
    for (int64_t d = 0; d + 1 < rank; ++d)
      if (s.getStarts()[d] != 0 || s.getSizes()[d] != type.getDimSize(d) ||
          s.getSteps()[d] != 1)
        return std::nullopt;
    int64_t start = s.getStarts()[rank - 1], len = s.getSizes()[rank - 1];
    if (s.getSteps()[rank - 1] != 1 || len <= 0 || (size && len != size) ||
        start % len != 0)
      return std::nullopt;
    size = len;
    starts.insert(start);
    p.slices.push_back({s, start / len});
  }
  if (!size || n % size != 0 || n / size < 2 ||
      int64_t(starts.size()) != n / size || size % tp != 0 ||
      !type.hasStaticShape())
    return std::nullopt;
  p.parts = n / size;
  return p;
}

struct GraphTpRegroupProjections
    : lamina::ir::graph::impl::GraphTpRegroupProjectionsBase<
          GraphTpRegroupProjections> {
  using GraphTpRegroupProjectionsBase::GraphTpRegroupProjectionsBase;

  void runOnOperation() override {
    if (tp <= 1)
      return;
    func::FuncOp f = getOperation();
    SmallVector<Projection> found;
    f.walk([&](MatMulOp mm) {
      if (std::optional<Projection> p = match(f, mm, int64_t(tp)))
        found.push_back(std::move(*p));
    });
    for (Projection &p : found)
      regroup(f, p);
  }

  /// The slices read part j of [..., T, k, n/T]: the rank's shares of the
  /// parts side by side, in the layout the runtime loads.
  void regroup(func::FuncOp f, Projection &p) {
    auto type = cast<RankedTensorType>(p.out.getType());
    int64_t rank = type.getRank(), t = int64_t(tp);
    int64_t share = type.getDimSize(rank - 1) / p.parts / t;
    SmallVector<int64_t> grouped(type.getShape().drop_back());
    grouped.append({t, p.parts, share});
    OpBuilder b(f.getContext());
    b.setInsertionPointAfterValue(p.out);
    Location loc = p.out.getLoc();
    Value view = ReshapeOp::create(
        b, loc, RankedTensorType::get(grouped, type.getElementType()), p.out);
    for (auto [slice, part] : p.slices) {
      SmallVector<int64_t> starts(rank + 2, 0), sizes(grouped),
          steps(rank + 2, 1);
      starts[rank] = part;
      sizes[rank] = 1;
      b.setInsertionPoint(slice);
      Value one = SliceOp::create(
          b, slice.getLoc(), view, b.getDenseI64ArrayAttr(starts),
          b.getDenseI64ArrayAttr(sizes), b.getDenseI64ArrayAttr(steps));
      Value back = ReshapeOp::create(b, slice.getLoc(), slice.getType(), one);
      slice.replaceAllUsesWith(back);
      slice.erase();
    }
    // The parts are the weight's output dim: its last, or its first when
    // the product reads it transposed (PyTorch's Linear).
    f.setArgAttr(p.weight.getArgNumber(), kTpPartsAttr,
                 b.getDenseI64ArrayAttr({p.transposed ? 0 : 1, p.parts}));
    if (p.bias)
      f.setArgAttr(p.bias.getArgNumber(), kTpPartsAttr,
                   b.getDenseI64ArrayAttr({0, p.parts}));
    ++numRegrouped;
  }
};

} // namespace
