//===- Discovery.cpp - the module chain of an imported model --------------===//
//
// Module indices during discovery: 0 is the embedding, 1..N the layers and
// N+1 the head; empty embedding/head modules are dropped at the end.
//
// 1. Seeds. Ops that read a parameter named like `transformer.h.3.attn...`
//    (or whose node name has a scope `/h.3/`) are seeded with that layer.
//    Without names, the residual stream's adds are the cut points and the
//    period of the repeated op sequences between them gives the layers.
// 2. Propagation. With names, unseeded ops follow their producers (as early
//    as possible), except ops that read an anonymous weight (`onnx::MatMul_7`,
//    `302`), which follow their users: a layer's first projection reads the
//    previous layer's output but belongs to the layer whose bias it feeds.
//    Structural seeds cover only the cuts, so everything else follows users.
// 3. A final forward pass lifts every op to at least its producers' module,
//    so no def-use edge points backwards and the chain is a chain.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/Transforms/Discovery.h"
#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::dist;

namespace {

bool isSeparator(char c) {
  return c == '.' || c == '/' || c == '_' || c == ':';
}

/// Splits a name at separators; empty tokens are dropped.
SmallVector<std::pair<size_t, StringRef>> tokens(StringRef name) {
  SmallVector<std::pair<size_t, StringRef>> out;
  size_t i = 0;
  while (i < name.size()) {
    while (i < name.size() && isSeparator(name[i]))
      ++i;
    size_t start = i;
    while (i < name.size() && !isSeparator(name[i]))
      ++i;
    if (i > start)
      out.push_back({start, name.slice(start, i)});
  }
  return out;
}

bool isNumber(StringRef s) {
  return !s.empty() && s.size() <= 6 &&
         llvm::all_of(s, [](char c) { return llvm::isDigit(c); });
}

struct Candidate {
  std::string key; ///< the path before the index: "transformer.h"
  int64_t index;
};

/// Every `<container><sep><number><sep>...` reading of a name: a numeric
/// component after a non-numeric one and followed by more path (so node
/// counters such as `Add_28` or `val_66` are not scopes).
SmallVector<Candidate> candidates(StringRef name) {
  SmallVector<Candidate> out;
  auto toks = tokens(name);
  for (size_t j = 1; j + 1 < toks.size(); ++j) {
    if (!isNumber(toks[j].second) || isNumber(toks[j - 1].second))
      continue;
    int64_t index = 0;
    toks[j].second.getAsInteger(10, index);
    size_t keyEnd = toks[j - 1].first + toks[j - 1].second.size();
    out.push_back({name.substr(0, keyEnd).str(), index});
  }
  return out;
}

/// Exporter-made names that say nothing about the module: `302`,
/// `val_66`, `onnx::MatMul_642`.
bool isAnonymous(StringRef name) {
  auto toks = tokens(name);
  return toks.empty() || name.contains("::") || isNumber(toks.back().second);
}

/// The container key whose indices form the longest range starting at 0 or
/// 1. Outer containers win over nested ones (`model.layers` over
/// `model.layers.0.mlp.experts`, whatever the expert count), then longer
/// ranges, then keys seen in more names. Returns the key and its base.
std::optional<std::pair<std::string, int64_t>>
pickKey(const std::map<std::string, std::map<int64_t, int>> &stats,
        int64_t &numLayers) {
  std::optional<std::pair<std::string, int64_t>> best;
  std::tuple<int64_t, int64_t, int64_t> bestRank{INT64_MIN, 0, 0};
  numLayers = 0;
  for (const auto &[key, indices] : stats) {
    int64_t base = indices.begin()->first;
    int64_t count = static_cast<int64_t>(indices.size());
    if (base > 1 || indices.rbegin()->first != base + count - 1)
      continue;
    int64_t names = 0;
    for (const auto &entry : indices)
      names += entry.second;
    int64_t nesting = llvm::count_if(
        tokens(key), [](const auto &tok) { return isNumber(tok.second); });
    std::tuple<int64_t, int64_t, int64_t> rank{-nesting, count, names};
    if (!best || rank > bestRank) {
      best = {key, base};
      bestRank = rank;
      numLayers = count;
    }
  }
  return best;
}

std::string locationName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::string s = locationName(inner); !s.empty())
        return s;
  return "";
}

