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
// expert over whichever tokens pick it. docs/moe-design.md.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>

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
  auto op = graph::TopKOp::create(
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
      ctx.build<graph::MoEOp>(tokens, in[0], in[1], in[2], in[3], in[4]));
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

class Matcher {
public:
  explicit Matcher(GraphProto &graph) : graph(graph) {
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

private:
public:
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

  GraphProto &graph;
  llvm::StringMap<int> producer;
  llvm::StringMap<std::vector<int>> consumers;
  llvm::StringMap<const ::onnx::TensorProto *> initializers;
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
