//===- Importer.cpp - ONNX model to graph dialect -------------------------===//
//
// The walk: check the model's header, bind the graph inputs' symbolic dims,
// find every unsupported op up front (so one run reports all of them), then
// import nodes in topological order. Model-local functions are inlined at
// their call sites (nested calls too) and `If` with a constant condition is
// replaced by its taken branch; both simply import another node list in a
// new scope. Initializers become function arguments on first use.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <queue>

using namespace mlir;
using namespace lamina;
using namespace lamina::onnx;
using ::onnx::AttributeProto;
using ::onnx::FunctionProto;
using ::onnx::GraphProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

namespace {
// Opsets 24-28 (onnx 1.19-1.23) change the supported ops only by element
// types the importer refuses (float8e8m0, int2/uint2, float6: Cast, CastLike,
// Constant, ConstantOfShape, Flatten, Identity, Reshape, Shape, Size,
// Squeeze, Transpose, Unsqueeze), by Cast's round_mode (float8e8m0 only), by
// dropping integer types (ReduceLogSum, ReduceLogSumExp at 28), and by
// Range's float16/bfloat16 with stash_type (27), which importRange handles.
// scripts/opset-changes.py lists what the next opset changes.
constexpr int64_t kMinOpset = 11, kMaxOpset = 28;
// IR 12-14 (onnx 1.19-1.23) add only element types (FLOAT8E8M0, INT2/UINT2,
// FLOAT6), which elementTypeOf refuses by name.
constexpr int64_t kMinIR = 3, kMaxIR = 14;
/// Non-float initializers up to this size become graph.constant ops (they
/// are masks, position ids and shape data the folds need to see).
constexpr uint64_t kMaxConstantBytes = 1 << 20;
/// Nesting of function calls and If branches before the importer gives up.
constexpr int kMaxDepth = 64;

bool isDefaultDomain(StringRef domain) {
  return domain.empty() || domain == "ai.onnx";
}

/// Names a value is bound to while importing one node list.
struct Scope {
  Scope *parent = nullptr; // If branches see the enclosing scope
  llvm::StringMap<Slot> slots;
  Slot *lookup(StringRef name) {
    for (Scope *s = this; s; s = s->parent) {
      auto it = s->slots.find(name);
      if (it != s->slots.end())
        return &it->second;
    }
    return nullptr;
  }
};

/// How the nodes of one body are read: opsets, the attributes of the call
/// that is being inlined, and the prefix that keeps node names unique.
struct BodyContext {
  llvm::StringMap<int64_t> opsets;
  SmallVector<NodeContext::Attr> callerAttrs;
  std::string prefix;
  int depth = 0;
};

struct Argument {
  std::string name;
  StringRef kind;
  Value value;
};
} // namespace

namespace lamina::onnx {
class ModelImporter {
public:
  ModelImporter(MLIRContext *ctx, const ::onnx::ModelProto &model,
                TensorReader &reader, const ImportOptions &options,
                StringRef displayName)
      : ctx(ctx), builder(ctx), reader(reader), model(model),
        options(options), displayName(displayName) {}

  OwningOpRef<ModuleOp> run();
  /// Makes `v`, if it is a trainable initializer's argument, a constant.
  void keepConstant(Value v) {
    for (Argument &a : arguments)
      if (a.value == v && a.kind == ir::graph::kKindTrainable)
        a.kind = ir::graph::kKindConstant;
  }

  MLIRContext *ctx;
  OpBuilder builder;
  TensorReader &reader;

private:
  LogicalResult checkHeader();
  LogicalResult bindInputs(Scope &scope);
  LogicalResult findUnsupported();
  void scanUnsupported(const google::protobuf::RepeatedPtrField<NodeProto> &nodes,
                       const llvm::StringMap<int64_t> &opsets, StringRef where,
                       llvm::StringSet<> &seenFunctions, bool &failed);
  FailureOr<SmallVector<const NodeProto *>>
  sortNodes(const google::protobuf::RepeatedPtrField<NodeProto> &nodes,
            StringRef where);
  const llvm::StringSet<> &freeNames(const GraphProto &graph);
  LogicalResult importNodes(const google::protobuf::RepeatedPtrField<NodeProto> &nodes,
                            Scope &scope, BodyContext &body, StringRef where);
  LogicalResult importNode(const NodeProto &node, Scope &scope,
                           BodyContext &body, StringRef name);
  LogicalResult importIf(NodeContext &ctx, Scope &scope, BodyContext &body);
  LogicalResult inlineFunction(NodeContext &ctx, const FunctionProto &fn,
                               BodyContext &body);
  Slot *lookupValue(Scope &scope, StringRef name);
  LogicalResult bindGraphInitializers(const GraphProto &graph, Scope &scope);
  Value materializeInitializer(const TensorProto &tensor);
  const FunctionProto *findFunction(const NodeProto &node) const;
  Location nodeLoc(StringRef name) {
    return NameLoc::get(StringAttr::get(ctx, name));
  }