/// The module scope an exporter recorded in the node's metadata, which the
/// importer keeps as the location's child (`model.layers.3/add`), or "".
std::string metadataScope(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    if (auto child = dyn_cast<NameLoc>(name.getChildLoc()))
      return child.getName().str();
  return "";
}

bool isConstant(Operation *op) { return op->hasTrait<OpTrait::ConstantLike>(); }

/// Signature of a layer or segment for body sharing: the sorted multiset of
/// its ops (name, types, attributes), so the order a topological sort gave
/// them (exporters list nodes in any order) does not matter.
std::string signature(ArrayRef<Operation *> ops) {
  std::vector<std::string> parts;
  for (Operation *op : ops) {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << op->getName() << "(";
    llvm::interleaveComma(op->getOperandTypes(), os);
    os << ")->";
    llvm::interleaveComma(op->getResultTypes(), os);
    op->getRawDictionaryAttrs().print(os);
    parts.push_back(std::move(s));
  }
  llvm::sort(parts);
  return llvm::join(parts, ";");
}

/// The state of one discovery run over the function's ops.
struct Discoverer {
  mutable func::FuncOp func;
  SmallVector<Operation *> ops;
  DenseMap<Operation *, size_t> pos;
  std::vector<int> seed, mod;
  /// Reads a parameter that names no layer: a named one (embedding or
  /// head by position) or an anonymous one (follows its users).
  std::vector<char> namedOther, anonymousParam;
  int numLayers = 0;

  explicit Discoverer(func::FuncOp f) : func(f) {
    for (Operation &op : f.getBody().front().without_terminator()) {
      pos[&op] = ops.size();
      ops.push_back(&op);
    }
    seed.assign(ops.size(), -1);
    mod.assign(ops.size(), -1);
    namedOther.assign(ops.size(), 0);
    anonymousParam.assign(ops.size(), 0);
  }

  int head() const { return numLayers + 1; }

  bool isParam(unsigned arg) const {
    auto kind = func.getArgAttrOfType<StringAttr>(arg, ir::graph::kKindAttr);
    return kind && (kind.getValue() == ir::graph::kKindTrainable ||
                    kind.getValue() == ir::graph::kKindConstant);
  }
  StringRef argName(unsigned arg) const {
    auto name = func.getArgAttrOfType<StringAttr>(arg, ir::graph::kNameAttr);
    return name ? name.getValue() : StringRef();
  }

  void seedUsers(Value v, int module) {
    for (Operation *user : v.getUsers())
      if (auto it = pos.find(user); it != pos.end())
        seed[it->second] = std::max(seed[it->second], module);
  }

