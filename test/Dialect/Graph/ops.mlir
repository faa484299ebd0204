// RUN: lamina-opt %s | FileCheck %s
// RUN: lamina-opt %s | lamina-opt | FileCheck %s
// RUN: lamina-opt -mlir-print-op-generic %s | lamina-opt | FileCheck %s

// CHECK-LABEL: func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<2x3xi64>) -> tensor<2x3xf32> {
  // CHECK: graph.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = graph.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = graph.sub %0, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = graph.mul %1, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %3 = graph.div %2, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %4 = graph.pow %3, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %5 = graph.min %4, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = graph.max %5, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = graph.neg %6 : tensor<2x3xf32>
  %8 = graph.abs %7 : tensor<2x3xf32>
  %9 = graph.exp %8 : tensor<2x3xf32>
  %10 = graph.log %9 : tensor<2x3xf32>
  %11 = graph.sqrt %10 : tensor<2x3xf32>
  %12 = graph.reciprocal %11 : tensor<2x3xf32>
  %13 = graph.tanh %12 : tensor<2x3xf32>
  %14 = graph.erf %13 : tensor<2x3xf32>
  %15 = graph.sigmoid %14 : tensor<2x3xf32>
  %16 = graph.relu %15 : tensor<2x3xf32>
  %17 = graph.cos %16 : tensor<2x3xf32>
  %18 = graph.sin %17 : tensor<2x3xf32>
  // CHECK: graph.gelu %{{.*}} {tanh} : tensor<2x3xf32>
  %19 = graph.gelu %18 {tanh} : tensor<2x3xf32>
  // CHECK: graph.greater %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %c = graph.greater %19, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %d = graph.less_equal %19, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  %e = graph.and %c, %d : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %f = graph.or %e, %c : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %g = graph.not %f : tensor<2x3xi1>
  %h = graph.equal %i, %i : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi1>
  %k = graph.and %g, %h : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: graph.select %{{.*}} : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %r = graph.select %k, %19, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.cast %{{.*}} : tensor<2x3xi64> to tensor<2x3xf32>
  %s = graph.cast %i : tensor<2x3xi64> to tensor<2x3xf32>
  %t = graph.add %r, %s : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %t : tensor<2x3xf32>
}

