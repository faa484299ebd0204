// The graph ops' sharding rules (upstream MLIR's ShardingInterface, as
// external models) under upstream's sharding-propagation and
// shard-partition: seeded with the weights' shardings only, a GPT-2 MLP
// splits as Megatron-LM splits it over a tensor-parallel group of 2. The
// first GEMM is column-parallel (its weight and bias split on the output
// dim, the hidden activations split, GELU on the shards); the second is
// row-parallel, each rank's product a partial sum, all-reduced once.
// Backward of a column-parallel layer: the input gradient is a partial sum
// over the split hidden dim, all-reduced; the weight and bias gradients
// stay on their shards. docs/tp-design.md.
// RUN: lamina-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition))' | FileCheck %s

shard.grid @tp(shape = 2)

// CHECK-LABEL: func.func @mlp(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x32xf32>, %[[W1:[^:]*]]: tensor<32x64xf32>, %[[B1:[^:]*]]: tensor<64xf32>, %[[W2:[^:]*]]: tensor<64x32xf32>) -> tensor<4x32xf32>
// CHECK-NEXT: %[[H:.*]] = graph.matmul %[[X]], %[[W1]] : (tensor<4x32xf32>, tensor<32x64xf32>) -> tensor<4x64xf32>
// CHECK-NEXT: %[[H1:.*]] = graph.add %[[H]], %[[B1]] : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
// CHECK-NEXT: %[[G:.*]] = graph.gelu %[[H1]] : tensor<4x64xf32>
// CHECK-NEXT: %[[Y:.*]] = graph.matmul %[[G]], %[[W2]] : (tensor<4x64xf32>, tensor<64x32xf32>) -> tensor<4x32xf32>
// CHECK-NEXT: %[[SUM:.*]] = shard.all_reduce %[[Y]] on @tp grid_axes = [0] : tensor<4x32xf32> -> tensor<4x32xf32>
// CHECK-NEXT: return %[[SUM]] : tensor<4x32xf32>
func.func @mlp(%x: tensor<4x32xf32>, %w1: tensor<32x128xf32>, %b1: tensor<128xf32>, %w2: tensor<128x32xf32>) -> tensor<4x32xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %vec = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %row = shard.sharding @tp split_axes = [[0], []] : !shard.sharding
  %w1s = shard.shard %w1 to %col : tensor<32x128xf32>
  %b1s = shard.shard %b1 to %vec : tensor<128xf32>
  %w2s = shard.shard %w2 to %row : tensor<128x32xf32>
  %h = graph.matmul %x, %w1s : (tensor<4x32xf32>, tensor<32x128xf32>) -> tensor<4x128xf32>
  %h1 = graph.add %h, %b1s : (tensor<4x128xf32>, tensor<128xf32>) -> tensor<4x128xf32>
  %g = graph.gelu %h1 : tensor<4x128xf32>
  %y = graph.matmul %g, %w2s : (tensor<4x128xf32>, tensor<128x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// CHECK-LABEL: func.func @column_backward(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x32xf32>, %[[W:[^:]*]]: tensor<32x64xf32>, %[[DH:[^:]*]]: tensor<4x64xf32>) -> (tensor<4x32xf32>, tensor<32x64xf32>, tensor<64xf32>)
// CHECK-NEXT: %[[WT:.*]] = graph.transpose %[[W]] {perm = array<i64: 1, 0>} : tensor<32x64xf32> -> tensor<64x32xf32>
// CHECK-NEXT: %[[DX:.*]] = graph.matmul %[[DH]], %[[WT]] : (tensor<4x64xf32>, tensor<64x32xf32>) -> tensor<4x32xf32>
// CHECK-NEXT: %[[DXS:.*]] = shard.all_reduce %[[DX]] on @tp grid_axes = [0]
// CHECK-NEXT: %[[XT:.*]] = graph.transpose %[[X]]
// CHECK-NEXT: %[[DW:.*]] = graph.matmul %[[XT]], %[[DH]] : (tensor<32x4xf32>, tensor<4x64xf32>) -> tensor<32x64xf32>
// CHECK-NEXT: %[[DB:.*]] = graph.reduce_sum %[[DH]] {axes = array<i64: 0>, keepdims = false} : tensor<4x64xf32> -> tensor<64xf32>
// CHECK-NEXT: return %[[DXS]], %[[DW]], %[[DB]]
func.func @column_backward(%x: tensor<4x32xf32>, %w1: tensor<32x128xf32>, %dh: tensor<4x128xf32>) -> (tensor<4x32xf32>, tensor<32x128xf32>, tensor<128xf32>) {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %vec = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %w1s = shard.shard %w1 to %col : tensor<32x128xf32>
  %dhs = shard.shard %dh to %col : tensor<4x128xf32>
  %wt = graph.transpose %w1s {perm = array<i64: 1, 0>} : tensor<32x128xf32> -> tensor<128x32xf32>
  %dx = graph.matmul %dhs, %wt : (tensor<4x128xf32>, tensor<128x32xf32>) -> tensor<4x32xf32>
  %xt = graph.transpose %x {perm = array<i64: 1, 0>} : tensor<4x32xf32> -> tensor<32x4xf32>
  %dw = graph.matmul %xt, %dhs : (tensor<32x4xf32>, tensor<4x128xf32>) -> tensor<32x128xf32>
  %db = graph.reduce_sum %dhs {axes = array<i64: 0>, keepdims = false} : tensor<4x128xf32> -> tensor<128xf32>
  %dws = shard.shard %dw to %col : tensor<32x128xf32>
  %dbs = shard.shard %db to %vec : tensor<128xf32>
  return %dx, %dws, %dbs : tensor<4x32xf32>, tensor<32x128xf32>, tensor<128xf32>
}

// A sum over a split dim: each rank's partial sum, all-reduced (the
// loss over vocabulary-split logits starts this way).
// CHECK-LABEL: func.func @sum_over_split(
// CHECK-NEXT: %[[S:.*]] = graph.reduce_sum %{{.*}} {axes = array<i64: 1>, keepdims = false} : tensor<4x64xf32> -> tensor<4xf32>
// CHECK-NEXT: shard.all_reduce %[[S]] on @tp grid_axes = [0] : tensor<4xf32> -> tensor<4xf32>
func.func @sum_over_split(%logits: tensor<4x128xf32>) -> tensor<4xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %l = shard.shard %logits to %col : tensor<4x128xf32>
  %s = graph.reduce_sum %l {axes = array<i64: 1>, keepdims = false} : tensor<4x128xf32> -> tensor<4xf32>
  return %s : tensor<4xf32>
}
