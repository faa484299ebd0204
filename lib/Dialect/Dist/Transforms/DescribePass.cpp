//===- DescribePass.cpp - print the planner's ModelDesc -------------------===//

#include "lamina/Dialect/Dist/Transforms/DescribeModel.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTDESCRIBEMODEL
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;

namespace {
const char *roleName(plan::ModuleRole role) {
  switch (role) {
  case plan::ModuleRole::Embedding:
    return "embedding";
  case plan::ModuleRole::Layer:
    return "layer";
  case plan::ModuleRole::Head:
    return "head";
  }
  return "?";
}

struct DistDescribeModel
    : ir::dist::impl::DistDescribeModelBase<DistDescribeModel> {
  using Base::Base;
  void runOnOperation() override {
    ir::dist::DescribeOptions options;
    options.moduleRegex = moduleRegex;
    options.functionName = functionName;
    FailureOr<plan::ModelDesc> desc =
        ir::dist::describeModel(getOperation(), options);
    if (failed(desc))
      return signalPassFailure();
    llvm::raw_ostream &os = llvm::outs();
    os << "model " << desc->name << ": " << desc->modules.size()
       << " modules by " << desc->discovery << ", micro-batch "
       << desc->microBatchSize << " x seq " << desc->seqLen << ", hidden "
       << desc->hidden << ", " << desc->totalParams() << " params\n";
    os << "shared inputs:";
    for (const std::string &s : desc->sharedInputs)
      os << " " << s;
    os << "\n";
    os << llvm::format("%-12s %-9s %4s %10s %12s %12s %12s %10s %10s %12s\n",
                       "module", "role", "body", "params", "fwd_flops",
                       "matmul_flops", "fwd_bytes", "in_bytes", "out_bytes",
                       "act_bytes");
    for (const plan::ModuleDesc &m : desc->modules)
      os << llvm::format("%-12s %-9s %4d %10lld %12.0f %12.0f %12.0f %10lld "
                         "%10lld %12lld\n",
                         m.name.c_str(), roleName(m.role), m.body,
                         (long long)m.params, m.forwardFlops, m.matmulFlops,
                         m.forwardBytes, (long long)m.inputBytes,
                         (long long)m.outputBytes,
                         (long long)m.activationBytes);
  }
};
} // namespace
