// What the graph ops' sharding rules do not cover yet is refused with an
// error on the op, not mis-computed: a split of a dim the op has no local
// form for (a norm's normalized axis; likewise a sliced dim, a concat's
// axis, attention's keys and head dim), and a split the grid does not
// divide.
// RUN: not lamina-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition))' -split-input-file 2>&1 | FileCheck %s

shard.grid @tp(shape = 2)
// CHECK: 'graph.layer_norm' op cannot be split on loop 1: the op has no local form for it
func.func @normalized(%x: tensor<4x128xf32>, %w: tensor<128xf32>) -> tensor<4x128xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %xs = shard.shard %x to %col : tensor<4x128xf32>
  %y = graph.layer_norm %xs, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x128xf32>, tensor<128xf32>
  return %y : tensor<4x128xf32>
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
