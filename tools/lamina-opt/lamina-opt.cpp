//===- lamina-opt.cpp - mlir-opt for Lamina's dialects and passes ---------===//

#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Dialect/Graph/Transforms/ShardingInterfaceImpl.h"
#include "lamina/Dialect/Rt/IR/RtDialect.h"
#include "lamina/Dialect/Rt/Transforms/Passes.h"
#include "lamina/Pipeline/Pipeline.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<lamina::ir::dist::DistDialect,
                  lamina::ir::graph::GraphDialect, lamina::ir::rt::RtDialect,
                  mlir::func::FuncDialect, mlir::memref::MemRefDialect,
                  mlir::emitc::EmitCDialect, mlir::shard::ShardDialect>();
  // Upstream's sharding passes over the graph ops' sharding rules (the
  // tensor-parallel work, docs/tp-design.md).
  lamina::ir::graph::registerShardingInterfaceExternalModels(registry);
  mlir::shard::registerShardPasses();
  mlir::registerTransformsPasses();
  lamina::ir::graph::registerGraphPasses();
  lamina::ir::dist::registerDistPasses();
  lamina::ir::rt::registerRtPasses();
  lamina::registerConversionPasses();
  // lamina compile's phases: --lamina-graph ... --lamina-emitc.
  lamina::registerPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Lamina optimizer driver\n", registry));
}
