//===- OpsMoE.cpp - TopK and mixture-of-experts blocks --------------------===//
//
// Hugging Face's eager experts (Mixtral, Qwen2-MoE, OLMoE: a one-hot of the
// router's top-k picks, then a Python loop over the experts the tracing
// batch hit, each gathering its tokens with NonZero, running its gated MLP
// and index_add-ing the weighted result) export as that loop unrolled over
// the experts the tracing batch hit: data-dependent shapes (NonZero) a
// static compiler cannot import, and a graph that fails in onnxruntime on
// a batch hitting fewer experts and never runs an expert the trace missed.
// recognizeEagerExperts replaces each such block, before import, by one
// `ai.lamina` MoEExperts node over what it reads (the tokens, the picks, their
// weights, the experts' two weight tensors), which imports as graph.moe: every
// expert over whichever tokens pick it. The dynamo exporter cannot export the
// eager loop (torch.export fails on its data-dependent trip count); its users
// pick `experts_implementation="batched_mm"`, which gathers each (token, pick)
// pair's expert weights and runs batched GEMMs: recognizeBatchedExperts
// replaces that block by the same node. docs/moe-design.md.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cstring>
#include <map>
#include <optional>

using namespace mlir;
using namespace lamina;
using namespace lamina::onnx;
using ::onnx::GraphProto;
using ::onnx::NodeProto;

namespace {

/// TopK (opset 1: `k` an attribute; 10+: a constant input) on the last
/// axis, largest first, sorted: graph.topk.
LogicalResult importTopK(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  int64_t k;
  if (ctx.opset < 10) {
    k = ctx.attrInt("k", -1);
  } else {
    auto ks = ctx.constInts(1);
    if (!ks)
      return failure();
    if (ks->size() != 1)
      return ctx.error() << "k must hold one value";
    k = (*ks)[0];
  }
  auto type = ctx.inputType(0);
  auto axis = ctx.axis(ctx.attrInt("axis", -1), type.getRank());
  if (!axis)
    return failure();
  if (*axis != type.getRank() - 1 || ctx.attrInt("largest", 1) != 1 ||
      ctx.attrInt("sorted", 1) != 1)
    return ctx.error() << "only the k largest of the last axis, sorted, are "
                          "supported (axis "
                       << *axis << ", largest " << ctx.attrInt("largest", 1)
                       << ", sorted " << ctx.attrInt("sorted", 1) << ")";
  if (!isa<FloatType>(type.getElementType()))
    return ctx.error() << "TopK of " << type << ": float inputs only";
  if (k < 1 || k > type.getShape().back())
    return ctx.error() << "k = " << k << " is outside [1, "
                       << type.getShape().back() << "]";
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = k;
  auto op = ir::graph::TopKOp::create(
      ctx.b, ctx.loc, RankedTensorType::get(shape, type.getElementType()),
      RankedTensorType::get(shape, ctx.b.getI64Type()), x,
      ctx.b.getI64IntegerAttr(k));
  if (failed(op.verify())) {
    op.erase();
    return ctx.error() << "produced an invalid op";
  }
  ctx.setOutput(0, op.getValues());
  if (ctx.wantsOutput(1))
    ctx.setOutput(1, op.getIndices());
  return success();
}

/// ai.lamina MoEExperts(tokens [T, H], picks [T, k], weights [T, k],
/// gate_up [E, 2I, H], down [E, H, I]): graph.moe, the picks as i64.
LogicalResult importMoEExperts(NodeContext &ctx) {
  SmallVector<Value> in;
  for (size_t i = 0; i < 5; ++i) {
    Value v = ctx.input(i);
    if (!v)
      return failure();
    in.push_back(v);
  }
  in[1] = ctx.cast(in[1], ctx.b.getI64Type());
  auto tokens = cast<RankedTensorType>(in[0].getType());
  if (tokens.getRank() != 2)
    return ctx.error() << "the experts read tokens " << tokens
                       << ", not [tokens, hidden]";
  in[2] = ctx.cast(in[2], tokens.getElementType());
  return ctx.result(
      ctx.build<ir::graph::MoEOp>(tokens, in[0], in[1], in[2], in[3], in[4]));
}

//===----------------------------------------------------------------------===//
// Recognising the eager experts' loop
//===----------------------------------------------------------------------===//

/// Ops the unrolled loop is made of; anything else inside the block means
/// it is not the loop this matcher knows, and it is refused.
// clang-format off
const llvm::StringSet<> kLoopOps = {
    "Constant", "OneHot",    "Transpose",       "ReduceSum", "Greater",
    "NonZero",  "Split",     "Squeeze",         "Unsqueeze", "Gather",
    "Cast",     "MatMul",    "Shape",           "Add",       "Sub",
    "Div",      "Mul",       "Slice",           "Sigmoid",   "Flatten",
    "Concat",   "Reshape",   "Expand",          "ScatterElements",
    "Equal",    "Where",     "ConstantOfShape", "And",       "Identity",
    "Range",    "ScatterND", "GatherElements",  "Not",       "Less"};
// clang-format on

struct ExpertsBlock {
  std::vector<int> nodes; // the loop's nodes, to remove
  int sink = -1;          // the last index_add
  std::string tokens, picks, weights, gateUp, down;
  int64_t expertsHit = 0;
};

/// Who writes and who reads each value of a graph, and its initializers:
/// what both matchers walk.
struct GraphIndex {
  explicit GraphIndex(const GraphProto &graph) : graph(graph) {
    for (int i = 0; i < graph.node_size(); ++i) {
      for (const std::string &out : graph.node(i).output())
        producer[out] = i;
      for (const std::string &in : graph.node(i).input())
        consumers[in].push_back(i);
    }
    for (const auto &t : graph.initializer())
      initializers[t.name()] = &t;
  }

