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

// Attention over heads, LLaMA's way (grouped-query: 4 query heads, 2
// key/value heads; a rotary table broadcast over batch and heads), seeded
// on the weights alone: q, k and v column-parallel, each rank keeps 2
// query heads and 1 key/value head (the contiguous split keeps each query
// head with its key/value head), the rotary table whole, the output
// projection row-parallel with one all-reduce.
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: tensor<2x16x32xf32>, %{{.*}}: tensor<16x32xf32>, %{{.*}}: tensor<8x32xf32>, %{{.*}}: tensor<8x32xf32>, %{{.*}}: tensor<32x16xf32>, %{{.*}}: tensor<1x1x16x8xf32>) -> tensor<2x16x32xf32>
// CHECK-NOT: shard.
// CHECK: graph.mul %{{.*}}, %{{.*}} : (tensor<2x2x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x2x16x8xf32>
// CHECK-NOT: shard.
// CHECK: graph.attention {{.*}} : (tensor<2x2x16x8xf32>, tensor<2x1x16x8xf32>, tensor<2x1x16x8xf32>) -> (tensor<2x2x16x8xf32>, tensor<2x2x16xf32>)
// CHECK-NOT: shard.
// CHECK: %[[Y:.*]] = graph.matmul %{{.*}}, %{{.*}} : (tensor<2x16x16xf32>, tensor<16x32xf32>) -> tensor<2x16x32xf32>
// CHECK-NEXT: %[[SUM:.*]] = shard.all_reduce %[[Y]] on @tp grid_axes = [0]
// CHECK-NEXT: return %[[SUM]]
func.func @attention(%x: tensor<2x16x32xf32>, %wq: tensor<32x32xf32>, %wk: tensor<16x32xf32>, %wv: tensor<16x32xf32>, %wo: tensor<32x32xf32>, %cos: tensor<1x1x16x8xf32>) -> tensor<2x16x32xf32> {
  %col = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %row = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %wqs = shard.shard %wq to %col : tensor<32x32xf32>
  %wks = shard.shard %wk to %col : tensor<16x32xf32>
  %wvs = shard.shard %wv to %col : tensor<16x32xf32>
  %wos = shard.shard %wo to %row : tensor<32x32xf32>
  %qt = graph.transpose %wqs {perm = array<i64: 1, 0>} : tensor<32x32xf32> -> tensor<32x32xf32>
  %q = graph.matmul %x, %qt : (tensor<2x16x32xf32>, tensor<32x32xf32>) -> tensor<2x16x32xf32>
  %kt = graph.transpose %wks {perm = array<i64: 1, 0>} : tensor<16x32xf32> -> tensor<32x16xf32>
  %k = graph.matmul %x, %kt : (tensor<2x16x32xf32>, tensor<32x16xf32>) -> tensor<2x16x16xf32>
  %vt = graph.transpose %wvs {perm = array<i64: 1, 0>} : tensor<16x32xf32> -> tensor<32x16xf32>
  %v = graph.matmul %x, %vt : (tensor<2x16x32xf32>, tensor<32x16xf32>) -> tensor<2x16x16xf32>
  %q4 = graph.reshape %q : tensor<2x16x32xf32> to tensor<2x16x4x8xf32>
  %qh = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x16x4x8xf32> -> tensor<2x4x16x8xf32>
  %qr = graph.mul %qh, %cos : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %k4 = graph.reshape %k : tensor<2x16x16xf32> to tensor<2x16x2x8xf32>
  %kh = graph.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x16x2x8xf32> -> tensor<2x2x16x8xf32>
  %v4 = graph.reshape %v : tensor<2x16x16xf32> to tensor<2x16x2x8xf32>
  %vh = graph.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x16x2x8xf32> -> tensor<2x2x16x8xf32>
  %o, %lse = graph.attention %qr, %kh, %vh {causal, scale = 0.35 : f64} : (tensor<2x4x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>)
  %ot = graph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x16x8xf32> -> tensor<2x16x4x8xf32>
  %o3 = graph.reshape %ot : tensor<2x16x4x8xf32> to tensor<2x16x32xf32>
  %wot = graph.transpose %wos {perm = array<i64: 1, 0>} : tensor<32x32xf32> -> tensor<32x32xf32>
  %y = graph.matmul %o3, %wot : (tensor<2x16x32xf32>, tensor<32x32xf32>) -> tensor<2x16x32xf32>
  return %y : tensor<2x16x32xf32>
}

// A sum over a split dim that keeps it (size 1): each rank's partial sum,
// all-reduced.
// CHECK-LABEL: func.func @keepdims(
// CHECK: graph.reduce_sum %{{.*}} {axes = array<i64: 1>, keepdims = true} : tensor<4x64xf32> -> tensor<4x1xf32>
// CHECK-NEXT: shard.all_reduce
func.func @keepdims(%logits: tensor<4x128xf32>) -> tensor<4x1xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %l = shard.shard %logits to %col : tensor<4x128xf32>
  %s = graph.reduce_sum %l {axes = array<i64: 1>, keepdims = true} : tensor<4x128xf32> -> tensor<4x1xf32>
  return %s : tensor<4x1xf32>
}

// A split of a dim the op has no local form for (a norm's normalized axis;
// likewise a sliced dim, a concat's axis, attention's keys) is read whole:
// the op's rule drops the split and partition all-gathers its input.
// CHECK-LABEL: func.func @normalized(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x64xf32>
// CHECK-NEXT: %[[G:.*]] = shard.all_gather %[[X]] on @tp grid_axes = [0] gather_axis = 1 : tensor<4x64xf32> -> tensor<4x128xf32>
// CHECK: graph.layer_norm {{.*}} : tensor<4x128xf32>, tensor<128xf32>
func.func @normalized(%x: tensor<4x128xf32>, %w: tensor<128xf32>) -> tensor<4x128xf32> {
  %col = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %xs = shard.shard %x to %col : tensor<4x128xf32>
  %y = graph.layer_norm %xs, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x128xf32>, tensor<128xf32>
  return %y : tensor<4x128xf32>
}
