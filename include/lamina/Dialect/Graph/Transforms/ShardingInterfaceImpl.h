//===- ShardingInterfaceImpl.h - graph ops' sharding rules ------*- C++ -*-===//
//
// Upstream MLIR's ShardingInterface on graph ops, as external models, so
// that `sharding-propagation` and `shard-partition` (the `shard` dialect)
// split a graph function over a device grid: the first step of tensor
// parallelism (docs/tp-design.md). The models cover graph.matmul (batch,
// m and n parallel, k a sum: a split k leaves partial sums, all-reduced)
// and the broadcasting elementwise ops; ops without one stay replicated.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_GRAPH_TRANSFORMS_SHARDINGINTERFACEIMPL_H
#define LAMINA_DIALECT_GRAPH_TRANSFORMS_SHARDINGINTERFACEIMPL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace lamina::graph {

/// Attaches the sharding models to the graph ops when the graph dialect
/// loads.
void registerShardingInterfaceExternalModels(mlir::DialectRegistry &registry);

} // namespace lamina::graph

#endif // LAMINA_DIALECT_GRAPH_TRANSFORMS_SHARDINGINTERFACEIMPL_H