  const NodeProto &node(int i) const { return graph.node(i); }
  int producerOf(const std::string &v) const {
    auto it = producer.find(v);
    return it == producer.end() ? -1 : it->second;
  }
  /// Walks back from `v` through layout ops to the value they reshape.
  std::string throughLayout(std::string v) const {
    static const llvm::StringSet<> layout = {
        "Unsqueeze", "Flatten", "Reshape", "Cast", "Identity", "Squeeze"};
    // At most one step per node: a cyclic file does not loop forever.
    for (int steps = 0, p = producerOf(v);
         steps < graph.node_size() && p >= 0 &&
         layout.contains(node(p).op_type()) && node(p).input_size() > 0;
         ++steps, p = producerOf(v))
      v = node(p).input(0);
    return v;
  }

  const GraphProto &graph;
  llvm::StringMap<int> producer;
  llvm::StringMap<std::vector<int>> consumers;
  llvm::StringMap<const ::onnx::TensorProto *> initializers;
};

class Matcher : GraphIndex {
public:
  explicit Matcher(const GraphProto &graph) : GraphIndex(graph) {}
  using GraphIndex::node;
  using GraphIndex::producerOf;

  /// An index_add: an Add of a ScatterElements result.
  bool addsScatter(int n) const {
    if (node(n).op_type() != "Add")
      return false;
    for (const std::string &in : node(n).input())
      if (int p = producerOf(in);
          p >= 0 && node(p).op_type() == "ScatterElements")
        return true;
    return false;
  }

