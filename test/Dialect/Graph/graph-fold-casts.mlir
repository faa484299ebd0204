// RUN: lamina-opt %s -split-input-file -graph-fold-matmul-casts | FileCheck %s

// graph-fold-matmul-casts: the exact rewrites of the casts around gradients.

// The q, k and v gradients joined for a fused projection: each widened
// (through a reshape), concatenated in f32, then narrowed for the matmul.
// Becomes one narrow concat, widened once for the f32 reader; the matmul
// reads the narrow concat without a round trip.
// CHECK-LABEL: func.func @joined_gradients
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x2xbf16>, %[[K:.*]]: tensor<2x4x2xbf16>, %[[V:.*]]: tensor<2x8xbf16>
// CHECK: %[[RQ:.*]] = graph.reshape %[[Q]] : tensor<2x4x2xbf16> to tensor<2x8xbf16>
// CHECK: %[[RK:.*]] = graph.reshape %[[K]] : tensor<2x4x2xbf16> to tensor<2x8xbf16>
// CHECK: %[[C:.*]] = graph.concat %[[RQ]], %[[RK]], %[[V]] {axis = 1 : i64} : (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>) -> tensor<2x24xbf16>
// CHECK: %[[W:.*]] = graph.cast %[[C]] : tensor<2x24xbf16> to tensor<2x24xf32>
// CHECK: graph.reduce_sum %[[W]]
// CHECK: graph.matmul %[[C]], %{{.*}} : (tensor<2x24xbf16>, tensor<24x3xbf16>) -> tensor<2x3xf32>
// CHECK-NOT: graph.cast
func.func @joined_gradients(%q: tensor<2x4x2xbf16>, %k: tensor<2x4x2xbf16>, %v: tensor<2x8xbf16>, %w: tensor<24x3xbf16>) -> (tensor<24xf32>, tensor<2x3xf32>) {
  %wq = graph.cast %q : tensor<2x4x2xbf16> to tensor<2x4x2xf32>
  %wk = graph.cast %k : tensor<2x4x2xbf16> to tensor<2x4x2xf32>
  %wv = graph.cast %v : tensor<2x8xbf16> to tensor<2x8xf32>
  %rq = graph.reshape %wq : tensor<2x4x2xf32> to tensor<2x8xf32>
  %rk = graph.reshape %wk : tensor<2x4x2xf32> to tensor<2x8xf32>
  %c = graph.concat %rq, %rk, %wv {axis = 1 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x24xf32>
  %s = graph.reduce_sum %c {axes = array<i64: 0>, keepdims = false} : tensor<2x24xf32> -> tensor<24xf32>
  %n = graph.cast %c : tensor<2x24xf32> to tensor<2x24xbf16>
  %m = graph.matmul %n, %w : (tensor<2x24xbf16>, tensor<24x3xbf16>) -> tensor<2x3xbf16>
  %f = graph.cast %m : tensor<2x3xbf16> to tensor<2x3xf32>
  return %s, %f : tensor<24xf32>, tensor<2x3xf32>
}

// -----

// A concat with an input that is not a widened narrow value stays, and so
// does a narrowing of a value widened from another type.
// CHECK-LABEL: func.func @mixed
// CHECK: graph.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
// CHECK: %[[H:.*]] = graph.cast %{{.*}} : tensor<2xf16> to tensor<2xf32>
// CHECK: graph.cast %[[H]] : tensor<2xf32> to tensor<2xbf16>
func.func @mixed(%a: tensor<2xbf16>, %b: tensor<2xf32>, %h: tensor<2xf16>) -> (tensor<4xf32>, tensor<2xbf16>) {
  %wa = graph.cast %a : tensor<2xbf16> to tensor<2xf32>
  %c = graph.concat %wa, %b {axis = 0 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  %wh = graph.cast %h : tensor<2xf16> to tensor<2xf32>
  %n = graph.cast %wh : tensor<2xf32> to tensor<2xbf16>
  return %c, %n : tensor<4xf32>, tensor<2xbf16>
}
