//===- ShardingInterfaceImpl.h - graph ops' sharding rules ------*- C++ -*-===//
//
// Upstream MLIR's ShardingInterface on graph ops, as external models, so
// that `sharding-propagation` and `shard-partition` (the `shard` dialect)
// split a graph function over a device grid: tensor parallelism
// (docs/tp-design.md). Every graph op has a model: GEMMs (a split
// contraction leaves partial sums, all-reduced), elementwise and layout
// ops, norms, attention on its heads, the vocabulary-parallel embedding,
// its gradient and the cross-entropy (lib/Dialect/Graph/Transforms/
// VocabParallel.cpp); an op with no rule for a split that reaches it is
// refused naming it.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_GRAPH_TRANSFORMS_SHARDINGINTERFACEIMPL_H
#define LAMINA_DIALECT_GRAPH_TRANSFORMS_SHARDINGINTERFACEIMPL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace lamina::ir::graph {

/// Attaches the sharding models to the graph ops when the graph dialect
/// loads.
void registerShardingInterfaceExternalModels(mlir::DialectRegistry &registry);

} // namespace lamina::ir::graph

#endif // LAMINA_DIALECT_GRAPH_TRANSFORMS_SHARDINGINTERFACEIMPL_H