  /// The block the one-hot `oneHot` starts, or an error naming a node.
  std::string match(int oneHot, ExpertsBlock &block) {
    // Everything the one-hot's value reaches up to the index_add chain:
    // past it lie the later layers, whose own loops it also reaches.
    llvm::DenseSet<int> reached{oneHot};
    std::vector<int> work{oneHot};
    while (!work.empty()) {
      int n = work.back();
      work.pop_back();
      if (addsScatter(n))
        continue;
      for (const std::string &out : node(n).output())
        for (int c : consumers[out])
          if (reached.insert(c).second)
            work.push_back(c);
    }
    // The index_add chain: adds of a ScatterElements result; the sink is
    // the one no other such add reads.
    std::vector<int> adds;
    for (int n : reached)
      if (node(n).op_type() == "Add" && node(n).output_size() == 1)
        for (const std::string &in : node(n).input())
          if (int p = producerOf(in); p >= 0 && reached.contains(p) &&
                                      node(p).op_type() == "ScatterElements")
            adds.push_back(n);
    llvm::DenseSet<int> addSet(adds.begin(), adds.end());
    for (int a : adds) {
      bool last = true;
      for (int c : consumers[node(a).output(0)])
        last &= !addSet.contains(c);
      if (last) {
        if (block.sink >= 0)
          return "two index_add chains read the one-hot";
        block.sink = a;
      }
    }
    if (block.sink < 0)
      return "no index_add of the experts' outputs reads the one-hot";
    // The block: what the sink depends on among the reached nodes.
    llvm::DenseSet<int> inBlock;
    work = {block.sink};
    inBlock.insert(block.sink);
    while (!work.empty()) {
      int n = work.back();
      work.pop_back();
      for (const std::string &in : node(n).input()) {
        int p = producerOf(in);
        if (p >= 0 && reached.contains(p) && inBlock.insert(p).second)
          work.push_back(p);
      }
    }
    // Nothing else may read the loop's values but what follows the sink.
    llvm::DenseSet<int> after;
    work = {block.sink};
    while (!work.empty()) {
      int n = work.back();
      work.pop_back();
      for (const std::string &out : node(n).output())
        for (int c : consumers[out])
          if (!inBlock.contains(c) && after.insert(c).second)
            work.push_back(c);
    }
    for (int n : reached)
      if (!inBlock.contains(n) && !after.contains(n))
        return "node '" + node(n).name() + "' (" + node(n).op_type() +
               ") reads the routing outside the experts' loop";
    for (int n : inBlock)
      if (!kLoopOps.contains(node(n).op_type()))
        return "node '" + node(n).name() + "' (" + node(n).op_type() +
               ") in the experts' loop is not one the matcher knows";
    // The constants only the loop reads go with it.
    for (int n = 0; n < graph.node_size(); ++n)
      if (node(n).op_type() == "Constant" && !inBlock.contains(n) &&
          node(n).output_size() == 1) {
        const std::vector<int> &readers = consumers[node(n).output(0)];
        if (!readers.empty() &&
            llvm::all_of(readers, [&](int c) { return inBlock.contains(c); }))
          inBlock.insert(n);
      }
    block.nodes.assign(inBlock.begin(), inBlock.end());
    llvm::sort(block.nodes);
    return operands(oneHot, inBlock, block);
  }

public:
  /// Whether node i is a router's one-hot: of a TopK's indices.
  bool isRoutingOneHot(int i) const {
    const NodeProto &n = node(i);
    if (n.op_type() != "OneHot" || n.input_size() < 1 || n.output_size() != 1)
      return false;
    int p = producerOf(throughLayout(n.input(0)));
    return p >= 0 && node(p).op_type() == "TopK" &&
           node(p).output_size() == 2 &&
           node(p).output(1) == throughLayout(n.input(0));
  }

private:
  /// What the block reads: the picks (the one-hot's input), the experts'
  /// weights (rank-3 initializers each gathered per expert into a GEMM),
  /// the tokens (gathered into the first GEMM) and the routing weights
  /// (gathered, outside the loop, to scale the outputs).
  std::string operands(int oneHot, const llvm::DenseSet<int> &inBlock,
                       ExpertsBlock &block) {
    block.picks = throughLayout(node(oneHot).input(0));
    std::map<std::string, int> experts; // initializer -> GEMMs reading it
    llvm::StringSet<> tokens, weights;
    int sigmoids = 0, hits = 0;
    for (int n : inBlock) {
      const NodeProto &nd = node(n);
      if (nd.op_type() == "Sigmoid")
        ++sigmoids;
      // The loop's trip count: the hit experts' indices split on axis 0.
      if (nd.op_type() == "Split") {
        int64_t axis = 0;
        for (const auto &attr : nd.attribute())
          if (attr.name() == "axis")
            axis = attr.i();
        if (axis == 0)
          hits = std::max(hits, nd.output_size());
      }
      if (nd.op_type() != "Gather" || nd.input_size() < 2 ||
          nd.output_size() < 1)
        continue;
      const std::string &data = nd.input(0);
      if (int p = producerOf(data); p >= 0 && inBlock.contains(p))
        continue;
      auto init = initializers.find(data);
      if (init != initializers.end() && init->second->dims_size() == 3) {
        ++experts[data];
        continue;
      }
      if (init != initializers.end())
        continue;
      // A value from outside: the tokens feed a GEMM directly, the routing
      // weights only scale.
      bool gemm = false;
      for (int c : consumers[nd.output(0)])
        gemm |= node(c).op_type() == "MatMul";
      if (gemm)
        tokens.insert(data);
      else
        weights.insert(throughLayout(data));
    }
    if (experts.size() != 2)
      return "the experts' loop gathers " + std::to_string(experts.size()) +
             " weight tensors per expert, not a gate/up and a down tensor";
    if (tokens.size() != 1 || weights.size() != 1)
      return "the experts' loop reads " + std::to_string(tokens.size()) +
             " token and " + std::to_string(weights.size()) +
             " routing-weight tensors, not one of each";
    if (sigmoids == 0)
      return "the experts' activation is not SiLU (x * sigmoid(x))";
    // gate_up [E, 2I, H] and down [E, H, I].
    auto it = experts.begin();
    const ::onnx::TensorProto *a = initializers[it->first],
                              *b = initializers[std::next(it)->first];
    if (a->dims(1) != 2 * b->dims(2))
      std::swap(a, b);
    if (a->dims(0) != b->dims(0) || a->dims(1) != 2 * b->dims(2) ||
        a->dims(2) != b->dims(1))
      return "the experts' weights '" + a->name() + "' and '" + b->name() +
             "' are not [E, 2I, H] and [E, H, I]";
    block.gateUp = a->name();
    block.down = b->name();
    block.tokens = tokens.begin()->getKey().str();
    block.weights = weights.begin()->getKey().str();
    block.expertsHit = hits;
    return "";
  }
};

//===----------------------------------------------------------------------===//
// Recognising the batched experts (the dynamo export)
//===----------------------------------------------------------------------===//

/// Hugging Face's `batched_mm` experts as the dynamo exporter writes them
/// (S = T k pairs, row t k + j the token t's j-th pick):
///
///   picks' = Unsqueeze(Reshape(picks [T, k], [-1]), -1)         [S, 1]
///   x'     = Reshape(Expand(Unsqueeze(x [T, H], 1), [1, k, 1]), [-1, H])
///   h      = Squeeze(MatMul(GatherND(gate_up, picks'), Unsqueeze(x', -1)), -1)
///   g, u   = Split(h, 2 equal halves, axis 1)
///   a      = g * Sigmoid(g) * u
///   y      = Squeeze(MatMul(GatherND(down, picks'), Unsqueeze(a, -1)), -1)
///   out    = ReduceSum(Reshape(y * Unsqueeze(Reshape(w [T, k], [-1]), -1),
///                              [-1, k, H]), axes 1, keepdims 0)    [T, H]
///
/// (Gather on axis 0 of Reshape(picks, [-1]) stands for the GatherND too.)
/// The gathered weights are T k copies of the experts' (each pair's own),
/// which graph.moe never makes.
struct BatchedBlock {
  int sink = -1; // the ReduceSum
  std::string tokens, picks, weights, gateUp, down, module;
};

class BatchedMatcher : GraphIndex {
public:
  explicit BatchedMatcher(const GraphProto &graph) : GraphIndex(graph) {}
  using GraphIndex::node;