  const ::onnx::ModelProto &model;
  const ImportOptions &options;
  std::string displayName;
  llvm::StringMap<int64_t> modelOpsets;
  llvm::StringMap<const FunctionProto *> functions;
  llvm::StringMap<const TensorProto *> initializers;
  llvm::DenseMap<const GraphProto *, llvm::StringSet<>> freeNameCache;
  llvm::SmallPtrSet<const FunctionProto *, 8> activeFunctions;
  Block *body = nullptr;
  SmallVector<Argument> arguments;
  llvm::StringMap<Value> materialized; // initializer name -> value
  std::deque<std::string> names;       // storage for node names in locations
};

OpBuilder &builderOf(ModelImporter &importer) { return importer.builder; }
TensorReader &tensorReaderOf(ModelImporter &importer) { return importer.reader; }
void keepConstant(ModelImporter &importer, Value v) { importer.keepConstant(v); }
} // namespace lamina::onnx

static std::string functionKey(StringRef domain, StringRef name,
                               StringRef overload) {
  return (domain + "\x1f" + name + "\x1f" + overload).str();
}

const FunctionProto *ModelImporter::findFunction(const NodeProto &node) const {
  auto it = functions.find(functionKey(node.domain(), node.op_type(),
                                       node.overload()));
  return it == functions.end() ? nullptr : it->second;
}

LogicalResult ModelImporter::checkHeader() {
  Location loc = FileLineColLoc::get(ctx, displayName, 0, 0);
  if (model.ir_version() < kMinIR || model.ir_version() > kMaxIR)
    return emitError(loc) << "ONNX IR version " << model.ir_version()
                          << " is not supported (supported: " << kMinIR << "-"
                          << kMaxIR << ")";
  for (const auto &op : model.opset_import())
    modelOpsets[isDefaultDomain(op.domain()) ? "" : op.domain()] = op.version();
  auto it = modelOpsets.find("");
  if (it == modelOpsets.end())
    return emitError(loc) << "model imports no default-domain opset";
  if (it->second < kMinOpset || it->second > kMaxOpset)
    return emitError(loc) << "default-domain opset " << it->second
                          << " is not supported (supported: " << kMinOpset
                          << "-" << kMaxOpset << ")";
  if (!model.has_graph())
    return emitError(loc) << "model has no graph";
  if (model.graph().output_size() == 0)
    return emitError(loc) << "graph has no outputs";
  for (const FunctionProto &fn : model.functions())
    functions[functionKey(fn.domain(), fn.name(), fn.overload())] = &fn;
  return success();
}

LogicalResult ModelImporter::bindInputs(Scope &scope) {
  const GraphProto &graph = model.graph();
  llvm::SetVector<StringRef> unbound;
  llvm::StringSet<> usedDims;
  bool failed = false;
  Location loc = FileLineColLoc::get(ctx, displayName, 0, 0);
  for (const auto &input : graph.input()) {
    if (initializers.count(input.name()))
      continue; // IR < 4 lists initializers as inputs with defaults
    const auto &type = input.type();
    if (!type.has_tensor_type()) {
      emitError(loc) << "input '" << input.name() << "' is not a tensor";
      failed = true;
      continue;
    }
    Type elementType = elementTypeOf(ctx, type.tensor_type().elem_type());
    if (!elementType) {
      emitError(loc) << "input '" << input.name() << "' has unsupported type "
                     << dataTypeName(type.tensor_type().elem_type());
      failed = true;
      continue;
    }
    if (!type.tensor_type().has_shape()) {
      emitError(loc) << "input '" << input.name()
                     << "' has no shape (its rank must be known)";
      failed = true;
      continue;
    }
    SmallVector<int64_t> shape;
    bool inputOk = true;
    for (const auto &dim : type.tensor_type().shape().dim()) {
      if (dim.has_dim_value()) {
        shape.push_back(dim.dim_value());
      } else if (dim.has_dim_param() && !dim.dim_param().empty()) {
        usedDims.insert(dim.dim_param());
        auto bound = options.dims.find(dim.dim_param());
        if (bound == options.dims.end()) {
          unbound.insert(dim.dim_param());
          inputOk = false;
        } else {
          shape.push_back(bound->second);
        }
      } else {
        emitError(loc) << "input '" << input.name() << "' dimension "
                       << shape.size() << " has neither a size nor a name";
        failed = true;
        inputOk = false;
        break;
      }
    }
    if (!inputOk)
      continue;
    if (checkedNumElements(shape) < 0) {
      emitError(loc) << "input '" << input.name()
                     << "' has a negative or oversized dimension";
      failed = true;
      continue;
    }
    Value arg = body->addArgument(RankedTensorType::get(shape, elementType),
                                  nodeLoc(input.name()));
    arguments.push_back({input.name(), ir::graph::kKindInput, arg});
    scope.slots[input.name()].tensor = arg;
  }
  if (!unbound.empty()) {
    auto diag = emitError(loc) << "unbound symbolic dims: ";
    llvm::interleaveComma(unbound, diag);
    diag << " (bind each with --dim NAME=VALUE)";
    failed = true;
  }
  for (const auto &entry : options.dims)
    if (!usedDims.count(entry.first))
      emitWarning(loc) << "--dim " << entry.first
                       << " names no symbolic dim of the model's inputs";
  return failure(failed);
}