  /// Marks users of parameters that name no layer.
  void markOtherParams(llvm::function_ref<bool(unsigned)> namesLayer) {
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      if (!isParam(i) || namesLayer(i))
        continue;
      bool anonymous = isAnonymous(argName(i));
      for (Operation *user : arg.getUsers())
        if (auto it = pos.find(user); it != pos.end())
          (anonymous ? anonymousParam : namedOther)[it->second] = 1;
    }
  }

  /// Automatic names: parameter prefixes, then node-name scopes.
  bool seedFromNames() {
    std::map<std::string, std::map<int64_t, int>> paramStats, nodeStats,
        metaStats;
    for (BlockArgument arg : func.getArguments())
      if (isParam(arg.getArgNumber()) && !arg.use_empty())
        for (const Candidate &c : candidates(argName(arg.getArgNumber())))
          ++paramStats[c.key][c.index];
    for (Operation *op : ops) {
      for (const Candidate &c : candidates(locationName(op->getLoc())))
        ++nodeStats[c.key][c.index];
      for (const Candidate &c : candidates(metadataScope(op->getLoc())))
        ++metaStats[c.key][c.index];
    }
    int64_t paramLayers = 0, nodeLayers = 0;
    auto paramKey = pickKey(paramStats, paramLayers);
    auto nodeKey = pickKey(nodeStats, nodeLayers);
    // Node names without scopes (dynamo's `node_add_5`): the module scopes
    // of the nodes' metadata stand in for them, also when the names' only
    // reading disagrees with the parameters (dynamo's `node_topk_1__1`
    // reads as container `node_topk`, index 1).
    bool fromMetadata = false;
    if (!nodeKey || (paramKey && nodeLayers != paramLayers)) {
      int64_t metaLayers = 0;
      auto metaKey = pickKey(metaStats, metaLayers);
      if (metaKey && (!nodeKey || metaLayers == paramLayers)) {
        nodeKey = metaKey;
        nodeLayers = metaLayers;
        fromMetadata = true;
      }
    }
    if (!paramKey && !nodeKey)
      return false;
    usedMetadata = fromMetadata && !paramKey;
    numLayers = static_cast<int>(paramKey ? paramLayers : nodeLayers);
    auto layerOf =
        [](StringRef name,
           const std::pair<std::string, int64_t> &key) -> std::optional<int> {
      for (const Candidate &c : candidates(name))
        if (c.key == key.first)
          return static_cast<int>(c.index - key.second);
      return std::nullopt;
    };
    if (paramKey) {
      // A layer's parameter read by three or more ops was merged by the
      // exporter with its equals in other layers (dynamo deduplicates the
      // all-ones norm weights): it names no single layer.
      for (BlockArgument arg : func.getArguments())
        if (isParam(arg.getArgNumber()))
          if (auto layer = layerOf(argName(arg.getArgNumber()), *paramKey)) {
            if (std::distance(arg.use_begin(), arg.use_end()) < 3) {
              seedUsers(arg, *layer + 1);
              continue;
            }
            for (Operation *user : arg.getUsers())
              if (auto it = pos.find(user); it != pos.end())
                anonymousParam[it->second] = 1;
          }
      markOtherParams([&](unsigned i) {
        return layerOf(argName(i), *paramKey).has_value();
      });
    } else {
      markOtherParams([](unsigned) { return false; });
    }
    // Node scopes cover the ops between parameters (residual adds, masks
    // applied per layer); used when they agree on the layer count.
    // A scoped node outside every layer (`/model/norm/Mul`) belongs to the
    // embedding or the head, by position.
    if (nodeKey && nodeLayers == numLayers)
      for (auto [i, op] : llvm::enumerate(ops)) {
        std::string name = fromMetadata ? metadataScope(op->getLoc())
                                        : locationName(op->getLoc());
        if (auto layer = layerOf(name, *nodeKey))
          seed[i] = *layer + 1;
        else if (StringRef(name).contains('/') && !isConstant(op))
          namedOther[i] = 1;
      }
    return true;
  }

  /// --module-regex: the first capture group of the parameter names (else
  /// the node names) names the layer.
  LogicalResult seedFromRegex(StringRef regex) {
    llvm::Regex re(regex);
    std::string error;
    if (!re.isValid(error))
      return mlir::emitError(func.getLoc())
             << "--module-regex '" << regex
             << "' is not a valid regex: " << error;
    if (re.getNumMatches() < 1)
      return mlir::emitError(func.getLoc())
             << "--module-regex '" << regex
             << "' needs a capture group naming the module";
    auto capture = [&](StringRef name) -> std::optional<std::string> {
      SmallVector<StringRef> m;
      if (name.empty() || !re.match(name, &m) || m.size() < 2 || m[1].empty())
        return std::nullopt;
      return m[1].str();
    };
    // Per capture: the ops it seeds; the layers are ordered numerically
    // when every capture is a number, else by first op.
    std::map<std::string, SmallVector<size_t>> seeded;
    for (BlockArgument arg : func.getArguments())
      if (isParam(arg.getArgNumber()))
        if (auto c = capture(argName(arg.getArgNumber())))
          for (Operation *user : arg.getUsers())
            if (auto it = pos.find(user); it != pos.end())
              seeded[*c].push_back(it->second);
    bool fromParams = !seeded.empty();
    if (!fromParams)
      for (auto [i, op] : llvm::enumerate(ops))
        if (auto c = capture(locationName(op->getLoc())))
          seeded[*c].push_back(i);
    if (seeded.empty())
      return mlir::emitError(func.getLoc())
             << "--module-regex '" << regex
             << "' matches no parameter or node name";
    SmallVector<std::pair<std::string, size_t>> order;
    bool numeric = true;
    for (auto &[name, idx] : seeded) {
      order.push_back({name, *llvm::min_element(idx)});
      numeric &= isNumber(name);
    }
    llvm::sort(order, [&](const auto &a, const auto &b) {
      if (numeric)
        return std::stoll(a.first) < std::stoll(b.first);
      return a.second < b.second;
    });
    numLayers = static_cast<int>(order.size());
    for (auto [layer, entry] : llvm::enumerate(order))
      for (size_t i : seeded[entry.first])
        seed[i] = std::max(seed[i], static_cast<int>(layer) + 1);
    if (fromParams)
      markOtherParams(
          [&](unsigned i) { return capture(argName(i)).has_value(); });
    else
      markOtherParams([](unsigned) { return false; });
    regexNames.clear();
    for (auto &entry : order)
      regexNames.push_back(entry.first);
    return success();
  }
  std::vector<std::string> regexNames;
  /// Layers came from node metadata alone (no parameter names).
  bool usedMetadata = false;

  int producerMax(Operation *op) const {
    int lo = 0;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp(); def && !isConstant(def))
        if (auto it = pos.find(def); it != pos.end())
          lo = std::max(lo, mod[it->second]);
    return lo;
  }
  /// A weight-only value several layers read (a rotary table) is computed
  /// once before the chain, as a shared input, not in the first layer.
  bool readBySeveralLayers(Operation *op) const {
    llvm::SmallDenseSet<int> layers;
    for (Operation *user : op->getUsers())
      if (auto it = pos.find(user); it != pos.end())
        if (mod[it->second] >= 1 && mod[it->second] <= numLayers)
          layers.insert(mod[it->second]);
    return layers.size() >= 2 ||
           (layers.size() == 1 &&
            llvm::any_of(op->getUsers(), [&](Operation *u) {
              auto it = pos.find(u);
              return it != pos.end() && mod[it->second] == 0;
            }));
  }
  std::vector<char> weightOnlyOps;

  int userMin(Operation *op) const {
    int hi = INT_MAX;
    for (Operation *user : op->getUsers()) {
      auto it = pos.find(user);
      hi = std::min(hi, it == pos.end() ? head() : mod[it->second]);
    }
    return hi;
  }

  /// Side computations: ops that read no model input (they compute on
  /// weights and constants: a tied head's transposed table, a rotary table)
  /// or no parameter (masks and position ids from the inputs). They go with
  /// their first user rather than where their operands are.
  std::vector<char> weightOnly() const {
    std::vector<char> fromInput(ops.size(), 0), fromParam(ops.size(), 0),
        result(ops.size(), 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      for (Value v : ops[i]->getOperands()) {
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          bool param = isParam(arg.getArgNumber());
          fromInput[i] |= !param;
          fromParam[i] |= param;
        } else if (auto it = pos.find(v.getDefiningOp()); it != pos.end()) {
          fromInput[i] |= fromInput[it->second];
          fromParam[i] |= fromParam[it->second];
        }
      }
      result[i] = (!fromInput[i] || !fromParam[i]) && !isConstant(ops[i]);
    }
    return result;
  }

  /// Bounds from the seeds: `lo` is the latest module among an op's
  /// producers, `hi` the earliest among its users. Ordinary ops take `lo`
  /// (a residual add ends the layer that computed it); ops that read an
  /// anonymous weight, and side computations, take `hi`.
  void propagateNames() {
    weightOnlyOps = weightOnly();
    size_t n = ops.size();
    std::vector<int> lo(n, 0), hi(n, INT_MAX);
    std::vector<char> fixed(n, 0);
    for (size_t i = 0; i < n; ++i) {
      int l = 0;
      for (Value v : ops[i]->getOperands())
        if (Operation *def = v.getDefiningOp(); def && !isConstant(def))
          if (auto it = pos.find(def); it != pos.end())
            l = std::max(l, lo[it->second]);
      fixed[i] = seed[i] >= 0 || (namedOther[i] && !weightOnlyOps[i]);
      lo[i] = seed[i] >= 0 ? seed[i] : !fixed[i] ? l : l >= 1 ? head() : 0;
    }
    for (size_t i = n; i-- > 0;) {
      if (fixed[i]) {
        hi[i] = lo[i];
        continue;
      }
      for (Operation *user : ops[i]->getUsers()) {
        auto it = pos.find(user);
        hi[i] = std::min(hi[i], it == pos.end() ? head() : hi[it->second]);
      }
    }
    // Users come later, so walking backwards sees them placed; a user that
    // follows its producers is not placed for good yet and offers its bound.
    std::vector<char> followUsers(n, 0);
    for (size_t i = n; i-- > 0;) {
      followUsers[i] = !fixed[i] && (weightOnlyOps[i] ||
                                     (anonymousParam[i] && !namedOther[i]));
      int target = INT_MAX;
      for (Operation *user : ops[i]->getUsers()) {
        auto it = pos.find(user);
        size_t u = it == pos.end() ? 0 : it->second;
        target = std::min(target, it == pos.end()              ? head()
                                  : fixed[u] || followUsers[u] ? mod[u]
                                                               : hi[u]);
      }
      if (!followUsers[i] || target == INT_MAX)
        mod[i] = lo[i];
      else if (namedOther[i]) // a named non-layer weight stays out of layers
        mod[i] = target >= head() ? head() : 0;
      else if (weightOnlyOps[i] && readBySeveralLayers(ops[i]))
        mod[i] = 0;
      else
        mod[i] = target;
    }
  }

  /// Everything unseeded follows its users (structural discovery).
  void propagateToUsers() {
    weightOnlyOps = weightOnly();
    for (size_t i = ops.size(); i-- > 0;) {
      if (seed[i] >= 0) {
        mod[i] = seed[i];
        continue;
      }
      int hi = userMin(ops[i]);
      mod[i] = weightOnlyOps[i] && readBySeveralLayers(ops[i]) ? 0
               : hi == INT_MAX                                 ? -1
                                                               : hi;
    }
    for (size_t i = 0; i < ops.size(); ++i)
      if (mod[i] < 0)
        mod[i] = producerMax(ops[i]);
  }

  void liftAndPlaceConstants() {
    for (size_t i = 0; i < ops.size(); ++i)
      if (!isConstant(ops[i]))
        mod[i] = std::clamp(std::max(mod[i], producerMax(ops[i])), 0, head());
    // Constants are free and never cross a boundary: they join their first
    // user.
    for (size_t i = 0; i < ops.size(); ++i)
      if (isConstant(ops[i])) {
        int hi = userMin(ops[i]);
        mod[i] = hi == INT_MAX ? 0 : hi;
      }
  }

  /// When every layer but the last shares one body, the boundary between
  /// the last layer and the head is moved to where the last layer matches
  /// them: a post-LN layer's spelled-out final norm that no later residual
  /// claimed, or a classifier's `x[:, 0]` that followed its producer.
  void alignLastLayer() {
    if (numLayers < 2)
      return;
    int last = numLayers;
    std::vector<SmallVector<Operation *>> layerOps(numLayers + 1);
    SmallVector<size_t> tail; // last layer and head, in program order
    for (size_t i = 0; i < ops.size(); ++i) {
      if (isConstant(ops[i]))
        continue;
      if (mod[i] >= 1 && mod[i] <= numLayers)
        layerOps[mod[i]].push_back(ops[i]);
      if (mod[i] >= last)
        tail.push_back(i);
    }
    std::string reference = signature(layerOps[1]);
    for (int l = 2; l < last; ++l)
      if (signature(layerOps[l]) != reference)
        return;
    size_t n = layerOps[1].size();
    if (signature(layerOps[last]) == reference || tail.size() < n)
      return;
    SmallVector<Operation *> prefix;
    llvm::DenseSet<Operation *> inPrefix;
    for (size_t k = 0; k < n; ++k) {
      prefix.push_back(ops[tail[k]]);
      inPrefix.insert(ops[tail[k]]);
    }
    if (signature(prefix) != reference)
      return;
    // The new last layer must not read the new head.
    for (Operation *op : prefix)
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && !isConstant(def))
          if (auto it = pos.find(def); it != pos.end() &&
                                       mod[it->second] >= last &&
                                       !inPrefix.contains(def))
            return;
    for (size_t k = 0; k < tail.size(); ++k)
      mod[tail[k]] = k < n ? last : head();
    liftAndPlaceConstants();
  }

  bool seedFromStructure();
};