  /// The gathers of rank-3 initializers by TopK node `topk`'s picks (the
  /// experts' weights of one batched block), in graph order.
  std::vector<int> expertGathers(int topk) const {
    std::vector<int> found;
    if (node(topk).output_size() != 2)
      return found;
    const std::string &picks = node(topk).output(1);
    for (int n = 0; n < graph.node_size(); ++n) {
      const NodeProto &nd = node(n);
      if ((nd.op_type() != "Gather" && nd.op_type() != "GatherND") ||
          nd.input_size() != 2 || nd.output_size() != 1)
        continue;
      auto init = initializers.find(nd.input(0));
      if (init == initializers.end() || init->second->dims_size() != 3)
        continue;
      if (throughLayout(nd.input(1)) == picks)
        found.push_back(n);
    }
    return found;
  }

  /// Matches the block whose gathers are `gathers`; "" or what differs.
  std::string match(int topk, const std::vector<int> &gathers,
                    BatchedBlock &block) {
    if (gathers.size() != 2)
      return std::to_string(gathers.size()) +
             " rank-3 weight tensors are gathered by the router's picks, not "
             "a gate/up and a down tensor";
    auto k = constInts(node(topk).input_size() > 1 ? node(topk).input(1) : "");
    if (!k || k->size() != 1)
      return "the router's TopK '" + node(topk).name() + "' has no constant k";
    int g1 = gathers[0], g2 = gathers[1];
    const ::onnx::TensorProto *a = initializers[node(g1).input(0)],
                              *b = initializers[node(g2).input(0)];
    if (a->dims(1) != 2 * b->dims(2)) {
      std::swap(a, b);
      std::swap(g1, g2);
    }
    if (a->dims(0) != b->dims(0) || a->dims(1) != 2 * b->dims(2) ||
        a->dims(2) != b->dims(1))
      return "the experts' weights '" + a->name() + "' and '" + b->name() +
             "' are not [E, 2I, H] and [E, H, I]";
    int64_t hidden = a->dims(2);
    block.gateUp = a->name();
    block.down = b->name();
    block.module = moduleOf(g1);
    // Both gathers read the picks flattened to one row per pair.
    for (int g : {g1, g2})
      if (std::string err = flatPairs(g, node(g).input(1), block.picks);
          !err.empty())
        return err;
    if (node(g1).input(1) != node(g2).input(1))
      return "'" + node(g1).name() + "' and '" + node(g2).name() +
             "' gather by different indices";

    // The gate/up GEMM of the tokens repeated k times.
    int mm1 = only(node(g1).output(0), "MatMul", 0);
    if (mm1 < 0)
      return unexpected(
          g1, "the gathered weights read by one MatMul, as its first operand");
    std::string xCol = node(mm1).input(1);
    int unsq = producerOf(xCol, "Unsqueeze");
    if (unsq < 0 || !axesAre(unsq, {-1, 2}))
      return unexpected(mm1, "the tokens as the GEMM's columns "
                             "(Unsqueeze of the last axis)");
    int rep = producerOf(node(unsq).input(0), "Reshape");
    int expand = rep < 0 ? -1 : producerOf(node(rep).input(0), "Expand");
    int unsq0 =
        expand < 0 ? -1 : producerOf(node(expand).input(0), "Unsqueeze");
    if (rep < 0 || expand < 0 || unsq0 < 0 || !axesAre(unsq0, {1}))
      return unexpected(unsq, "the tokens repeated once per pick "
                              "(Reshape(Expand(Unsqueeze(x, 1))))");
    auto repShape = constInts(node(rep).input(1));
    auto expShape = constInts(node(expand).input(1));
    if (!repShape || repShape->size() != 2 || repShape->back() != hidden ||
        !expShape || expShape->size() != 3 || (*expShape)[0] != 1 ||
        (*expShape)[1] != (*k)[0] ||
        ((*expShape)[2] != 1 && (*expShape)[2] != hidden))
      return unexpected(rep, "the tokens repeated " + std::to_string((*k)[0]) +
                                 " times as [-1, " + std::to_string(hidden) +
                                 "] (constant shapes)");
    block.tokens = node(unsq0).input(0);
    int sq1 = only(node(mm1).output(0), "Squeeze");
    if (sq1 < 0 || !axesAre(sq1, {-1, 2}))
      return unexpected(mm1, "its product read by one Squeeze of the last "
                             "axis");

    // SiLU(gate) * up, the halves of the gate/up product.
    int split = only(node(sq1).output(0), "Split");
    if (split < 0 || node(split).output_size() != 2 ||
        !attrIn(split, "axis", 0, {1, -1}) || !equalHalves(split))
      return unexpected(sq1, "one Split into two equal halves on axis "
                             "1 (gate, up)");
    const std::string &gate = node(split).output(0);
    const std::string &up = node(split).output(1);
    int sig = -1, silu = -1;
    for (int c : consumersOf(gate))
      if (node(c).op_type() == "Sigmoid")
        sig = c;
    if (sig < 0)
      return "the experts' activation is not SiLU (x * sigmoid(x)): no "
             "Sigmoid reads '" +
             gate + "'";
    for (int c : consumersOf(gate))
      if (node(c).op_type() == "Mul" && readsBoth(c, gate, node(sig).output(0)))
        silu = c;
    if (silu < 0 || consumersOf(gate).size() != 2 ||
        consumersOf(node(sig).output(0)).size() != 1)
      return unexpected(sig, "SiLU: the gate times its sigmoid, read "
                             "by nothing else");
    int act = only(node(silu).output(0), "Mul");
    if (act < 0 || !readsBoth(act, node(silu).output(0), up) ||
        consumersOf(up).size() != 1)
      return unexpected(silu, "SiLU(gate) times the up half");

    // The down GEMM.
    int unsq2 = only(node(act).output(0), "Unsqueeze");
    if (unsq2 < 0 || !axesAre(unsq2, {-1, 2}))
      return unexpected(act, "the gated product read by one Unsqueeze of "
                             "the last axis");
    int mm2 = only(node(unsq2).output(0), "MatMul", 1);
    if (mm2 < 0 || node(mm2).input(0) != node(g2).output(0) ||
        consumersOf(node(g2).output(0)).size() != 1)
      return unexpected(unsq2, "the down GEMM's columns (the gathered '" +
                                   block.down + "' times them)");
    int sq2 = only(node(mm2).output(0), "Squeeze");
    if (sq2 < 0 || !axesAre(sq2, {-1, 2}))
      return unexpected(mm2, "its product read by one Squeeze of the last "
                             "axis");

    // Each pair's output scaled by its routing weight, summed per token.
    int scale = only(node(sq2).output(0), "Mul");
    if (scale < 0)
      return unexpected(sq2, "the experts' outputs scaled by the "
                             "routing weights (one Mul)");
    const std::string &wCol = node(scale).input(0) == node(sq2).output(0)
                                  ? node(scale).input(1)
                                  : node(scale).input(0);
    int wUnsq = producerOf(wCol, "Unsqueeze");
    if (wUnsq < 0 || !axesAre(wUnsq, {-1, 1}))
      return unexpected(scale, "the routing weights, one per pair "
                               "(Unsqueeze(Reshape(w, [-1]), -1))");
    if (std::string err = flatten(wUnsq, node(wUnsq).input(0), block.weights);
        !err.empty())
      return err;
    int sum3 = only(node(scale).output(0), "Reshape");
    auto sumShape = sum3 < 0 ? std::nullopt : constInts(node(sum3).input(1));
    if (sum3 < 0 || !sumShape || sumShape->size() != 3 ||
        (*sumShape)[1] != (*k)[0] || (*sumShape)[2] != hidden)
      return unexpected(
          scale, "its result reshaped to [-1, " + std::to_string((*k)[0]) +
                     ", " + std::to_string(hidden) + "] (a constant shape)");
    int sink = only(node(sum3).output(0), "ReduceSum");
    if (sink < 0 || !axesAre(sink, {1, -2}) ||
        !attrIn(sink, "keepdims", 1, {0}))
      return unexpected(sum3, "a sum over the picks (ReduceSum, axes 1, "
                              "keepdims 0)");
    block.sink = sink;
    return "";
  }

private:
  using GraphIndex::producerOf;
  /// The producer of `v` if it is an `op` node.
  int producerOf(const std::string &v, llvm::StringRef op) const {
    int p = producerOf(v);
    return p >= 0 && node(p).op_type() == op ? p : -1;
  }
  const std::vector<int> &consumersOf(const std::string &v) const {
    static const std::vector<int> none;
    auto it = consumers.find(v);
    return it == consumers.end() ? none : it->second;
  }
  /// The only reader of `v` if it is an `op` node (reading `v` as its
  /// operand `operand`, when given), else -1.
  int only(const std::string &v, llvm::StringRef op, int operand = -1) const {
    const std::vector<int> &cs = consumersOf(v);
    if (cs.size() != 1 || node(cs[0]).op_type() != op)
      return -1;
    if (operand >= 0 && (node(cs[0]).input_size() <= operand ||
                         node(cs[0]).input(operand) != v))
      return -1;
    return cs[0];
  }
  bool readsBoth(int n, const std::string &a, const std::string &b) const {
    return node(n).input_size() == 2 &&
           ((node(n).input(0) == a && node(n).input(1) == b) ||
            (node(n).input(0) == b && node(n).input(1) == a));
  }
  std::string unexpected(int n, const std::string &want) const {
    return "at node '" + node(n).name() + "' (" + node(n).op_type() +
           "): expected " + want;
  }