void ModelImporter::scanUnsupported(
    const google::protobuf::RepeatedPtrField<NodeProto> &nodes,
    const llvm::StringMap<int64_t> &opsets, StringRef where,
    llvm::StringSet<> &seenFunctions, bool &failed) {
  const OpRegistry &registry = OpRegistry::get();
  for (const NodeProto &node : nodes) {
    for (const AttributeProto &a : node.attribute()) {
      if (a.has_g())
        scanUnsupported(a.g().node(), opsets, where, seenFunctions, failed);
      for (const GraphProto &g : a.graphs())
        scanUnsupported(g.node(), opsets, where, seenFunctions, failed);
    }
    if (const FunctionProto *fn = findFunction(node)) {
      if (!seenFunctions.insert(fn->name() + "@" + fn->domain()).second)
        continue;
      llvm::StringMap<int64_t> fnOpsets = opsets;
      for (const auto &op : fn->opset_import())
        fnOpsets[isDefaultDomain(op.domain()) ? "" : op.domain()] = op.version();
      int64_t fnOpset = fnOpsets.lookup("");
      if (fnOpset < kMinOpset || fnOpset > kMaxOpset) {
        emitError(nodeLoc(fn->name()))
            << "function '" << fn->name() << "' imports default-domain opset "
            << fnOpset << ", which is not supported (supported: " << kMinOpset
            << "-" << kMaxOpset << ")";
        failed = true;
        continue;
      }
      scanUnsupported(fn->node(), fnOpsets,
                      "function '" + fn->name() + "'", seenFunctions,
                      failed);
      continue;
    }
    bool known =
        isDefaultDomain(node.domain())
            ? (node.op_type() == "If" || registry.lookup(node.op_type()))
            : node.domain() == kLaminaDomain &&
                  registry.lookup(node.domain() + "." + node.op_type());
    if (known)
      continue;
    StringRef domain = isDefaultDomain(node.domain()) ? "ai.onnx" : StringRef(node.domain());
    auto it = opsets.find(isDefaultDomain(node.domain()) ? "" : node.domain());
    int64_t version = it == opsets.end() ? 0 : it->second;
    std::string name = node.name().empty() ? "<unnamed " + node.op_type() + ">"
                                           : node.name();
    auto diag = emitError(nodeLoc(name))
                << "unsupported ONNX op '" << node.op_type() << "' (domain "
                << domain << ", opset " << version << ") at node '" << name
                << "'";
    if (!where.empty())
      diag << " in " << where;
    failed = true;
  }
}

LogicalResult ModelImporter::findUnsupported() {
  bool failed = false;
  llvm::StringSet<> seen;
  scanUnsupported(model.graph().node(), modelOpsets, "", seen, failed);
  return failure(failed);
}

const llvm::StringSet<> &ModelImporter::freeNames(const GraphProto &graph) {
  auto it = freeNameCache.find(&graph);
  if (it != freeNameCache.end())
    return it->second;
  llvm::StringSet<> defined, free;
  for (const auto &v : graph.input())
    defined.insert(v.name());
  for (const auto &t : graph.initializer())
    defined.insert(t.name());
  for (const NodeProto &node : graph.node())
    for (const auto &out : node.output())
      defined.insert(out);
  for (const NodeProto &node : graph.node()) {
    for (const auto &in : node.input())
      if (!in.empty() && !defined.count(in))
        free.insert(in);
    for (const AttributeProto &a : node.attribute()) {
      auto addSub = [&](const GraphProto &g) {
        for (const auto &entry : freeNames(g))
          if (!defined.count(entry.getKey()))
            free.insert(entry.getKey());
      };
      if (a.has_g())
        addSub(a.g());
      for (const GraphProto &g : a.graphs())
        addSub(g);
    }
  }
  for (const auto &out : graph.output())
    if (!defined.count(out.name()))
      free.insert(out.name());
  return freeNameCache[&graph] = std::move(free);
}