//===----------------------------------------------------------------------===//
// Structural fallback
//===----------------------------------------------------------------------===//

bool isNorm(Operation *op) {
  return isa<ir::graph::LayerNormOp, ir::graph::RMSNormOp>(op);
}

/// Whether `target`'s value reaches `from` backwards, searching only ops at
/// or after `target` in program order.
bool reaches(const Discoverer &d, Value from, Operation *target) {
  size_t limit = d.pos.lookup(target);
  SmallVector<Value> work{from};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !d.pos.count(def) || seen.contains(def))
      continue;
    if (def == target)
      return true;
    if (d.pos.lookup(def) < limit)
      continue;
    seen.insert(def);
    for (Value v : def->getOperands())
      work.push_back(v);
  }
  return false;
}

bool Discoverer::seedFromStructure() {
  // Residual adds: x + f(x). The stream value after one is the add itself,
  // or the norm right after it (post-LN models such as BERT).
  struct Residual {
    Operation *add, *cut;
    Value skip;
  };
  SmallVector<Residual> residuals;
  for (Operation *op : ops) {
    auto add = dyn_cast<ir::graph::AddOp>(op);
    if (!add)
      continue;
    for (auto [a, b] : {std::pair(add.getLhs(), add.getRhs()),
                        std::pair(add.getRhs(), add.getLhs())}) {
      Operation *aDef = a.getDefiningOp();
      bool aIsValue = !aDef || !isConstant(aDef);
      if (aIsValue && aDef && reaches(*this, b, aDef)) {
        residuals.push_back({op, op, a});
        break;
      }
    }
  }
  if (residuals.empty())
    return false;
  // Post-LN: the norm after an add carries the stream when it is itself the
  // skip input of a later residual (a final norm before the head is not).
  llvm::DenseSet<Value> skips;
  for (const Residual &r : residuals)
    skips.insert(r.skip);
  for (Residual &r : residuals)
    if (r.add->hasOneUse() && isNorm(*r.add->getUsers().begin()) &&
        skips.contains(r.add->getUsers().begin()->getResult(0)))
      r.cut = *r.add->getUsers().begin();
  // The longest chain where each residual's skip is the previous cut.
  DenseMap<Operation *, size_t> byCut;
  for (auto [i, r] : llvm::enumerate(residuals))
    byCut[r.cut] = i;
  std::vector<int> length(residuals.size(), 1), prev(residuals.size(), -1);
  for (auto [i, r] : llvm::enumerate(residuals)) {
    Operation *def = r.skip.getDefiningOp();
    if (!def || !pos.count(def))
      continue;
    int j = -1;
    if (auto it = byCut.find(def); it != byCut.end() && it->second < i) {
      j = static_cast<int>(it->second);
    } else {
      // A norm spelled out in elementwise ops (post-LN exports): the skip
      // is computed from the nearest earlier residual, which it then ends.
      for (int k = static_cast<int>(i) - 1; k >= 0 && j < 0; --k)
        if (pos[residuals[k].add] < pos[def] &&
            residuals[k].add->getResult(0).getType() == r.skip.getType() &&
            reaches(*this, r.skip, residuals[k].add))
          j = k;
      if (j >= 0)
        residuals[j].cut = def;
    }
    if (j >= 0) {
      length[i] = length[j] + 1;
      prev[i] = j;
    }
  }
  size_t last = std::max_element(length.begin(), length.end()) - length.begin();
  SmallVector<size_t> chain;
  for (int i = static_cast<int>(last); i >= 0; i = prev[i])
    chain.push_back(i);
  std::reverse(chain.begin(), chain.end());
  size_t m = chain.size();
  // In a post-LN chain the last layer ends with its norm too.
  Residual &final = residuals[chain.back()];
  if (llvm::any_of(
          chain,
          [&](size_t i) { return residuals[i].cut != residuals[i].add; }) &&
      final.add->hasOneUse() && isNorm(*final.add->getUsers().begin()))
    final.cut = *final.add->getUsers().begin();

  // Segment j (1-based) ends at cut j; its signature is the sequence of ops
  // that depend on the stream (shared mask/rotary ops do not).
  std::vector<char> onStream(ops.size(), 0);
  Value x0 = residuals[chain.front()].skip;
  Operation *x0Def = x0.getDefiningOp();
  for (size_t i = 0; i < ops.size(); ++i)
    for (Value v : ops[i]->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (v == x0 ||
          (def && pos.count(def) && onStream[pos[def]] && def != x0Def))
        onStream[i] = 1;
    }
  std::fill(seed.begin(), seed.end(), -1);
  for (size_t j = 0; j < m; ++j)
    seed[pos[residuals[chain[j]].cut]] = static_cast<int>(j) + 1;
  if (x0Def && pos.count(x0Def))
    seed[pos[x0Def]] = 0;
  numLayers = static_cast<int>(m);
  propagateToUsers();
  std::vector<SmallVector<Operation *>> segmentOps(m + 2);
  for (size_t i = 0; i < ops.size(); ++i)
    if (onStream[i] && mod[i] >= 1 && mod[i] <= static_cast<int>(m))
      segmentOps[mod[i]].push_back(ops[i]);
  std::vector<std::string> sig(m + 2);
  for (size_t j = 1; j <= m; ++j)
    sig[j] = signature(segmentOps[j]);
  size_t period = m;
  for (size_t k = 1; k < m; ++k) {
    if (m % k)
      continue;
    // The last segment may lack a trailing norm the others end with (it
    // belongs to no later residual), so it is not compared.
    bool repeats = k + 1 < m;
    for (size_t j = 1; j + k < m && repeats; ++j)
      repeats = sig[j] == sig[j + k];
    if (repeats) {
      period = k;
      break;
    }
  }
  // Layer l holds segments l*period+1 .. (l+1)*period.
  numLayers = static_cast<int>(m / period);
  std::fill(seed.begin(), seed.end(), -1);
  for (size_t j = 0; j < m; ++j)
    seed[pos[residuals[chain[j]].cut]] = static_cast<int>(j / period) + 1;
  if (x0Def && pos.count(x0Def))
    seed[pos[x0Def]] = 0;
  propagateToUsers();
  return true;
}

} // namespace