  /// `v` = Reshape(src, [-1]) (row-major: pair t k + j); sets `src`.
  std::string flatten(int reader, const std::string &v, std::string &src) {
    int r = producerOf(v, "Reshape");
    auto shape = r < 0 ? std::nullopt : constInts(node(r).input(1));
    if (r < 0 || !shape || shape->size() != 1)
      return unexpected(reader, "one row per (token, pick) pair "
                                "(Reshape to [-1])");
    src = node(r).input(0);
    return "";
  }
  /// The gather `g`'s indices one pair per row: GatherND of
  /// Unsqueeze(Reshape(picks, [-1]), -1), or Gather (axis 0) of
  /// Reshape(picks, [-1]); sets `picks`.
  std::string flatPairs(int g, const std::string &indices, std::string &picks) {
    std::string flat = indices;
    if (node(g).op_type() == "GatherND") {
      if (!attrIn(g, "batch_dims", 0, {0}))
        return unexpected(g, "a GatherND with batch_dims 0");
      int u = producerOf(indices, "Unsqueeze");
      if (u < 0 || !axesAre(u, {-1, 1}))
        return unexpected(g, "a gather of one expert per (token, "
                             "pick) pair");
      flat = node(u).input(0);
    } else if (!attrIn(g, "axis", 0, {0})) {
      return unexpected(g, "a Gather on axis 0");
    }
    return flatten(g, flat, picks);
  }

