// RUN: lamina-opt %s -split-input-file -graph-fold-matmul-casts | FileCheck %s

// graph-fold-matmul-casts: the exact rewrites of the casts around gradients.

// The q, k and v gradients joined for a fused projection: each widened
// (through a reshape), concatenated in f32, then narrowed for the matmul.
// Becomes one narrow concat; the bias-gradient sum reads it into an f32
// result (the same f32 accumulation as of the widened copy, which goes) and
// the matmul reads it without a round trip.
// CHECK-LABEL: func.func @joined_gradients
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x2xbf16>, %[[K:.*]]: tensor<2x4x2xbf16>, %[[V:.*]]: tensor<2x8xbf16>
// CHECK: %[[RQ:.*]] = graph.reshape %[[Q]] : tensor<2x4x2xbf16> to tensor<2x8xbf16>
// CHECK: %[[RK:.*]] = graph.reshape %[[K]] : tensor<2x4x2xbf16> to tensor<2x8xbf16>
// CHECK: %[[C:.*]] = graph.concat %[[RQ]], %[[RK]], %[[V]] {axis = 1 : i64} : (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>) -> tensor<2x24xbf16>
// CHECK-NOT: graph.cast
// CHECK: graph.reduce_sum %[[C]] {axes = array<i64: 0>, keepdims = false} : tensor<2x24xbf16> -> tensor<24xf32>
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

// -----

// A sum and a mean of widened values read the narrow ones; the cast stays
// for its other reader. A max is not a sum (left alone), nor is a sum of an
// f32 value that was never narrow.
// CHECK-LABEL: func.func @reductions
// CHECK-SAME: (%[[X:.*]]: tensor<4x6xbf16>, %[[H:.*]]: tensor<4x6xf16>, %[[F:.*]]: tensor<4x6xf32>)
// CHECK: %[[W:.*]] = graph.cast %[[X]] : tensor<4x6xbf16> to tensor<4x6xf32>
// CHECK: graph.reduce_sum %[[X]] {axes = array<i64: 0>, keepdims = false} : tensor<4x6xbf16> -> tensor<6xf32>
// CHECK: graph.reduce_mean %[[H]] {axes = array<i64: 1>, keepdims = true} : tensor<4x6xf16> -> tensor<4x1xf32>
// CHECK: graph.reduce_max %[[W]]
// CHECK: graph.reduce_sum %[[F]]
func.func @reductions(%x: tensor<4x6xbf16>, %h: tensor<4x6xf16>, %f: tensor<4x6xf32>) -> (tensor<6xf32>, tensor<4x1xf32>, tensor<6xf32>, tensor<6xf32>, tensor<4x6xf32>) {
  %w = graph.cast %x : tensor<4x6xbf16> to tensor<4x6xf32>
  %wh = graph.cast %h : tensor<4x6xf16> to tensor<4x6xf32>
  %0 = graph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4x6xf32> -> tensor<6xf32>
  %1 = graph.reduce_mean %wh {axes = array<i64: 1>, keepdims = true} : tensor<4x6xf32> -> tensor<4x1xf32>
  %2 = graph.reduce_max %w {axes = array<i64: 0>, keepdims = false} : tensor<4x6xf32> -> tensor<6xf32>
  %3 = graph.reduce_sum %f {axes = array<i64: 0>, keepdims = false} : tensor<4x6xf32> -> tensor<6xf32>
  return %0, %1, %2, %3, %w : tensor<6xf32>, tensor<4x1xf32>, tensor<6xf32>, tensor<6xf32>, tensor<4x6xf32>
}

// -----

// A norm's f32 result only cast to bf16: the norm stores bf16 itself (its
// f32 value rounded once). One read elsewhere too keeps it f32.
// CHECK-LABEL: func.func @norms
// CHECK-NEXT: %[[L:.*]] = graph.layer_norm %arg0, %arg1, %arg1 {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[R:.*]] = graph.rms_norm %arg0, %arg1 {axis = 1 : i64, epsilon = {{.*}} : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf16>
// CHECK-NEXT: %[[K:.*]] = graph.layer_norm %arg0, %arg1 {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<8xf32>{{$}}
// CHECK-NEXT: %[[C:.*]] = graph.cast %[[K]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK-NEXT: return %[[L]], %[[R]], %[[C]], %[[K]]
func.func @norms(%x: tensor<4x8xf32>, %s: tensor<8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf16>, tensor<4x8xbf16>, tensor<4x8xf32>) {
  %l = graph.layer_norm %x, %s, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %lc = graph.cast %l : tensor<4x8xf32> to tensor<4x8xbf16>
  %r = graph.rms_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-6 : f64} : tensor<4x8xf32>, tensor<8xf32>
  %rc = graph.cast %r : tensor<4x8xf32> to tensor<4x8xf16>
  %k = graph.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>
  %kc = graph.cast %k : tensor<4x8xf32> to tensor<4x8xbf16>
  return %lc, %rc, %kc, %k : tensor<4x8xbf16>, tensor<4x8xf16>, tensor<4x8xbf16>, tensor<4x8xf32>
}