// CHECK-LABEL: func @nn
func.func @nn(%x: tensor<4x8x16xf32>, %w: tensor<16x32xf32>, %s: tensor<16xf32>) -> tensor<4x8x32xf32> {
  // CHECK: graph.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 1.000000e-05 : f64}
  %0 = graph.layer_norm %x, %s, %s {axis = 2 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: graph.layer_norm %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8x16xf32>, tensor<16xf32>
  %1 = graph.layer_norm %0, %s {axis = 2 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8x16xf32>, tensor<16xf32>
  %2 = graph.rms_norm %1, %s {axis = 2 : i64, epsilon = 1.0e-6 : f64} : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: graph.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8x16xf32>, tensor<16xf32> -> tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  %gx:3 = graph.layer_norm_grad %x, %s, %0 {axis = 2 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8x16xf32>, tensor<16xf32> -> tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: graph.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8x16xf32>, tensor<16xf32> -> tensor<4x8x16xf32>, tensor<16xf32>{{$}}
  %gy:2 = graph.layer_norm_grad %x, %s, %0 {axis = 2 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8x16xf32>, tensor<16xf32> -> tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: graph.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = {{.*}} : f64} : tensor<4x8x16xf32>, tensor<16xf32>{{$}}
  %gz:2 = graph.rms_norm_grad %x, %s, %0 {axis = 2 : i64, epsilon = 1.0e-6 : f64} : tensor<4x8x16xf32>, tensor<16xf32>
  // A narrow result gradient of an f32 input is spelled after the types.
  %nb = graph.cast %0 : tensor<4x8x16xf32> to tensor<4x8x16xbf16>
  // CHECK: graph.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8x16xf32>, tensor<16xf32>, dy tensor<4x8x16xbf16> -> tensor<4x8x16xf32>, tensor<16xf32>{{$}}
  %gn:2 = graph.layer_norm_grad %x, %s, %nb {axis = 2 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8x16xf32>, tensor<16xf32>, dy tensor<4x8x16xbf16> -> tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: graph.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = {{.*}} : f64} : tensor<4x8x16xf32>, tensor<16xf32>, dy tensor<4x8x16xbf16>{{$}}
  %gr:2 = graph.rms_norm_grad %x, %s, %nb {axis = 2 : i64, epsilon = 1.0e-6 : f64} : tensor<4x8x16xf32>, tensor<16xf32>, dy tensor<4x8x16xbf16>
  // CHECK: graph.matmul %{{.*}}, %{{.*}} : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %3 = graph.matmul %2, %w : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %4 = graph.softmax %3 {axis = 2 : i64} : tensor<4x8x32xf32>
  %5 = graph.log_softmax %4 {axis = 1 : i64} : tensor<4x8x32xf32>
  // CHECK: graph.softmax_grad %{{.*}}, %{{.*}} {axis = 2 : i64} : tensor<4x8x32xf32>
  %sg = graph.softmax_grad %4, %3 {axis = 2 : i64} : tensor<4x8x32xf32>
  // CHECK: graph.log_softmax_grad %{{.*}}, %{{.*}} {axis = 1 : i64} : tensor<4x8x32xf32>
  %lg = graph.log_softmax_grad %5, %sg {axis = 1 : i64} : tensor<4x8x32xf32>
  // CHECK: graph.reduce_mean %{{.*}} {axes = array<i64: 2>, keepdims = true} : tensor<4x8x32xf32> -> tensor<4x8x1xf32>
  %6 = graph.reduce_mean %5 {axes = array<i64: 2>, keepdims = true} : tensor<4x8x32xf32> -> tensor<4x8x1xf32>
  %7 = graph.reduce_sum %5 {axes = array<i64: 0, 2>, keepdims = false} : tensor<4x8x32xf32> -> tensor<8xf32>
  %8 = graph.reduce_max %5 {axes = array<i64: 1>, keepdims = false} : tensor<4x8x32xf32> -> tensor<4x32xf32>
  %9 = graph.reduce_prod %8 {axes = array<i64: 1>, keepdims = false} : tensor<4x32xf32> -> tensor<4xf32>
  %10 = graph.cumsum %5 {axis = 1 : i64, exclusive} : tensor<4x8x32xf32>
  %11 = graph.sub %10, %6 : (tensor<4x8x32xf32>, tensor<4x8x1xf32>) -> tensor<4x8x32xf32>
  return %11 : tensor<4x8x32xf32>
}

// CHECK-LABEL: func @movement
func.func @movement(%x: tensor<2x3x4xf32>, %ids: tensor<5xi64>, %table: tensor<10x4xf32>) -> tensor<5x4xf32> {
  // CHECK: graph.constant dense<[1, 2]> : tensor<2xi64>
  %c = graph.constant dense<[1, 2]> : tensor<2xi64>
  %0 = graph.reshape %x : tensor<2x3x4xf32> to tensor<6x4xf32>
  // CHECK: graph.transpose %{{.*}} {perm = array<i64: 1, 0>} : tensor<6x4xf32> -> tensor<4x6xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : tensor<6x4xf32> -> tensor<4x6xf32>
  %2 = graph.concat %1, %1 {axis = 1 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  // CHECK: graph.slice %{{.*}} {sizes = array<i64: 4, 6>, starts = array<i64: 0, 11>, steps = array<i64: 1, -2>} : tensor<4x12xf32> -> tensor<4x6xf32>
  %3 = graph.slice %2 {starts = array<i64: 0, 11>, sizes = array<i64: 4, 6>, steps = array<i64: 1, -2>} : tensor<4x12xf32> -> tensor<4x6xf32>
  %4 = graph.broadcast %3 : tensor<4x6xf32> to tensor<2x4x6xf32>
  %5 = graph.tile %4 {repeats = array<i64: 1, 2, 1>} : tensor<2x4x6xf32> -> tensor<2x8x6xf32>
  %6 = graph.trilu %5 {k = 0 : i64, upper} : tensor<2x8x6xf32>
  // CHECK: graph.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
  %7 = graph.gather %table, %ids {axis = 0 : i64} : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
  %idx = graph.reshape %ids : tensor<5xi64> to tensor<5x1xi64>
  %8 = graph.gather_nd %table, %idx {batch_dims = 0 : i64} : (tensor<10x4xf32>, tensor<5x1xi64>) -> tensor<5x4xf32>
  %9 = graph.scatter_nd %table, %idx, %8 {reduction = "add"} : (tensor<10x4xf32>, tensor<5x1xi64>, tensor<5x4xf32>) -> tensor<10x4xf32>
  %10 = graph.gather %9, %ids {axis = 0 : i64} : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
  return %10 : tensor<5x4xf32>
}

// CHECK-LABEL: func @params
// CHECK-SAME: graph.kind = "trainable"
// CHECK-SAME: graph.output_names = ["y"]
func.func @params(%w: tensor<4xf32> {graph.name = "w", graph.kind = "trainable"},
                  %x: tensor<4xf32> {graph.name = "x", graph.kind = "input"}) -> tensor<4xf32>
    attributes {graph.output_names = ["y"]} {
  %0 = graph.mul %w, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func @fused
// CHECK: graph.fused_elementwise %{{.*}}, %{{.*}} {lhs = array<i64: 0, 2>, ops = ["add", "gelu_tanh"], rhs = array<i64: 1, -1>} : (tensor<2x3xf16>, tensor<3xf16>) -> tensor<2x3xf16>
func.func @fused(%a: tensor<2x3xf16>, %b: tensor<3xf16>) -> tensor<2x3xf16> {
  %0 = graph.fused_elementwise %a, %b {ops = ["add", "gelu_tanh"], lhs = array<i64: 0, 2>, rhs = array<i64: 1, -1>} : (tensor<2x3xf16>, tensor<3xf16>) -> tensor<2x3xf16>
  return %0 : tensor<2x3xf16>
}

// A chain with its sum over the leading dims, and the step-less form.
// CHECK-LABEL: func @fused_sum
// CHECK: graph.fused_elementwise %{{.*}}, %{{.*}} {lhs = array<i64: 0>, ops = ["mul"], rhs = array<i64: 1>} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xbf16>, tensor<4xf32>)
// CHECK: graph.fused_elementwise %{{.*}} {lhs = array<i64>, ops = [], rhs = array<i64>} : (tensor<2x3x4xf32>) -> (tensor<2x3x4xbf16>, tensor<3x4xf32>)
func.func @fused_sum(%a: tensor<2x3x4xf32>, %b: tensor<2x3x4xf32>) -> (tensor<2x3x4xbf16>, tensor<4xf32>, tensor<2x3x4xbf16>, tensor<3x4xf32>) {
  %0, %1 = graph.fused_elementwise %a, %b {ops = ["mul"], lhs = array<i64: 0>, rhs = array<i64: 1>} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xbf16>, tensor<4xf32>)
  %2, %3 = graph.fused_elementwise %a {ops = [], lhs = array<i64>, rhs = array<i64>} : (tensor<2x3x4xf32>) -> (tensor<2x3x4xbf16>, tensor<3x4xf32>)
  return %0, %1, %2, %3 : tensor<2x3x4xbf16>, tensor<4xf32>, tensor<2x3x4xbf16>, tensor<3x4xf32>
}

// Attention on a packed q/k/v projection (4 query heads, 2 kv heads, D 8:
// 64 columns) and its gradient.
// CHECK-LABEL: func @packed_attention
// CHECK: %[[O:.*]], %[[L:.*]] = graph.packed_attention %{{.*}} {causal, heads = 4 : i64, kv_heads = 2 : i64, scale = 2.500000e-01 : f64} : (tensor<2x5x64xbf16>) -> (tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>)
// CHECK: graph.packed_attention_grad %{{.*}}, %[[O]], %[[L]], %{{.*}} {causal, heads = 4 : i64, kv_heads = 2 : i64, scale = 2.500000e-01 : f64} : (tensor<2x5x64xbf16>, tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>, tensor<2x5x4x8xbf16>) -> tensor<2x5x64xbf16>
func.func @packed_attention(%x: tensor<2x5x64xbf16>, %g: tensor<2x5x4x8xbf16>) -> tensor<2x5x64xbf16> {
  %o, %l = graph.packed_attention %x {causal, heads = 4 : i64, kv_heads = 2 : i64, scale = 0.25 : f64} : (tensor<2x5x64xbf16>) -> (tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>)
  %d = graph.packed_attention_grad %x, %o, %l, %g {causal, heads = 4 : i64, kv_heads = 2 : i64, scale = 0.25 : f64} : (tensor<2x5x64xbf16>, tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>, tensor<2x5x4x8xbf16>) -> tensor<2x5x64xbf16>
  return %d : tensor<2x5x64xbf16>
}

// Fused attention: grouped-query (4 query heads, 2 kv heads), Dv != D,
// causal, with and without an additive bias; lse is f32 for f16 operands
// and f64 for f64 ones.
// CHECK-LABEL: func @attention
func.func @attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x32xf32>,
                     %bias: tensor<2x1x1x8xf32>, %g: tensor<2x4x8x32xf32>,
                     %qh: tensor<1x2x4x8xf16>, %qd: tensor<1x2x3x8xf64>, %kd: tensor<1x1x5x8xf64>)
    -> (tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x4x8x16xf32>, tensor<1x2x4x8xf16>, tensor<1x2x3xf64>) {
  // CHECK: %[[O:.*]], %[[L:.*]] = graph.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>) -> (tensor<2x4x8x32xf32>, tensor<2x4x8xf32>)
  %o, %lse = graph.attention %q, %k, %v {causal, scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>) -> (tensor<2x4x8x32xf32>, tensor<2x4x8xf32>)
  // CHECK: %[[OB:.*]], %[[LB:.*]] = graph.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x32xf32>, tensor<2x4x8xf32>)
  %ob, %lseb = graph.attention %q, %k, %v, %bias {scale = 0.125 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x32xf32>, tensor<2x4x8xf32>)
  // CHECK: graph.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[L]], %{{.*}} {causal, scale = 2.500000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8xf32>, tensor<2x4x8x32xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>)
  %gq, %gk, %gv = graph.attention_grad %q, %k, %v, %o, %lse, %g {causal, scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8xf32>, tensor<2x4x8x32xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>)
  // CHECK: graph.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[OB]], %[[LB]], %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8xf32>, tensor<2x4x8x32xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>)
  %gqb, %gkb, %gvb = graph.attention_grad %q, %k, %v, %ob, %lseb, %g, %bias {scale = 0.125 : f64} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8xf32>, tensor<2x4x8x32xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>)
  // CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f64} : (tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>) -> (tensor<1x2x4x8xf16>, tensor<1x2x4xf32>)
  %oh, %lseh = graph.attention %qh, %qh, %qh {scale = 1.0 : f64} : (tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>) -> (tensor<1x2x4x8xf16>, tensor<1x2x4xf32>)
  // Sq = 3 < Sk = 5, 2 query heads on one kv head.
  // CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 5.000000e-01 : f64} : (tensor<1x2x3x8xf64>, tensor<1x1x5x8xf64>, tensor<1x1x5x8xf64>) -> (tensor<1x2x3x8xf64>, tensor<1x2x3xf64>)
  %od, %lsed = graph.attention %qd, %kd, %kd {causal, scale = 0.5 : f64} : (tensor<1x2x3x8xf64>, tensor<1x1x5x8xf64>, tensor<1x1x5x8xf64>) -> (tensor<1x2x3x8xf64>, tensor<1x2x3xf64>)
  return %o, %ob, %gq, %gk, %gv, %gqb, %oh, %lsed : tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x32xf32>, tensor<2x4x8x16xf32>, tensor<1x2x4x8xf16>, tensor<1x2x3xf64>
}

// Vision: a grouped, strided, dilated convolution with a bias and its two
// gradients; a 1-D convolution; the pools (ceil_mode, count_include_pad)
// and their gradients.
// CHECK-LABEL: func @vision
func.func @vision(%x: tensor<2x4x7x7xf32>, %w: tensor<6x2x3x3xf32>, %b: tensor<6xf32>,
                  %g: tensor<2x6x2x3xf32>, %x1: tensor<1x2x9xf64>, %w1: tensor<3x2x3xf64>,
                  %gp: tensor<2x4x4x4xf32>)
    -> (tensor<2x6x2x3xf32>, tensor<2x4x7x7xf32>, tensor<6x2x3x3xf32>, tensor<1x3x4xf64>,
        tensor<2x4x7x7xf32>, tensor<2x4x7x7xf32>, tensor<2x4x4x4xf32>) {
  // CHECK: graph.conv %{{.*}}, %{{.*}}, %{{.*}} {dilations = array<i64: 2, 1>, group = 2 : i64, pads = array<i64: 1, 0, 0, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x2x3xf32>
  %y = graph.conv %x, %w, %b {dilations = array<i64: 2, 1>, group = 2 : i64, pads = array<i64: 1, 0, 0, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x2x3xf32>
  // CHECK: graph.conv_grad_input %{{.*}}, %{{.*}} {{{.*}}group = 2 : i64{{.*}}} : (tensor<6x2x3x3xf32>, tensor<2x6x2x3xf32>) -> tensor<2x4x7x7xf32>
  %dx = graph.conv_grad_input %w, %g {dilations = array<i64: 2, 1>, group = 2 : i64, pads = array<i64: 1, 0, 0, 1>, strides = array<i64: 2, 2>} : (tensor<6x2x3x3xf32>, tensor<2x6x2x3xf32>) -> tensor<2x4x7x7xf32>
  // CHECK: graph.conv_grad_weight %{{.*}}, %{{.*}} {{{.*}}} : (tensor<2x4x7x7xf32>, tensor<2x6x2x3xf32>) -> tensor<6x2x3x3xf32>
  %dw = graph.conv_grad_weight %x, %g {dilations = array<i64: 2, 1>, group = 2 : i64, pads = array<i64: 1, 0, 0, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<2x6x2x3xf32>) -> tensor<6x2x3x3xf32>
  // CHECK: graph.conv %{{.*}}, %{{.*}} {{{.*}}} : (tensor<1x2x9xf64>, tensor<3x2x3xf64>) -> tensor<1x3x4xf64>
  %y1 = graph.conv %x1, %w1 {dilations = array<i64: 1>, group = 1 : i64, pads = array<i64: 0, 0>, strides = array<i64: 2>} : (tensor<1x2x9xf64>, tensor<3x2x3xf64>) -> tensor<1x3x4xf64>
  // CHECK: graph.max_pool %{{.*}} {ceil_mode, {{.*}}} : tensor<2x4x7x7xf32> -> tensor<2x4x4x4xf32>
  %m = graph.max_pool %x {ceil_mode, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<2x4x7x7xf32> -> tensor<2x4x4x4xf32>
  // CHECK: graph.max_pool_grad %{{.*}}, %{{.*}} {ceil_mode, {{.*}}} : tensor<2x4x7x7xf32>, tensor<2x4x4x4xf32>
  %dm = graph.max_pool_grad %x, %gp {ceil_mode, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<2x4x7x7xf32>, tensor<2x4x4x4xf32>
  // CHECK: graph.avg_pool %{{.*}} {count_include_pad, {{.*}}} : tensor<2x4x7x7xf32> -> tensor<2x4x4x4xf32>
  %a = graph.avg_pool %x {count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<2x4x7x7xf32> -> tensor<2x4x4x4xf32>
  // CHECK: graph.avg_pool_grad %{{.*}} {count_include_pad, {{.*}}} : tensor<2x4x4x4xf32> -> tensor<2x4x7x7xf32>
  %da = graph.avg_pool_grad %gp {count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<2x4x4x4xf32> -> tensor<2x4x7x7xf32>
  return %y, %dx, %dw, %y1, %dm, %da, %a : tensor<2x6x2x3xf32>, tensor<2x4x7x7xf32>, tensor<6x2x3x3xf32>, tensor<1x3x4xf64>, tensor<2x4x7x7xf32>, tensor<2x4x7x7xf32>, tensor<2x4x4x4xf32>
}

// CHECK-LABEL: func @mixture_of_experts
func.func @mixture_of_experts(%x: tensor<5x3xf32>, %l: tensor<5x3xf32>, %gu: tensor<3x4x3xf32>, %d: tensor<3x3x2xf32>, %g: tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<5x3xf32>, tensor<5x2xf32>, tensor<3x4x3xf32>, tensor<3x3x2xf32>) {
  // CHECK: graph.topk %{{.*}} {k = 2 : i64} : (tensor<5x3xf32>) -> (tensor<5x2xf32>, tensor<5x2xi64>)
  %v, %i = graph.topk %l {k = 2 : i64} : (tensor<5x3xf32>) -> (tensor<5x2xf32>, tensor<5x2xi64>)
  // CHECK: graph.moe
  %y = graph.moe %x, %i, %v, %gu, %d : (tensor<5x3xf32>, tensor<5x2xi64>, tensor<5x2xf32>, tensor<3x4x3xf32>, tensor<3x3x2xf32>) -> tensor<5x3xf32>
  // CHECK: graph.moe_grad
  %gx, %gw, %ggu, %gd = graph.moe_grad %x, %i, %v, %gu, %d, %g : (tensor<5x3xf32>, tensor<5x2xi64>, tensor<5x2xf32>, tensor<3x4x3xf32>, tensor<3x3x2xf32>, tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<5x2xf32>, tensor<3x4x3xf32>, tensor<3x3x2xf32>)
  return %y, %gx, %gw, %ggu, %gd : tensor<5x3xf32>, tensor<5x3xf32>, tensor<5x2xf32>, tensor<3x4x3xf32>, tensor<3x3x2xf32>
}

// Expert parallelism's pieces: 5 tokens' top-2 of 4 experts over 2 ranks.
// CHECK-LABEL: func @expert_parallel
func.func @expert_parallel(%x: tensor<5x3xf32>, %i: tensor<5x2xi64>, %w: tensor<5x2xf32>, %gu: tensor<2x4x3xf32>, %d: tensor<2x3x2xf32>, %g: tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<20x3xf32>, tensor<5x2xf32>) {
  // CHECK: graph.moe_dispatch %{{.*}}, %{{.*}} {experts = 4 : i64, ranks = 2 : i64} : (tensor<5x3xf32>, tensor<5x2xi64>) -> (tensor<20x3xf32>, tensor<2x2xi64>)
  %rows, %n = graph.moe_dispatch %x, %i {experts = 4 : i64, ranks = 2 : i64} : (tensor<5x3xf32>, tensor<5x2xi64>) -> (tensor<20x3xf32>, tensor<2x2xi64>)
  // CHECK: graph.moe_exchange
  %there, %got = graph.moe_exchange %rows, %n : (tensor<20x3xf32>, tensor<2x2xi64>) -> (tensor<20x3xf32>, tensor<2x2xi64>)
  // CHECK: graph.moe_row_experts
  %e = graph.moe_row_experts %got : (tensor<2x2xi64>) -> tensor<20x1xi64>
  %one = graph.constant dense<1.0> : tensor<20x1xf32>
  %out = graph.moe %there, %e, %one, %gu, %d : (tensor<20x3xf32>, tensor<20x1xi64>, tensor<20x1xf32>, tensor<2x4x3xf32>, tensor<2x3x2xf32>) -> tensor<20x3xf32>
  %back, %_ = graph.moe_exchange %out, %got : (tensor<20x3xf32>, tensor<2x2xi64>) -> (tensor<20x3xf32>, tensor<2x2xi64>)
  // CHECK: graph.moe_combine
  %y = graph.moe_combine %back, %i, %w {experts = 4 : i64, ranks = 2 : i64} : (tensor<20x3xf32>, tensor<5x2xi64>, tensor<5x2xf32>) -> tensor<5x3xf32>
  // CHECK: graph.moe_combine_grad
  %gr, %gw = graph.moe_combine_grad %back, %i, %w, %g {experts = 4 : i64, ranks = 2 : i64} : (tensor<20x3xf32>, tensor<5x2xi64>, tensor<5x2xf32>, tensor<5x3xf32>) -> (tensor<20x3xf32>, tensor<5x2xf32>)
  return %y, %gr, %gw : tensor<5x3xf32>, tensor<20x3xf32>, tensor<5x2xf32>
}
