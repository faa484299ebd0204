//===- TpCheck.cpp - tensor parallelism against one process, numerically -===//
//
// `lamina-tp-check TRAIN.mlir MODEL.onnx --tp T`: TRAIN.mlir is a module
// `lamina compile --compile-to train` wrote for a pipeline (the outlined
// forward and backward of every module). Each module's pair is evaluated
// whole (the reference evaluator on the host kernels) and, after
// dist-tp-plan, upstream's shard-partition and dist-tp-combine-sums, in
// its SPMD form on T ranks in lockstep (lamina::eval::evaluateSpmd: the
// collectives combine the ranks' values as a communicator would). The weights
// are the model's; the boundary values, token ids and the cotangents are drawn
// from a seeded generator; each rank's backward reads the residuals its
// own forward returned, as in a run. Every output of every rank must equal
// its block of the whole function's output within --rtol
// (max |difference| / max(1, max |whole|)). Prints one line per function
// with its collectives and error, then "ok"; exit 1 on any difference.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/ShardingInterfaceImpl.h"
#include "lamina/Eval/Evaluator.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

using namespace mlir;
using namespace lamina;
using eval::HostTensor;
namespace cl = llvm::cl;

static cl::opt<std::string> trainPath(cl::Positional, cl::Required,
                                      cl::desc("TRAIN.mlir"));
static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("MODEL.onnx"));
static cl::opt<unsigned> tp("tp", cl::desc("tensor-parallel ranks"),
                            cl::init(2));
static cl::opt<bool>
    sequenceParallel("sequence-parallel",
                     cl::desc("dist-tp-plan's sequence parallelism"),
                     cl::init(false));
static cl::opt<double> rtol("rtol", cl::desc("relative tolerance"),
                            cl::init(1e-5));
static cl::opt<unsigned> seed("seed", cl::desc("generator seed"), cl::init(7));

namespace {

using Outputs = std::vector<std::pair<std::string, HostTensor>>;

/// The dims each argument and result is split on, as dist-tp-plan pinned
/// them (read before partition turns them into shard types).
struct Layout {
  std::vector<std::vector<int64_t>> args, results;
};

std::vector<int64_t> splitDims(shard::ShardOp ann) {
  std::vector<int64_t> dims;
  shard::Sharding s(ann.getSharding());
  for (auto [d, axes] : llvm::enumerate(s.getSplitAxes()))
    if (!axes.asArrayRef().empty())
      dims.push_back(int64_t(d));
  return dims;
}

Layout layoutOf(func::FuncOp f) {
  Layout l;
  for (BlockArgument arg : f.getArguments()) {
    std::vector<int64_t> dims;
    for (Operation *user : arg.getUsers())
      if (auto ann = dyn_cast<shard::ShardOp>(user))
        dims = splitDims(ann);
    l.args.push_back(dims);
  }
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  for (Value v : ret.getOperands()) {
    auto ann = v.getDefiningOp<shard::ShardOp>();
    l.results.push_back(ann ? splitDims(ann) : std::vector<int64_t>());
  }
  return l;
}

std::string argName(func::FuncOp f, unsigned i) {
  auto s = f.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr);
  return s ? s.getValue().str() : "";
}

std::string argKind(func::FuncOp f, unsigned i) {
  auto s = f.getArgAttrOfType<StringAttr>(i, "graph.kind");
  return s ? s.getValue().str() : "";
}

/// A value for an argument the model does not hold: token ids in [0, 8),
/// a scalar cotangent 1 (the loss's), else normal values.
HostTensor drawn(Type type, std::mt19937 &gen) {
  auto t = cast<RankedTensorType>(type);
  rt::DType dtype;
  eval::dtypeOf(t.getElementType(), dtype);
  HostTensor v(dtype, std::vector<int64_t>(t.getShape()));
  int64_t n = v.numElements();
  if (dtype == rt::DType::I64) {
    std::uniform_int_distribution<int64_t> ids(0, 7);
    for (int64_t i = 0; i < n; ++i)
      static_cast<int64_t *>(v.data())[i] = ids(gen);
  } else if (t.getRank() == 0) {
    *static_cast<float *>(v.data()) = 1.0f;
  } else {
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (int64_t i = 0; i < n; ++i)
      static_cast<float *>(v.data())[i] = normal(gen);
  }
  return v;
}

/// max |a - b| / max(1, max |b|), f32 only (0 for other types when equal
/// bytes, 1 otherwise).
double relErr(const HostTensor &a, const HostTensor &b) {
  if (a.shape != b.shape)
    return INFINITY;
  if (a.dtype != rt::DType::F32)
    return a.storage == b.storage ? 0.0 : 1.0;
  auto *x = static_cast<const float *>(a.data());
  auto *y = static_cast<const float *>(b.data());
  double diff = 0, scale = 1;
  for (int64_t i = 0; i < a.numElements(); ++i) {
    diff = std::max(diff, double(std::fabs(x[i] - y[i])));
    scale = std::max(scale, double(std::fabs(y[i])));
  }
  return diff / scale;
}

