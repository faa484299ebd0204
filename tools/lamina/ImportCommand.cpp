//===- ImportCommand.cpp - lamina import ----------------------------------===//
//
// Imports an ONNX model, checks phase contract 1 (graph-verify-imported) and
// writes the IR atomically: on any error nothing is written.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace lamina::tool {
cl::SubCommand importCommand("import", "Import an ONNX model into the graph dialect");
static cl::opt<std::string> inputPath(cl::Positional, cl::desc("MODEL.onnx"),
                                      cl::Required, cl::sub(importCommand));
static cl::list<std::string> dims("dim", cl::desc("bind a symbolic dim"),
                                  cl::value_desc("NAME=VALUE"),
                                  cl::sub(importCommand));
static cl::opt<std::string> outputPath("o", cl::desc("write the IR here ('-': stdout)"),
                                       cl::value_desc("OUT.mlir"),
                                       cl::init("-"), cl::sub(importCommand));
static cl::opt<bool> summary("summary",
                             cl::desc("print a summary instead of the IR"),
                             cl::sub(importCommand));
static cl::opt<bool> timing("timing",
                            cl::desc("print the time of each phase to stderr"),
                            cl::sub(importCommand));
static cl::opt<bool> locations("print-locations",
                               cl::desc("print each op's location (its ONNX node)"),
                               cl::sub(importCommand));
static cl::opt<bool> structureOnly(
    "structure-only",
    cl::desc("accept weights whose external data file does not exist "
             "(shapes only, as `lamina plan` needs)"),
    cl::sub(importCommand));

/// Human-readable element counts: 124.4M.
static std::string humanCount(double n) {
  const char *suffix[] = {"", "K", "M", "B", "T"};
  int i = 0;
  while (n >= 1000 && i < 4) {
    n /= 1000;
    ++i;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format(i ? "%.1f%s" : "%.0f%s", n, suffix[i]);
  return s;
}

static void printSummary(ModuleOp module, llvm::raw_ostream &os) {
  for (auto func : module.getOps<func::FuncOp>()) {
    os << "function @" << func.getName() << "\n";
    int64_t params[3] = {0, 0, 0}, elements[3] = {0, 0, 0};
    os << "  inputs:\n";
    for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
      auto kind = func.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
      auto name = func.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr);
      auto type = cast<RankedTensorType>(arg.getType());
      int k = kind.getValue() == ir::graph::kKindInput       ? 0
              : kind.getValue() == ir::graph::kKindTrainable ? 1
                                                             : 2;
      ++params[k];
      elements[k] += type.getNumElements();
      if (k == 0)
        os << "    " << name.getValue() << ": " << type << "\n";
    }
    auto names = func->getAttrOfType<ArrayAttr>(ir::graph::kOutputNamesAttr);
    os << "  outputs:\n";
    for (auto [name, type] : llvm::zip(names, func.getResultTypes()))
      os << "    " << cast<StringAttr>(name).getValue() << ": " << type << "\n";
    os << "  parameters: " << params[1] << " trainable ("
       << humanCount(elements[1]) << " values), " << params[2]
       << " constant (" << humanCount(elements[2]) << " values)\n";
    llvm::MapVector<StringRef, int> histogram;
    int total = 0;
    int64_t flops = 0, matmulFlops = 0, bytes = 0;
    func.walk([&](ir::graph::CostOpInterface op) {
      ++histogram[op->getName().getStringRef()];
      ++total;
      flops += op.getFlops();
      bytes += op.getBytesAccessed();
      if (isa<ir::graph::MatMulOp>(op))
        matmulFlops += op.getFlops();
    });
    os << "  forward cost: " << flops << " FLOPs (" << matmulFlops
       << " in matmul), " << humanCount(bytes) << "B accessed\n";
    SmallVector<std::pair<StringRef, int>> sorted(histogram.begin(), histogram.end());
    llvm::sort(sorted, [](auto &a, auto &b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    os << "  ops: " << total << "\n";
    for (auto [name, count] : sorted)
      os << llvm::format("    %-22s %d\n", name.str().c_str(), count);
  }
}

int runImport() {
  DialectRegistry registry;
  onnx::registerImportDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  installDiagnosticPrinter(context);

  onnx::ImportOptions options;
  options.allowMissingExternalData = structureOnly;
  llvm::BumpPtrAllocator alloc;
  llvm::StringSaver saver(alloc);
  if (std::string err = onnx::parseDimBindings(dims, options, saver); !err.empty()) {
    llvm::errs() << "lamina import: " << err << "\n";
    return 2;
  }
  DefaultTimingManager tm;
  tm.setEnabled(timing);
  TimingScope root = tm.getRootScope();
  TimingScope importTimer = root.nest("import (parse, fold, verify)");
  OwningOpRef<ModuleOp> module = onnx::importModelFile(context, inputPath, options);
  importTimer.stop();
  if (!module)
    return 1;
  // The importer verified the module; graph-verify-imported changes nothing,
  // so neither it nor the printer needs to verify again.
  PassManager pm(&context);
  pm.enableVerifier(false);
  TimingScope verifyTimer = root.nest("graph-verify-imported");
  pm.enableTiming(verifyTimer);
  pm.addNestedPass<func::FuncOp>(ir::graph::createGraphVerifyImported());
  if (failed(pm.run(*module)))
    return 1;

  TimingScope writeTimer = root.nest("write output");
  auto write = [&](llvm::raw_ostream &os) -> llvm::Error {
    if (summary) {
      os << "model " << inputPath << "\n";
      printSummary(*module, os);
    } else {
      OpPrintingFlags flags;
      flags.assumeVerified();
      if (locations)
        flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false).useLocalScope();
      module->print(os, flags);
    }
    return llvm::Error::success();
  };
  // writeToOutput writes a temporary file and renames it: no half-written
  // output on failure.
  if (llvm::Error err = llvm::writeToOutput(outputPath, write)) {
    llvm::errs() << "lamina import: cannot write '" << outputPath
                 << "': " << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  return 0;
}
} // namespace lamina::tool
