//===- lamina-opt.cpp - mlir-opt for Lamina's dialects and passes ---------===//

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<lamina::graph::GraphDialect, mlir::func::FuncDialect>();
  mlir::registerTransformsPasses();
  lamina::graph::registerGraphPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Lamina optimizer driver\n", registry));
}
