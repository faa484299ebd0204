//===- OutlineTest.cpp - dist-outline-modules computes graph-autodiff's result -===//
//
// The per-module functions, chained the way a pipeline runs them (forwards
// in order, backwards in reverse, each backward seeded with the next one's
// boundary gradient), give the loss and parameter gradients of @train_step,
// with and without recompute. Evaluated on the reference evaluator, so the
// check is of the IR transformation alone (the runtime has its own tests).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Eval/Evaluator.h"
#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

using namespace mlir;
using lamina::eval::HostTensor;

namespace {
using Outputs = std::vector<std::pair<std::string, HostTensor>>;

std::string modelPath() {
  // unittests/Dialect/Dist -> test/Inputs/reference (a 2-block GPT-2).
  llvm::SmallString<256> path(llvm::sys::path::parent_path(__FILE__));
  llvm::sys::path::append(path, "..", "..", "..", "test");
  llvm::sys::path::append(path, "Inputs");
  llvm::sys::path::append(path, "reference", "tiny-gpt2.onnx");
  return std::string(path);
}

OwningOpRef<ModuleOp> load(MLIRContext &ctx) {
  lamina::onnx::ImportOptions options;
  return lamina::onnx::importModelFile(ctx, modelPath(), options);
}

std::map<std::string, HostTensor> byName(const Outputs &outs) {
  std::map<std::string, HostTensor> m;
  for (const auto &[name, t] : outs)
    m[name] = t;
  return m;
}

double maxRelDiff(const HostTensor &a, const HostTensor &b) {
  const float *x = static_cast<const float *>(a.data());
  const float *y = static_cast<const float *>(b.data());
  double scale = 1e-6, diff = 0;
  for (int64_t i = 0; i < a.numElements(); ++i) {
    scale = std::max(scale, double(std::fabs(y[i])));
    diff = std::max(diff, double(std::fabs(x[i] - y[i])));
  }
  return diff / scale;
}

void checkOutline(bool recompute) {
  DialectRegistry registry;
  lamina::onnx::registerImportDialects(registry);
  registry.insert<lamina::ir::dist::DistDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> reference = load(ctx), outlined = load(ctx);
  ASSERT_TRUE(reference && outlined);

  PassManager ad(&ctx);
  ad.addPass(lamina::ir::graph::createGraphAddLoss());
  ad.addPass(lamina::ir::graph::createGraphAutodiff());
  ASSERT_TRUE(succeeded(ad.run(*reference)));
  PassManager split(&ctx);
  split.addPass(lamina::ir::graph::createGraphAddLoss());
  lamina::ir::dist::DistOutlineModulesOptions options;
  options.recompute = recompute;
  split.addPass(lamina::ir::dist::createDistOutlineModules(options));
  ASSERT_TRUE(succeeded(split.run(*outlined)));
  auto numModules = (*outlined)->getAttrOfType<IntegerAttr>(
      lamina::ir::dist::DistDialect::kNumModulesAttr);
  ASSERT_TRUE(numModules);
  const int64_t L = numModules.getInt();
  ASSERT_EQ(L, 2); // one per block; embedding and head merged

  // Inputs: the weights of the file, random token ids.
  std::map<std::string, HostTensor> args;
  ASSERT_EQ(lamina::eval::loadInitializers(*reference, modelPath(), args,
                                           "train_step"),
            "");
  auto step = reference->lookupSymbol<func::FuncOp>("train_step");
  std::mt19937 rng(11);
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto kind =
        step.getArgAttrOfType<StringAttr>(i, lamina::ir::graph::kKindAttr);
    if (!kind || kind.getValue() != lamina::ir::graph::kKindInput)
      continue;
    auto type = cast<RankedTensorType>(step.getArgument(i).getType());
    HostTensor ids(lamina::rt::DType::I64,
                   {type.getShape().begin(), type.getShape().end()});
    for (int64_t j = 0; j < ids.numElements(); ++j)
      static_cast<int64_t *>(ids.data())[j] = int64_t(rng() % 32);
    args[step.getArgAttrOfType<StringAttr>(i, lamina::ir::graph::kNameAttr)
             .str()] = ids;
  }
  Outputs expected;
  ASSERT_EQ(lamina::eval::evaluate(*reference, args, expected, "train_step"), "");

  // The pipeline, one micro-batch: forwards, then backwards in reverse.
  std::map<std::string, HostTensor> values = args;
  std::vector<std::map<std::string, HostTensor>> residuals(L);
  for (int64_t k = 0; k < L; ++k) {
    Outputs outs;
    ASSERT_EQ(lamina::eval::evaluate(*outlined, values, outs,
                                     "fwd_" + std::to_string(k)),
              "");
    for (auto &[name, t] : outs)
      (name.rfind("residual:", 0) == 0 ? residuals[k] : values)[name] = t;
    if (!recompute)
      EXPECT_FALSE(residuals[k].empty()) << "module " << k;
    else
      EXPECT_TRUE(residuals[k].empty()) << "module " << k;
  }
  HostTensor seed(lamina::rt::DType::F32, {});
  *static_cast<float *>(seed.data()) = 1.0f;
  values["grad:loss"] = seed;
  std::map<std::string, HostTensor> grads;
  for (int64_t k = L - 1; k >= 0; --k) {
    std::map<std::string, HostTensor> in = values;
    for (auto &[name, t] : residuals[k])
      in[name] = t;
    Outputs outs;
    ASSERT_EQ(lamina::eval::evaluate(*outlined, in, outs,
                                     "bwd_" + std::to_string(k)),
              "");
    for (auto &[name, t] : outs) {
      if (name.rfind("grad:boundary:", 0) == 0) {
        values[name] = t; // the cotangent of the previous module
        continue;
      }
      auto it = grads.find(name);
      if (it == grads.end()) {
        grads[name] = t;
        continue;
      }
      // A parameter read by two modules (tied weights): gradients add.
      float *acc = static_cast<float *>(it->second.data());
      const float *add = static_cast<const float *>(t.data());
      for (int64_t j = 0; j < t.numElements(); ++j)
        acc[j] += add[j];
    }
  }

  std::map<std::string, HostTensor> want = byName(expected);
  EXPECT_LT(maxRelDiff(values.at("loss"), want.at("loss")), 1e-6);
  size_t compared = 0;
  for (const auto &[name, t] : want) {
    if (name.rfind("grad:", 0) != 0)
      continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(grads.count(name));
    EXPECT_LT(maxRelDiff(grads.at(name), t), 1e-5);
    ++compared;
  }
  EXPECT_EQ(compared, grads.size());
  EXPECT_GT(compared, 20u);
}
} // namespace

TEST(OutlineTest, RecomputeMatchesAutodiff) { checkOutline(true); }
TEST(OutlineTest, ResidualsMatchAutodiff) { checkOutline(false); }