int countOps(func::FuncOp f, StringRef name) {
  int n = 0;
  f.walk([&](Operation *op) { n += op->getName().getStringRef() == name; });
  return n;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "tensor parallelism against one "
                              "process, numerically\n");
  DialectRegistry registry;
  registry.insert<ir::dist::DistDialect, ir::graph::GraphDialect,
                  func::FuncDialect, arith::ArithDialect, shard::ShardDialect,
                  tensor::TensorDialect>();
  ir::graph::registerShardingInterfaceExternalModels(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> whole = parseSourceFile<ModuleOp>(trainPath, &ctx);
  if (!whole)
    return 1;
  OwningOpRef<ModuleOp> spmd = whole->clone();
  PassManager plan(&ctx);
  ir::dist::DistTpPlanOptions options;
  options.tp = tp;
  options.sequenceParallel = sequenceParallel;
  plan.addPass(ir::dist::createDistTpPlan(options));
  if (failed(plan.run(*spmd)))
    return 1;
  std::map<std::string, Layout> layouts;
  for (auto f : spmd->getOps<func::FuncOp>())
    layouts[f.getSymName().str()] = layoutOf(f);
  PassManager partition(&ctx);
  partition.addNestedPass<func::FuncOp>(shard::createPartition());
  partition.addNestedPass<func::FuncOp>(createCSEPass());
  partition.addNestedPass<func::FuncOp>(ir::dist::createDistTpCombineSums());
  if (failed(partition.run(*spmd)))
    return 1;

  std::mt19937 gen(seed);
  bool failedAny = false;
  int64_t ranks = int64_t(tp);
  for (int64_t k = 0;; ++k) {
    std::string fwdName = "fwd_" + std::to_string(k);
    std::string bwdName = "bwd_" + std::to_string(k);
    auto fwd = whole->lookupSymbol<func::FuncOp>(fwdName);
    auto bwd = whole->lookupSymbol<func::FuncOp>(bwdName);
    if (!fwd || !bwd)
      break;
    // The whole forward on the model's weights and drawn values.
    std::map<std::string, HostTensor> args;
    if (std::string err =
            eval::loadInitializers(*whole, modelPath, args, fwdName);
        !err.empty()) {
      llvm::errs() << "lamina-tp-check: " << err << "\n";
      return 1;
    }
    for (unsigned i = 0; i < fwd.getNumArguments(); ++i)
      if (!args.count(argName(fwd, i)))
        args[argName(fwd, i)] = drawn(fwd.getArgument(i).getType(), gen);
    std::map<std::string, Outputs> out;
    std::vector<std::map<std::string, Outputs>> rankOut{size_t(ranks)};
    auto run = [&](func::FuncOp f,
                   const std::map<std::string, HostTensor> &in) -> bool {
      std::string name = f.getSymName().str();
      Outputs expected;
      if (std::string err = eval::evaluate(*whole, in, expected, name);
          !err.empty()) {
        llvm::errs() << "lamina-tp-check: @" << name << ": " << err << "\n";
        return false;
      }
      const Layout &layout = layouts.at(name);
      std::vector<std::map<std::string, HostTensor>> perRank{size_t(ranks)};
      for (int64_t r = 0; r < ranks; ++r)
        for (unsigned i = 0; i < f.getNumArguments(); ++i) {
          std::string arg = argName(f, i);
          // A rank's backward reads its own forward's residuals.
          if (argKind(f, i) == "residual") {
            for (auto &[n, v] : rankOut[size_t(r)][fwdName])
              if (n == arg)
                perRank[size_t(r)][arg] = v;
            continue;
          }
          perRank[size_t(r)][arg] =
              eval::shardOf(in.at(arg), layout.args[i], ranks, r);
        }
      std::vector<Outputs> got;
      if (std::string err = eval::evaluateSpmd(*spmd, perRank, got, name);
          !err.empty()) {
        llvm::errs() << "lamina-tp-check: SPMD @" << name << ": " << err
                     << "\n";
        return false;
      }
      double err = 0;
      std::string worst;
      for (int64_t r = 0; r < ranks; ++r) {
        for (auto [i, o] : llvm::enumerate(expected)) {
          double e =
              relErr(got[size_t(r)][i].second,
                     eval::shardOf(o.second, layout.results[i], ranks, r));
          if (e > err)
            worst = o.first;
          err = std::max(err, e);
        }
        rankOut[size_t(r)][name] = got[size_t(r)];
      }
      out[name] = expected;
      auto spmdFn = spmd->lookupSymbol<func::FuncOp>(name);
      bool ok = err <= rtol;
      failedAny |= !ok;
      llvm::outs() << "@" << name << ": " << (ok ? "ok" : "DIFFERS") << ", "
                   << expected.size() << " outputs on " << ranks
                   << " ranks, all-reduces "
                   << countOps(spmdFn, "shard.all_reduce") << ", all-gathers "
                   << countOps(spmdFn, "shard.all_gather")
                   << ", reduce-scatters "
                   << countOps(spmdFn, "shard.reduce_scatter")
                   << ", all-to-alls " << countOps(spmdFn, "shard.all_to_all")
                   << ", rel err " << llvm::format("%.1e", err);
      if (err > rtol)
        llvm::outs() << " (largest in " << worst << ")";
      llvm::outs() << "\n";
      return true;
    };
    if (!run(fwd, args))
      return 1;
    // The backward: the forward's arguments, its residuals, a drawn
    // cotangent per boundary output.
    std::map<std::string, HostTensor> bargs;
    for (unsigned i = 0; i < bwd.getNumArguments(); ++i) {
      std::string name = argName(bwd, i);
      if (args.count(name)) {
        bargs[name] = args[name];
        continue;
      }
      for (auto &[n, v] : out[fwdName])
        if (n == name)
          bargs[name] = v;
      if (!bargs.count(name))
        bargs[name] = drawn(bwd.getArgument(i).getType(), gen);
    }
    if (!run(bwd, bargs))
      return 1;
  }
  llvm::outs() << (failedAny ? "FAILED" : "ok") << "\n";
  return failedAny ? 1 : 0;
}
