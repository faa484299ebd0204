// A split the grid does not divide is refused with an error on the op,
// not mis-sized. (A split of a dim an op has no local form for is read
// whole instead: sharding-interface.mlir's @normalized.)
// RUN: not lamina-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition))' 2>&1 | FileCheck %s

shard.grid @tp(shape = 2)
// CHECK: 'graph.gelu' op a sharding splits a dimension the grid does not divide
func.func @odd(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %xs = shard.shard %x to %col : tensor<4x3xf32>
  %g = graph.gelu %xs : tensor<4x3xf32>
  return %g : tensor<4x3xf32>
}