std::string lamina::ir::dist::valueName(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        ir::graph::kNameAttr))
        return name.getValue().str();
    return "argument " + std::to_string(arg.getArgNumber());
  }
  std::string name = locationName(value.getLoc());
  return name.empty() ? value.getDefiningOp()->getName().getStringRef().str()
                      : name;
}

/// Shared values: function inputs read by a layer, and op results read by
/// two or more layers other than their own module.
static void findSharedValues(func::FuncOp func, ModuleChain &chain) {
  auto isLayerModule = [&](int m) {
    return chain.modules[m].role == plan::ModuleRole::Layer;
  };
  auto readers = [&](Value v, int own) {
    llvm::SmallDenseSet<int> layers;
    for (Operation *user : v.getUsers()) {
      int m = chain.moduleOfOp(user);
      if (m != own && isLayerModule(m))
        layers.insert(m);
    }
    return layers.size();
  };
  bool hasEmbedding = chain.modules.front().role == plan::ModuleRole::Embedding;
  for (BlockArgument arg : func.getArguments()) {
    auto kind = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  ir::graph::kKindAttr);
    if (!kind || kind.getValue() != ir::graph::kKindInput)
      continue;
    // With an embedding the stream enters there; whatever else a layer reads
    // from the inputs (a mask, position ids) is a side input.
    size_t n = readers(arg, -1);
    if (n >= 2 || (n == 1 && hasEmbedding))
      chain.sharedValues.push_back(arg);
  }
  for (Operation &op : func.getBody().front().without_terminator())
    if (!isConstant(&op))
      for (Value r : op.getResults())
        if (readers(r, chain.moduleOfOp(&op)) >= 2)
          chain.sharedValues.push_back(r);
}