FailureOr<SmallVector<const NodeProto *>> ModelImporter::sortNodes(
    const google::protobuf::RepeatedPtrField<NodeProto> &nodes,
    StringRef where) {
  // Kahn's algorithm, taking the lowest-index ready node first so that
  // graphs already in order keep their order.
  size_t n = nodes.size();
  llvm::StringMap<size_t> producer;
  // Old exporters (PyTorch 1.6) repeat Constant output names. onnxruntime
  // takes the last definition for every reader, so the importer does too:
  // an earlier Constant whose output is defined again is dropped, with a
  // warning. Any other node producing a name twice is an error.
  std::vector<bool> dropped(n, false);
  SmallVector<std::string> redefined;
  auto isConstant = [](const NodeProto &node) {
    return node.op_type() == "Constant" && isDefaultDomain(node.domain()) &&
           node.output_size() == 1;
  };
  for (size_t i = 0; i < n; ++i)
    for (const auto &out : nodes[i].output()) {
      if (out.empty())
        continue;
      auto [it, fresh] = producer.try_emplace(out, i);
      if (fresh)
        continue;
      if (isConstant(nodes[i]) && isConstant(nodes[it->second])) {
        dropped[it->second] = true;
        it->second = i;
        redefined.push_back(out);
        continue;
      }
      std::string name = nodes[i].name();
      return emitError(nodeLoc(name))
             << "value '" << out << "' is produced twice (second time by "
             << "node '" << name << "'" << (where.empty() ? "" : " in ")
             << where << "); only repeated Constant outputs are accepted "
             << "(the last one wins, as in onnxruntime)";
    }
  if (!redefined.empty()) {
    auto diag = emitWarning(FileLineColLoc::get(ctx, displayName, 0, 0))
                << redefined.size() << " value"
                << (redefined.size() == 1 ? " is" : "s are")
                << " defined by more than one Constant node"
                << (where.empty() ? "" : " in ") << where
                << "; the last definition wins for every reader, as in "
                   "onnxruntime: ";
    size_t shown = std::min<size_t>(redefined.size(), 8);
    for (size_t k = 0; k < shown; ++k)
      diag << (k ? ", '" : "'") << redefined[k] << "'";
    if (shown < redefined.size())
      diag << ", ... " << redefined.size() - shown << " more";
  }
  std::vector<SmallVector<size_t>> users(n);
  std::vector<size_t> pending(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (dropped[i])
      continue;
    llvm::SmallSetVector<size_t, 8> deps;
    auto addDep = [&](StringRef name) {
      auto it = producer.find(name);
      if (it != producer.end())
        deps.insert(it->second);
    };
    for (const auto &in : nodes[i].input())
      addDep(in);
    for (const AttributeProto &a : nodes[i].attribute()) {
      if (a.has_g())
        for (const auto &e : freeNames(a.g()))
          addDep(e.getKey());
      for (const GraphProto &g : a.graphs())
        for (const auto &e : freeNames(g))
          addDep(e.getKey());
    }
    for (size_t d : deps) {
      users[d].push_back(i);
      ++pending[i];
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    kept += !dropped[i];
    if (!pending[i] && !dropped[i])
      ready.push(i);
  }
  SmallVector<const NodeProto *> order;
  order.reserve(kept);
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(&nodes[i]);
    for (size_t u : users[i])
      if (--pending[u] == 0)
        ready.push(u);
  }
  if (order.size() != kept) {
    auto diag = emitError(FileLineColLoc::get(ctx, displayName, 0, 0))
                << "the graph" << (where.empty() ? "" : " of ") << where
                << " has a cycle through nodes: ";
    SmallVector<std::string> stuck;
    for (size_t i = 0; i < n; ++i)
      if (pending[i])
        stuck.push_back("'" + nodes[i].name() + "'");
    llvm::interleaveComma(stuck, diag);
    return failure();
  }
  return order;
}

