// RUN: lamina-opt %s | FileCheck %s
// RUN: lamina-opt %s | lamina-opt | FileCheck %s

// A chain of embedding, two layers sharing one body and a head, every op
// in its module, and a placement on two ranks.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: dist.chain = [#dist.module<"embedding", embedding>, #dist.module<"layer.0", layer, body = 0>, #dist.module<"layer.1", layer, body = 0>, #dist.module<"head", head>]
// CHECK-SAME: dist.discovery = "names"
// CHECK-SAME: dist.placement = #dist.placement<pp = 2, contiguous, ranks = [0, 0, 1, 1]>
func.func @forward(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> attributes {
    dist.chain = [#dist.module<"embedding", embedding>,
                  #dist.module<"layer.0", layer, body = 0>,
                  #dist.module<"layer.1", layer, body = 0>,
                  #dist.module<"head", head>],
    dist.discovery = "names",
    dist.placement = #dist.placement<pp = 2, contiguous, ranks = [0, 0, 1, 1]>} {
  // CHECK: graph.neg %{{.*}} {dist.module = 0 : i64}
  %0 = graph.neg %x {dist.module = 0 : i64} : tensor<4xf32>
  // CHECK: graph.mul %{{.*}}, %{{.*}} {dist.module = 1 : i64}
  %1 = graph.mul %0, %w {dist.module = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = graph.mul %1, %w {dist.module = 2 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // A module may read any earlier module, not only its predecessor.
  %3 = graph.add %2, %0 {dist.module = 3 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}

// A modular placement: layer l on rank l mod pp.
// CHECK-LABEL: func.func @modular
// CHECK-SAME: dist.placement = #dist.placement<pp = 2, modular, ranks = [0, 1, 0]>
func.func @modular(%x: tensor<4xf32>) -> tensor<4xf32> attributes {
    dist.chain = [#dist.module<"a", layer>, #dist.module<"b", layer>,
                  #dist.module<"c", layer>],
    dist.placement = #dist.placement<pp = 2, modular, ranks = [0, 1, 0]>} {
  %0 = graph.neg %x {dist.module = 0 : i64} : tensor<4xf32>
  %1 = graph.neg %0 {dist.module = 1 : i64} : tensor<4xf32>
  %2 = graph.neg %1 {dist.module = 2 : i64} : tensor<4xf32>
  return %2 : tensor<4xf32>
}

// An outlined module function's contract (dist-outline-modules): recompute
// is printed only when false, copies_only only when true; the keys may come
// in any order.
// CHECK-LABEL: func.func private @fwd_0
// CHECK-SAME: dist.outlined = #dist.outlined<module = 0, name = "embedding+layer.0", num_in = 0, num_out = 1, num_residuals = 0>
// CHECK-LABEL: func.func private @bwd_1
// CHECK-SAME: dist.outlined = #dist.outlined<module = 1, name = "head", num_in = 1, num_out = 1, num_residuals = 2, recompute = false, copies_only = true>
func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "embedding+layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_1() attributes {dist.outlined = #dist.outlined<copies_only = true, recompute = false, num_residuals = 2, num_out = 1, num_in = 1, name = "head", module = 1>}
