// RUN: lamina-opt %s -split-input-file -graph-autodiff -graph-verify-train-step | FileCheck %s

// A weight shared by every batch: dW = x^T g with the batch dims folded
// into the contraction (one GEMM on [6, 4]^T x [6, 5]), no batched product
// and no reduction over the batch.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[W:.*]]: tensor<4x5xf32> {{.*}}, %[[X:.*]]: tensor<2x3x4xf32>
// CHECK: %[[X2:.*]] = graph.reshape %[[X]] : tensor<2x3x4xf32> to tensor<6x4xf32>
// CHECK: %[[G2:.*]] = graph.reshape %{{.*}} : tensor<2x3x5xf32> to tensor<6x5xf32>
// CHECK: %[[XT:.*]] = graph.transpose %[[X2]] {perm = array<i64: 1, 0>} : tensor<6x4xf32> -> tensor<4x6xf32>
// CHECK: %[[DW:.*]] = graph.matmul %[[XT]], %[[G2]] : (tensor<4x6xf32>, tensor<6x5xf32>) -> tensor<4x5xf32>
// CHECK-NOT: graph.reduce_sum
// CHECK: return %{{.*}}, %[[DW]]
func.func @forward(%w: tensor<4x5xf32> {graph.kind = "trainable", graph.name = "w"},
                   %x: tensor<2x3x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %1 = graph.tanh %0 : tensor<2x3x5xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x5xf32> -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// Three slices that split one tensor (q, k and v of a fused projection):
// their gradients are one concat of the three pieces, not three zero-padded
// full-size copies added together.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[GQ:.*]] = graph.mul
// CHECK: %[[GK:.*]] = graph.mul
// CHECK: %[[GV:.*]] = graph.mul
// CHECK-NOT: graph.add
// CHECK: %[[G:.*]] = graph.concat %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x6xf32>
// CHECK-NOT: graph.add
// CHECK: return %{{.*}}, %[[G]]
func.func @forward(%x: tensor<2x6xf32> {graph.kind = "trainable", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %q = graph.slice %x {sizes = array<i64: 2, 2>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<2x6xf32> -> tensor<2x2xf32>
  %k = graph.slice %x {sizes = array<i64: 2, 2>, starts = array<i64: 0, 2>, steps = array<i64: 1, 1>} : tensor<2x6xf32> -> tensor<2x2xf32>
  %v = graph.slice %x {sizes = array<i64: 2, 2>, starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : tensor<2x6xf32> -> tensor<2x2xf32>
  %qk = graph.mul %q, %k : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = graph.mul %qk, %v : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %l = graph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Overlapping slices really add.
// CHECK-LABEL: func.func @train_step
// CHECK: graph.concat
// CHECK: graph.concat
// CHECK: graph.add
func.func @forward(%x: tensor<6xf32> {graph.kind = "trainable", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %a = graph.slice %x {sizes = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : tensor<6xf32> -> tensor<4xf32>
  %b = graph.slice %x {sizes = array<i64: 4>, starts = array<i64: 2>, steps = array<i64: 1>} : tensor<6xf32> -> tensor<4xf32>
  %y = graph.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = graph.reduce_sum %y {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