Value ModelImporter::materializeInitializer(const TensorProto &tensor) {
  auto it = materialized.find(tensor.name());
  if (it != materialized.end())
    return it->second;
  Location loc = nodeLoc(tensor.name());
  RankedTensorType type;
  if (std::string err = reader.validate(ctx, tensor, type); !err.empty()) {
    emitError(loc) << "initializer '" << tensor.name() << "': " << err;
    return {};
  }
  // Weights (float tensors of more than one element) become trainable
  // arguments and are never read here; everything else is small data the
  // folds want to see, unless it is big.
  bool isFloat = isa<FloatType>(type.getElementType());
  uint64_t bytes = type.getNumElements() *
                   std::max<unsigned>(1, type.getElementTypeBitWidth() / 8);
  Value value;
  if ((isFloat && type.getNumElements() > 1) || bytes > kMaxConstantBytes) {
    value = body->addArgument(type, loc);
    arguments.push_back(
        {tensor.name(),
         isFloat ? ir::graph::kKindTrainable : ir::graph::kKindConstant,
         value});
  } else {
    DenseElementsAttr attr;
    if (std::string err = reader.read(tensor, type, attr); !err.empty()) {
      emitError(loc) << "initializer '" << tensor.name() << "': " << err;
      return {};
    }
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(body);
    value = ir::graph::ConstantOp::create(builder, loc, attr);
  }
  materialized[tensor.name()] = value;
  return value;
}

Slot *ModelImporter::lookupValue(Scope &scope, StringRef name) {
  Slot *slot = scope.lookup(name);
  if (!slot || slot->tensor || slot->isSequence)
    return slot;
  // A slot without a value is an initializer not yet used.
  auto it = initializers.find(name);
  if (it == initializers.end())
    return nullptr;
  Value v = materializeInitializer(*it->second);
  if (!v)
    return nullptr;
  slot->tensor = v;
  return slot;
}

LogicalResult ModelImporter::importNodes(
    const google::protobuf::RepeatedPtrField<NodeProto> &nodes, Scope &scope,
    BodyContext &bodyCtx, StringRef where) {
  auto order = sortNodes(nodes, where);
  if (failed(order))
    return failure();
  for (const NodeProto *node : *order) {
    std::string name = node->name().empty()
                           ? node->op_type() + "_" + std::to_string(names.size())
                           : node->name();
    names.push_back(bodyCtx.prefix + name);
    if (failed(importNode(*node, scope, bodyCtx, names.back())))
      return failure();
  }
  return success();
}

/// The module scope torch's dynamo exporter records in a node's metadata
/// (`pkg.torch.onnx.name_scopes = "['', 'model', 'model.layers.3', 'add']"`)
/// as `model.layers.3/add`, or "" when the node has none. Module discovery
/// (docs/modules.md) reads it from the location's child.
static std::string metadataScope(const NodeProto &node) {
  for (const auto &prop : node.metadata_props()) {
    if (prop.key() != "pkg.torch.onnx.name_scopes")
      continue;
    SmallVector<StringRef> parts;
    StringRef(prop.value()).trim("[] ").split(parts, ',');
    for (StringRef &part : parts)
      part = part.trim(" '\"");
    if (parts.size() < 2 || parts[parts.size() - 2].empty())
      return "";
    return (parts[parts.size() - 2] + "/" + parts.back()).str();
  }
  return "";
}