  /// An int attribute of node n (`dflt` when absent) is one of `allowed`.
  bool attrIn(int n, llvm::StringRef name, int64_t dflt,
              std::initializer_list<int64_t> allowed) const {
    int64_t v = dflt;
    for (const auto &attr : node(n).attribute())
      if (attr.name() == name)
        v = attr.i();
    return llvm::is_contained(allowed, v);
  }
  /// Node n's axes (attribute, or input 1 since opset 13) are one axis,
  /// one of `allowed`.
  bool axesAre(int n, std::initializer_list<int64_t> allowed) const {
    std::optional<std::vector<int64_t>> axes;
    for (const auto &attr : node(n).attribute())
      if (attr.name() == "axes")
        axes = std::vector<int64_t>(attr.ints().begin(), attr.ints().end());
    if (!axes && node(n).input_size() > 1)
      axes = constInts(node(n).input(1));
    return axes && axes->size() == 1 && llvm::is_contained(allowed, (*axes)[0]);
  }
  /// A two-way Split into equal halves (no sizes, or two equal ones).
  bool equalHalves(int n) const {
    std::optional<std::vector<int64_t>> sizes;
    for (const auto &attr : node(n).attribute())
      if (attr.name() == "split")
        sizes = std::vector<int64_t>(attr.ints().begin(), attr.ints().end());
    if (!sizes && node(n).input_size() > 1 && !node(n).input(1).empty()) {
      sizes = constInts(node(n).input(1));
      if (!sizes)
        return false;
    }
    return !sizes || (sizes->size() == 2 && (*sizes)[0] == (*sizes)[1]);
  }