FailureOr<ModuleChain>
lamina::ir::dist::chainFromAttributes(func::FuncOp func) {
  auto modules = func->getAttrOfType<ArrayAttr>(DistDialect::kChainAttr);
  if (!modules || modules.empty())
    return mlir::emitError(func.getLoc())
           << "@" << func.getSymName() << " has no 'dist.chain'";
  ModuleChain chain;
  for (Attribute entry : modules) {
    auto m = dyn_cast<ModuleAttr>(entry);
    if (!m)
      return mlir::emitError(func.getLoc())
             << "'dist.chain' holds " << entry << ", not a #dist.module";
    ChainModule cm;
    cm.name = m.getName().str();
    cm.role = m.getKind() == ModuleKind::Embedding ? plan::ModuleRole::Embedding
              : m.getKind() == ModuleKind::Head    ? plan::ModuleRole::Head
                                                   : plan::ModuleRole::Layer;
    cm.body = static_cast<int>(m.getBody());
    chain.modules.push_back(std::move(cm));
  }
  for (Operation &op : func.getBody().front().without_terminator()) {
    auto index = op.getAttrOfType<IntegerAttr>(DistDialect::kModuleAttr);
    if (!index || index.getInt() < 0 ||
        index.getInt() >= static_cast<int64_t>(modules.size()))
      return op.emitError() << "op without a valid 'dist.module' in a "
                               "function with a 'dist.chain'";
    chain.moduleOf[&op] = static_cast<int>(index.getInt());
  }
  auto how = func->getAttrOfType<StringAttr>(DistDialect::kDiscoveryAttr);
  chain.discovery = how ? how.getValue().str() : "annotated";
  findSharedValues(func, chain);
  return chain;
}

