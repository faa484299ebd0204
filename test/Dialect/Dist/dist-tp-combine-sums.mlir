// dist-tp-combine-sums: the sum of all-reduced partial sums (attention's
// q, k and v input gradients) becomes one all-reduce of their sum; an
// all-reduce read elsewhere too, or over other axes, stays.
// RUN: lamina-opt %s -dist-tp-combine-sums | FileCheck %s

shard.grid @tp(shape = 2)
shard.grid @other(shape = 2)

// CHECK-LABEL: func.func @three(
// CHECK-SAME: %[[A:[^:]*]]: tensor<4x8xf32>, %[[B:[^:]*]]: tensor<4x8xf32>, %[[C:[^:]*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[AB:.*]] = graph.add %[[A]], %[[B]]
// CHECK-NEXT: %[[ABC:.*]] = graph.add %[[AB]], %[[C]]
// CHECK-NEXT: %[[SUM:.*]] = shard.all_reduce %[[ABC]] on @tp grid_axes = [0]
// CHECK-NEXT: return %[[SUM]]
func.func @three(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %ra = shard.all_reduce %a on @tp grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %rb = shard.all_reduce %b on @tp grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %rc = shard.all_reduce %c on @tp grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %ab = graph.add %ra, %rb : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %abc = graph.add %ab, %rc : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %abc : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-2: shard.all_reduce
// CHECK: graph.add
// CHECK-NOT: shard.all_reduce
// CHECK: return
func.func @kept(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %ra = shard.all_reduce %a on @tp grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %rb = shard.all_reduce %b on @tp grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %ab = graph.add %ra, %rb : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %ab, %ra : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @grids(
// CHECK-COUNT-2: shard.all_reduce
// CHECK: graph.add
func.func @grids(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %ra = shard.all_reduce %a on @tp grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %rb = shard.all_reduce %b on @other grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %ab = graph.add %ra, %rb : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %ab : tensor<4x8xf32>
}
