// What the graph ops' sharding rules do not cover yet is refused with an
// error on the op, not mis-sized: upstream shards through projected
// permutations only, so a kept size-1 dimension (keepdims) or a size-1
// broadcast has no rule; a split the grid does not divide is refused.
// RUN: not lamina-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition))' -split-input-file 2>&1 | FileCheck %s

shard.grid @tp(shape = 2)
// CHECK: 'graph.reduce_sum' op cannot be partitioned: a size-1 dimension (keepdims, or a broadcast) has no sharding rule
func.func @keepdims(%logits: tensor<4x128xf32>) -> tensor<4x1xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %l = shard.shard %logits to %col : tensor<4x128xf32>
  %s = graph.reduce_sum %l {axes = array<i64: 1>, keepdims = true} : tensor<4x128xf32> -> tensor<4x1xf32>
  return %s : tensor<4x1xf32>
}

// -----

shard.grid @tp(shape = 2)
// CHECK: 'graph.gelu' op a sharding splits a dimension the grid does not divide
func.func @odd(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %xs = shard.shard %x to %col : tensor<4x3xf32>
  %g = graph.gelu %xs : tensor<4x3xf32>
  return %g : tensor<4x3xf32>
}