LogicalResult ModelImporter::importNode(const NodeProto &node, Scope &scope,
                                        BodyContext &bodyCtx, StringRef name) {
  Location loc = nodeLoc(name);
  if (std::string moduleScope = metadataScope(node); !moduleScope.empty())
    loc = NameLoc::get(StringAttr::get(ctx, name),
                       NameLoc::get(StringAttr::get(ctx, moduleScope)));
  // Attributes: a reference (`ref_attr_name`) inside a function body takes
  // the calling node's attribute; an unset reference is dropped.
  SmallVector<NodeContext::Attr> attrs;
  for (const AttributeProto &a : node.attribute()) {
    if (a.ref_attr_name().empty()) {
      attrs.push_back({a.name(), &a});
      continue;
    }
    for (auto [callerName, callerAttr] : bodyCtx.callerAttrs)
      if (callerName == a.ref_attr_name())
        attrs.push_back({a.name(), callerAttr});
  }
  SmallVector<Slot *> inputs;
  for (const auto &in : node.input()) {
    if (in.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    Slot *slot = lookupValue(scope, in);
    if (!slot) {
      // A visible name whose initializer failed to load: its error is out.
      if (scope.lookup(in))
        return failure();
      return emitError(loc) << "node '" << name << "' (" << node.op_type()
                            << ") reads undefined value '" << in << "'";
    }
    inputs.push_back(slot);
  }
  StringRef domain = isDefaultDomain(node.domain()) ? "" : StringRef(node.domain());
  auto opsetIt = bodyCtx.opsets.find(domain);
  int64_t opset = opsetIt == bodyCtx.opsets.end() ? 0 : opsetIt->second;
  NodeContext ctx(*this, node, attrs, inputs, opset, loc, name);

  LogicalResult result = failure();
  if (const FunctionProto *fn = findFunction(node)) {
    result = inlineFunction(ctx, *fn, bodyCtx);
  } else if (domain.empty() && node.op_type() == "If") {
    result = importIf(ctx, scope, bodyCtx);
  } else if (OpHandler handler = OpRegistry::get().lookup(node.op_type());
             handler && domain.empty()) {
    result = handler(ctx);
  } else if (OpHandler own = OpRegistry::get().lookup(
                 (kLaminaDomain + "." + node.op_type()).str());
             own && domain == kLaminaDomain) {
    result = own(ctx);
  } else {
    return emitError(loc) << "unsupported ONNX op '" << node.op_type()
                          << "' at node '" << name << "'";
  }
  if (failed(result))
    return failure();
  for (int i = 0; i < node.output_size(); ++i) {
    if (node.output(i).empty())
      continue;
    if (!ctx.produced[i]) {
      // Optional outputs nobody reads may stay unset only if unused later;
      // record nothing so a later read reports an undefined value.
      continue;
    }
    scope.slots[node.output(i)] = std::move(ctx.outputs[i]);
  }
  return success();
}

LogicalResult ModelImporter::inlineFunction(NodeContext &ctx,
                                            const FunctionProto &fn,
                                            BodyContext &outer) {
  if (outer.depth >= kMaxDepth)
    return ctx.error() << "function calls nest deeper than " << kMaxDepth;
  if (!activeFunctions.insert(&fn).second)
    return ctx.error() << "function '" << fn.name() << "' calls itself";
  llvm::scope_exit done([&] { activeFunctions.erase(&fn); });

  BodyContext inner;
  inner.opsets = modelOpsets;
  for (const auto &op : fn.opset_import())
    inner.opsets[isDefaultDomain(op.domain()) ? "" : op.domain()] = op.version();
  inner.prefix = ctx.name.str() + "/";
  inner.depth = outer.depth + 1;
  // The call's attributes, then defaults declared by the function.
  for (const AttributeProto &a : ctx.node.attribute())
    inner.callerAttrs.push_back({a.name(), ctx.attr(a.name())});
  for (const AttributeProto &a : fn.attribute_proto())
    if (!ctx.attr(a.name()))
      inner.callerAttrs.push_back({a.name(), &a});

  Scope scope;
  for (int i = 0; i < fn.input_size(); ++i)
    if (const Slot *s = ctx.slot(i))
      scope.slots[fn.input(i)] = *s;
  if (failed(importNodes(fn.node(), scope, inner,
                         "function '" + fn.name() + "'")))
    return failure();
  for (int i = 0; i < fn.output_size() && i < ctx.node.output_size(); ++i) {
    if (!ctx.wantsOutput(i))
      continue;
    Slot *s = scope.lookup(fn.output(i));
    if (!s)
      return ctx.error() << "function '" << fn.name() << "' does not produce "
                         << "its output '" << fn.output(i) << "'";
    ctx.outputs[i] = *s;
    ctx.produced[i] = true;
  }
  return success();
}

LogicalResult ModelImporter::bindGraphInitializers(const GraphProto &graph,
                                                   Scope &scope) {
  for (const TensorProto &t : graph.initializer()) {
    RankedTensorType type;
    Location loc = nodeLoc(t.name());
    if (std::string err = reader.validate(ctx, t, type); !err.empty())
      return emitError(loc) << "initializer '" << t.name() << "': " << err;
    DenseElementsAttr attr;
    if (std::string err = reader.read(t, type, attr); !err.empty())
      return emitError(loc) << "initializer '" << t.name() << "': " << err;
    scope.slots[t.name()].tensor =
        ir::graph::ConstantOp::create(builder, loc, attr);
  }
  return success();
}

LogicalResult ModelImporter::importIf(NodeContext &ctx, Scope &scope,
                                      BodyContext &bodyCtx) {
  DenseElementsAttr cond = ctx.constant(0);
  if (!cond || cond.getNumElements() != 1)
    return ctx.error() << "only an If whose condition is a compile-time "
                          "constant is supported";
  bool taken = cond.getValues<APInt>()[0].getBoolValue();
  const AttributeProto *branchAttr = ctx.attr(taken ? "then_branch" : "else_branch");
  if (!branchAttr || !branchAttr->has_g())
    return ctx.error() << "missing branch graph";
  if (bodyCtx.depth >= kMaxDepth)
    return ctx.error() << "subgraphs nest deeper than " << kMaxDepth;
  const GraphProto &branch = branchAttr->g();
  BodyContext inner = bodyCtx;
  inner.prefix = ctx.name.str() + (taken ? "/then/" : "/else/");
  inner.depth = bodyCtx.depth + 1;
  Scope child;
  child.parent = &scope;
  if (failed(bindGraphInitializers(branch, child)) ||
      failed(importNodes(branch.node(), child, inner,
                         ("branch of If '" + ctx.name + "'").str())))
    return failure();
  if (branch.output_size() != ctx.node.output_size())
    return ctx.error() << "branch has " << branch.output_size()
                       << " outputs, the node " << ctx.node.output_size();
  for (int i = 0; i < branch.output_size(); ++i) {
    Slot *s = lookupValue(child, branch.output(i).name());
    if (!s)
      return ctx.error() << "branch output '" << branch.output(i).name()
                         << "' is undefined";
    ctx.outputs[i] = *s;
    ctx.produced[i] = true;
  }
  return success();
}

OwningOpRef<ModuleOp> ModelImporter::run() {
  if (failed(checkHeader()))
    return {};
  const GraphProto &graph = model.graph();
  Location fileLoc = FileLineColLoc::get(ctx, displayName, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  // Build into a scratch block; arguments are added as values are first used
  // and reordered (parameters first) when the function is created.
  auto scratch = std::make_unique<Block>();
  body = scratch.get();
  builder.setInsertionPointToEnd(body);

  Scope scope;
  for (const TensorProto &t : graph.initializer()) {
    if (!initializers.try_emplace(t.name(), &t).second)
      return emitError(nodeLoc(t.name()))
                 << "initializer '" << t.name() << "' is defined twice",
             nullptr;
    scope.slots[t.name()]; // bound lazily by lookupValue
  }
  bool inputsOk = succeeded(bindInputs(scope));
  bool opsOk = succeeded(findUnsupported());
  if (!inputsOk || !opsOk)
    return {};

  BodyContext bodyCtx;
  bodyCtx.opsets = modelOpsets;
  if (failed(importNodes(graph.node(), scope, bodyCtx, "")))
    return {};

  SmallVector<Value> results;
  SmallVector<Attribute> outputNames;
  for (const auto &out : graph.output()) {
    Slot *slot = lookupValue(scope, out.name());
    if (!slot || slot->isSequence || !slot->tensor)
      return emitError(fileLoc) << "graph output '" << out.name()
                                << "' is not computed by the graph",
             nullptr;
    auto type = cast<RankedTensorType>(slot->tensor.getType());
    const auto &declared = out.type().tensor_type();
    if (declared.elem_type() &&
        elementTypeOf(ctx, declared.elem_type()) != type.getElementType())
      return emitError(fileLoc) << "graph output '" << out.name()
                                << "' is declared "
                                << dataTypeName(declared.elem_type())
                                << " but computes " << type,
             nullptr;
    if (declared.has_shape()) {
      bool mismatch = declared.shape().dim_size() != type.getRank();
      for (int d = 0; !mismatch && d < declared.shape().dim_size(); ++d) {
        const auto &dim = declared.shape().dim(d);
        int64_t expect = -1;
        if (dim.has_dim_value())
          expect = dim.dim_value();
        else if (auto it = options.dims.find(dim.dim_param());
                 dim.has_dim_param() && it != options.dims.end())
          expect = it->second;
        mismatch = expect >= 0 && expect != type.getDimSize(d);
      }
      if (mismatch)
        return emitError(fileLoc) << "graph output '" << out.name()
                                  << "' computes " << type
                                  << ", which contradicts its declared shape",
               nullptr;
    }
    results.push_back(slot->tensor);
    outputNames.push_back(builder.getStringAttr(out.name()));
  }

  // Final argument order: parameters (ONNX initializer order), then inputs.
  llvm::StringMap<size_t> initOrder;
  for (auto [i, t] : llvm::enumerate(graph.initializer()))
    initOrder[t.name()] = i;
  SmallVector<Argument> ordered(arguments.begin(), arguments.end());
  llvm::stable_sort(ordered, [&](const Argument &a, const Argument &b) {
    bool pa = a.kind != ir::graph::kKindInput,
         pb = b.kind != ir::graph::kKindInput;
    if (pa != pb)
      return pa;
    return pa && initOrder.lookup(a.name) < initOrder.lookup(b.name);
  });
  SmallVector<Type> argTypes;
  for (const Argument &a : ordered)
    argTypes.push_back(a.value.getType());
  auto funcType = builder.getFunctionType(argTypes, ValueRange(results).getTypes());
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, fileLoc, options.functionName, funcType);
  Block *entry = func.addEntryBlock();
  // Argument attributes in one go: setArgAttr per argument rebuilds the
  // whole array each time (quadratic in the parameter count).
  SmallVector<DictionaryAttr> argAttrs;
  argAttrs.reserve(ordered.size());
  DenseMap<Value, Value> remap;
  for (auto [i, a] : llvm::enumerate(ordered)) {
    entry->getArgument(i).setLoc(a.value.getLoc());
    a.value.replaceAllUsesWith(entry->getArgument(i));
    remap[a.value] = entry->getArgument(i);
    NamedAttribute attrs[] = {
        builder.getNamedAttr(ir::graph::kNameAttr,
                             builder.getStringAttr(a.name)),
        builder.getNamedAttr(ir::graph::kKindAttr,
                             builder.getStringAttr(a.kind))};
    argAttrs.push_back(builder.getDictionaryAttr(attrs));
  }
  func.setAllArgAttrs(argAttrs);
  // Results that are arguments themselves must be remapped too.
  for (Value &r : results)
    if (Value arg = remap.lookup(r))
      r = arg;
  entry->getOperations().splice(entry->end(), body->getOperations());
  builder.setInsertionPointToEnd(entry);
  func::ReturnOp::create(builder, fileLoc, results);
  // Folding leaves behind what it consumed (constants, a reshape folded
  // into the next one); graph ops are pure, so drop every unused one,
  // walking backwards so dead chains go in one pass.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*entry)))
    if (isOpTriviallyDead(&op))
      op.erase();
  func->setAttr(ir::graph::kOutputNamesAttr, builder.getArrayAttr(outputNames));
  // What the training-preparation passes act on, whatever its name.
  ir::graph::setEntryFunction(func);
  if (failed(mlir::verify(*module)))
    return {};
  return module;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

void lamina::onnx::registerImportDialects(DialectRegistry &registry) {
  registry.insert<ir::graph::GraphDialect, func::FuncDialect>();
}

std::string lamina::onnx::parseDimBinding(StringRef text, ImportOptions &options,
                                          llvm::StringSaver &saver) {
  auto [name, value] = text.split('=');
  int64_t v;
  if (name.empty() || value.empty() || value.getAsInteger(10, v) || v < 0)
    return ("--dim expects NAME=VALUE with VALUE >= 0, got '" + text + "'").str();
  options.dims[saver.save(name)] = v;
  return "";
}

std::string lamina::onnx::parseDimBindings(ArrayRef<std::string> texts,
                                           ImportOptions &options,
                                           llvm::StringSaver &saver) {
  for (const std::string &text : texts)
    if (std::string err = parseDimBinding(text, options, saver); !err.empty())
      return err;
  return "";
}

OwningOpRef<ModuleOp>
lamina::onnx::importModelBytes(MLIRContext &context, StringRef bytes,
                               StringRef baseDir, StringRef displayName,
                               const ImportOptions &options) {
  context.loadDialect<ir::graph::GraphDialect, func::FuncDialect>();
  ::onnx::ModelProto model;
  if (std::string err = parseModel(bytes, model); !err.empty()) {
    emitError(FileLineColLoc::get(&context, displayName, 0, 0))
        << "cannot read '" << displayName << "': " << err;
    return {};
  }
  std::vector<std::string> notes;
  std::string err = recognizeEagerExperts(*model.mutable_graph(), notes);
  if (err.empty())
    err = recognizeBatchedExperts(*model.mutable_graph(), notes);
  if (!err.empty()) {
    emitError(FileLineColLoc::get(&context, displayName, 0, 0)) << err;
    return {};
  }
  noteRoutingHistograms(model.graph(), notes);
  for (const std::string &note : notes)
    emitRemark(FileLineColLoc::get(&context, displayName, 0, 0)) << note;
  TensorReader reader(baseDir, options.allowMissingExternalData);
  ModelImporter importer(&context, model, reader, options, displayName);
  return importer.run();
}

OwningOpRef<ModuleOp> lamina::onnx::importModelFile(MLIRContext &context,
                                                    StringRef path,
                                                    const ImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(&context, path, 0, 0))
        << "cannot open '" << path << "': " << buffer.getError().message();
    return {};
  }
  StringRef dir = llvm::sys::path::parent_path(path);
  return importModelBytes(context, (*buffer)->getBuffer(),
                          dir.empty() ? "." : dir, path, options);
}