  /// The integers of a constant value (an initializer or a Constant node).
  std::optional<std::vector<int64_t>> constInts(const std::string &v) const {
    const ::onnx::TensorProto *t = nullptr;
    if (auto it = initializers.find(v); it != initializers.end())
      t = it->second;
    else if (int p = producerOf(v, "Constant"); p >= 0)
      for (const auto &attr : node(p).attribute()) {
        if (attr.name() == "value" && attr.has_t())
          t = &attr.t();
        else if (attr.name() == "value_ints")
          return std::vector<int64_t>(attr.ints().begin(), attr.ints().end());
        else if (attr.name() == "value_int")
          return std::vector<int64_t>{attr.i()};
      }
    if (!t || (t->has_data_location() &&
               t->data_location() == ::onnx::TensorProto::EXTERNAL))
      return std::nullopt;
    std::vector<int64_t> out;
    if (t->data_type() == ::onnx::TensorProto::INT64) {
      if (t->has_raw_data()) {
        const std::string &raw = t->raw_data();
        out.resize(raw.size() / 8);
        std::memcpy(out.data(), raw.data(), out.size() * 8);
      } else {
        out.assign(t->int64_data().begin(), t->int64_data().end());
      }
    } else if (t->data_type() == ::onnx::TensorProto::INT32) {
      if (t->has_raw_data()) {
        const std::string &raw = t->raw_data();
        std::vector<int32_t> v32(raw.size() / 4);
        std::memcpy(v32.data(), raw.data(), v32.size() * 4);
        out.assign(v32.begin(), v32.end());
      } else {
        out.assign(t->int32_data().begin(), t->int32_data().end());
      }
    } else {
      return std::nullopt;
    }
    return out;
  }

  /// The experts' module as the dynamo exporter records it
  /// (`pkg.torch.onnx.name_scopes` of the gather), or "".
  std::string moduleOf(int n) const {
    for (const auto &prop : node(n).metadata_props()) {
      if (prop.key() != "pkg.torch.onnx.name_scopes")
        continue;
      // "['', 'inner', ..., 'inner.model.layers.0.mlp.experts', 'index_2']"
      llvm::SmallVector<llvm::StringRef> scopes;
      llvm::StringRef(prop.value()).split(scopes, ", ");
      if (scopes.size() < 2)
        return "";
      return scopes[scopes.size() - 2].trim("[]' ").str();
    }
    return "";
  }
};

/// Drops the nodes whose outputs nothing reads (what only the removed loop
/// read: the routing weights' reshapes, shape arithmetic).
void removeDeadNodes(GraphProto &graph) {
  llvm::StringSet<> outputs;
  for (const auto &o : graph.output())
    outputs.insert(o.name());
  for (bool changed = true; changed;) {
    changed = false;
    llvm::StringSet<> read;
    for (const NodeProto &n : graph.node())
      for (const std::string &in : n.input())
        read.insert(in);
    google::protobuf::RepeatedPtrField<NodeProto> kept;
    for (const NodeProto &n : graph.node()) {
      bool live = false;
      for (const std::string &out : n.output())
        live |= read.contains(out) || outputs.contains(out);
      if (live)
        *kept.Add() = n;
      else
        changed = true;
    }
    graph.mutable_node()->Swap(&kept);
  }
}

} // namespace

void lamina::onnx::registerMoEOps(OpRegistry &r) {
  r.add("TopK", importTopK);
  r.add((kLaminaDomain + "." + kMoEExperts).str(), importMoEExperts);
}

std::string
lamina::onnx::recognizeEagerExperts(GraphProto &graph,
                                    std::vector<std::string> &notes) {
  for (;;) {
    // The first one-hot of a router's picks; other one-hots are no
    // concern here (the importer refuses OneHot itself).
    Matcher m(graph);
    int oneHot = -1;
    for (int i = 0; i < graph.node_size() && oneHot < 0; ++i)
      if (m.isRoutingOneHot(i))
        oneHot = i;
    if (oneHot < 0)
      return "";
    ExpertsBlock block;
    std::string name = graph.node(oneHot).name();
    if (std::string err = m.match(oneHot, block); !err.empty())
      return "the mixture-of-experts block at node '" + name +
             "' is not one Lamina recognises: " + err;
    NodeProto moe;
    moe.set_op_type(kMoEExperts.str());
    moe.set_domain(kLaminaDomain.str());
    moe.set_name(name + "/experts");
    for (const std::string &in :
         {block.tokens, block.picks, block.weights, block.gateUp, block.down})
      moe.add_input(in);
    moe.add_output(m.node(block.sink).output(0));
    notes.push_back(
        "mixture-of-experts block at '" + name + "' (experts '" + block.gateUp +
        "', '" + block.down + "'): the export unrolled its " +
        "loop over the " + std::to_string(block.expertsHit) +
        " experts the tracing batch hit (onnxruntime fails on a batch that " +
        "hits fewer); Lamina computes every expert over the tokens that " +
        "pick it");
    // Rebuild the node list: the block's nodes out, MoEExperts where the
    // sink was.
    llvm::DenseSet<int> drop(block.nodes.begin(), block.nodes.end());
    google::protobuf::RepeatedPtrField<NodeProto> kept;
    for (int i = 0; i < graph.node_size(); ++i) {
      if (i == block.sink)
        *kept.Add() = moe;
      else if (!drop.contains(i))
        *kept.Add() = graph.node(i);
    }
    graph.mutable_node()->Swap(&kept);
    removeDeadNodes(graph);
  }
}