FailureOr<ModuleChain>
lamina::ir::dist::discoverModules(func::FuncOp func, StringRef moduleRegex) {
  if (func.isExternal())
    return mlir::emitError(func.getLoc())
           << "@" << func.getSymName() << " has no body to split into modules";
  Discoverer d(func);
  if (d.ops.empty())
    return mlir::emitError(func.getLoc())
           << "@" << func.getSymName() << " has no ops to split into modules";
  ModuleChain chain;
  if (!moduleRegex.empty()) {
    if (failed(d.seedFromRegex(moduleRegex)))
      return failure();
    d.propagateNames();
    chain.discovery = "regex";
  } else if (d.seedFromNames()) {
    d.propagateNames();
    chain.discovery = d.usedMetadata ? "metadata" : "names";
  } else if (d.seedFromStructure()) {
    chain.discovery = "structure";
  } else {
    // No names and no residual stream: one module holds everything.
    d.numLayers = 1;
    std::fill(d.mod.begin(), d.mod.end(), 1);
    chain.discovery = "none";
  }
  d.liftAndPlaceConstants();
  d.alignLastLayer();

  // Drop empty modules and renumber.
  int total = d.head() + 1;
  std::vector<SmallVector<Operation *>> members(total);
  for (size_t i = 0; i < d.ops.size(); ++i)
    members[d.mod[i]].push_back(d.ops[i]);
  std::vector<int> newIndex(total, -1);
  llvm::StringMap<int> bodies;
  int layer = 0;
  for (int m = 0; m < total; ++m) {
    bool isLayer = m >= 1 && m <= d.numLayers;
    if (isLayer)
      ++layer;
    bool allConstant = llvm::all_of(members[m], isConstant);
    if (members[m].empty() || (!isLayer && allConstant))
      continue;
    ChainModule cm;
    if (m == 0) {
      cm.name = "embedding";
      cm.role = plan::ModuleRole::Embedding;
    } else if (m == d.head()) {
      cm.name = "head";
      cm.role = plan::ModuleRole::Head;
    } else {
      cm.name = chain.discovery == "regex" && !isNumber(d.regexNames[m - 1])
                    ? d.regexNames[m - 1]
                    : "layer." + std::to_string(layer - 1);
      SmallVector<Operation *> body;
      for (Operation *op : members[m])
        if (!isConstant(op))
          body.push_back(op);
      auto [it, inserted] =
          bodies.try_emplace(signature(body), static_cast<int>(bodies.size()));
      cm.body = it->second;
    }
    newIndex[m] = static_cast<int>(chain.modules.size());
    chain.modules.push_back(std::move(cm));
  }
  // Constant-only embedding/head modules were dropped: their constants join
  // the nearest kept module (they cost nothing).
  for (size_t i = 0; i < d.ops.size(); ++i) {
    int m = d.mod[i];
    while (newIndex[m] < 0 && m > 0)
      --m;
    while (newIndex[m] < 0)
      ++m;
    chain.moduleOf[d.ops[i]] = newIndex[m];
  }

  findSharedValues(func, chain);
  return chain;
}