std::string
lamina::onnx::recognizeBatchedExperts(GraphProto &graph,
                                      std::vector<std::string> &notes) {
  for (;;) {
    // The first router (TopK) whose picks gather experts' weights.
    BatchedMatcher m(graph);
    int topk = -1;
    std::vector<int> gathers;
    for (int i = 0; i < graph.node_size() && topk < 0; ++i)
      if (graph.node(i).op_type() == "TopK")
        if (gathers = m.expertGathers(i); !gathers.empty())
          topk = i;
    if (topk < 0)
      return "";
    BatchedBlock block;
    std::string name = graph.node(gathers[0]).name();
    if (std::string err = m.match(topk, gathers, block); !err.empty())
      return "the mixture-of-experts block at node '" + name +
             "' is not one Lamina recognises: " + err;
    name = graph.node(block.sink).name();
    NodeProto moe;
    moe.set_op_type(kMoEExperts.str());
    moe.set_domain(kLaminaDomain.str());
    // The sink's own name, which it no longer needs: a suffix after
    // dynamo's `node_sum_2` would read as a numbered container to module
    // discovery (`node_sum` 2, 4, ... one per layer) and place the layer
    // by it rather than by its module scope.
    moe.set_name(name);
    for (const std::string &in :
         {block.tokens, block.picks, block.weights, block.gateUp, block.down})
      moe.add_input(in);
    moe.add_output(graph.node(block.sink).output(0));
    // The sink's module scope (pkg.torch.onnx.name_scopes): module
    // discovery places the layer by it (pipeline stages, docs/modules.md).
    *moe.mutable_metadata_props() = graph.node(block.sink).metadata_props();
    notes.push_back(
        "mixture-of-experts block at '" + name + "' (" +
        (block.module.empty() ? "" : "module '" + block.module + "', ") +
        "experts '" + block.gateUp + "', '" + block.down +
        "'): the export gathers every token's experts' weights (batched_mm); "
        "Lamina computes every expert over the tokens that pick it");
    google::protobuf::RepeatedPtrField<NodeProto> kept;
    for (int i = 0; i < graph.node_size(); ++i)
      *kept.Add() = i == block.sink ? moe : graph.node(i);
    graph.mutable_node()->Swap(&kept);
    removeDeadNodes(graph);
  }
}

void lamina::onnx::noteRoutingHistograms(const GraphProto &graph,
                                         std::vector<std::string> &notes) {
  GraphIndex index(graph);
  for (const NodeProto &n : graph.node()) {
    if (n.op_type() != "ScatterElements" || n.input_size() < 3)
      continue;
    bool accumulates = false;
    for (const auto &a : n.attribute())
      if (a.name() == "reduction" && a.s() != "none")
        accumulates = true;
    if (accumulates)
      continue;
    // The indices, through layout ops, a TopK's picks?
    std::string picks = index.throughLayout(n.input(1));
    int at = index.producerOf(picks);
    const NodeProto *topk = nullptr;
    if (at >= 0 && graph.node(at).op_type() == "TopK" &&
        graph.node(at).output_size() > 1 && graph.node(at).output(1) == picks)
      topk = &graph.node(at);
    if (!topk)
      continue;
    // Unnamed nodes (hand-written files) by their first output.
    auto label = [](const NodeProto &x) {
      return x.name().empty() ? "of output '" + x.output(0) + "'"
                              : "'" + x.name() + "'";
    };
    notes.push_back(
        "node " + label(n) + " (ScatterElements without a reduction) " +
        "writes at the picks of TopK " + label(*topk) +
        ", which repeat: later writes replace earlier ones, so it marks "
        "the experts a batch hit instead of counting their tokens (how "
        "TorchScript exports torch.histc in the routers' load-balancing "
        "loss). Lamina computes what the file says, so this loss term "
        "differs from PyTorch's; --loss causal-lm --logits NAME "
        "--moe-aux-loss COEF trains with the loss PyTorch computes");
  }
}
