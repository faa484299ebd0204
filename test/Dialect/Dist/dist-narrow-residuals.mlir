// RUN: lamina-opt %s -dist-narrow-residuals | FileCheck %s

// A module without recomputation: its forward returns, as residuals, four
// bf16-operand products its backward reads. Stored in bf16 in both, as one
// function would store them (graph-fuse-epilogues):
//  * residual:0, an activation (the GELU's input) that only elementwise
//    steps read in either function: each read widened;
//  * residual:1, the logits, read by the cross-entropy and, in the
//    backward, by its bf16 gradient: read as stored.
// Kept f32: residual:2, read by a transpose and a matmul in the backward;
// residual:3, from which the backward makes a result elementwise.
// CHECK-LABEL: func.func @fwd_0
// CHECK-SAME: -> (tensor<4xf32>, tensor<4x6xbf16>, tensor<4x10xbf16>, tensor<4x6xf32>, tensor<4x6xf32>)
// CHECK-NEXT: %[[H:.*]] = graph.matmul %arg0, %arg2 : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
// CHECK-NEXT: %[[H1:.*]] = graph.cast %[[H]] : tensor<4x6xbf16> to tensor<4x6xf32>
// CHECK-NEXT: graph.gelu %[[H1]]
// CHECK-NEXT: %[[L:.*]] = graph.matmul %arg0, %arg3 : {{.*}} -> tensor<4x10xbf16>
// CHECK-NEXT: %[[ROWS:.*]] = graph.softmax_cross_entropy %[[L]], %arg1 {{.*}} : (tensor<4x10xbf16>, tensor<4xi64>) -> tensor<4xf32>
// CHECK-NEXT: %[[K:.*]] = graph.matmul {{.*}} -> tensor<4x6xf32>
// CHECK-NEXT: %[[M:.*]] = graph.matmul {{.*}} -> tensor<4x6xf32>
// CHECK-NEXT: return %[[ROWS]], %[[H]], %[[L]], %[[K]], %[[M]]
// CHECK-LABEL: func.func @bwd_0
// CHECK-SAME: %arg4: tensor<4x6xbf16> {graph.kind = "residual", graph.name = "residual:0"}
// CHECK-SAME: %arg5: tensor<4x10xbf16> {graph.kind = "residual", graph.name = "residual:1"}
// CHECK-SAME: %arg6: tensor<4x6xf32> {graph.kind = "residual", graph.name = "residual:2"}
// CHECK-SAME: %arg7: tensor<4x6xf32> {graph.kind = "residual", graph.name = "residual:3"}
// CHECK-DAG: %[[A:.*]] = graph.cast %arg4 : tensor<4x6xbf16> to tensor<4x6xf32>
// CHECK-DAG: %[[B:.*]] = graph.cast %arg4 : tensor<4x6xbf16> to tensor<4x6xf32>
// CHECK: graph.mul
// CHECK: graph.softmax_cross_entropy_grad %arg5, %arg1, %arg8 {{.*}} : (tensor<4x10xbf16>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x10xbf16>
// CHECK: graph.transpose %arg6
// CHECK: graph.neg %arg7
func.func @fwd_0(%x: tensor<4x8xbf16> {graph.kind = "input", graph.name = "x"},
                 %t: tensor<4xi64> {graph.kind = "input", graph.name = "t"},
                 %w: tensor<8x6xbf16> {graph.kind = "param_copy", graph.name = "w"},
                 %v: tensor<8x10xbf16> {graph.kind = "param_copy", graph.name = "v"})
    -> (tensor<4xf32>, tensor<4x6xf32>, tensor<4x10xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
    attributes {graph.output_names = ["loss", "residual:0", "residual:1", "residual:2", "residual:3"],
                dist.outlined = #dist.outlined<module = 0, name = "head", num_in = 0, num_out = 1, num_residuals = 4>} {
  %h = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %g = graph.gelu %h : tensor<4x6xf32>
  %logits = graph.matmul %x, %v : (tensor<4x8xbf16>, tensor<8x10xbf16>) -> tensor<4x10xf32>
  %rows = graph.softmax_cross_entropy %logits, %t {ignore_index = -100 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  %k = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %m = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  return %rows, %h, %logits, %k, %m : tensor<4xf32>, tensor<4x6xf32>, tensor<4x10xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}
func.func @bwd_0(%x: tensor<4x8xbf16> {graph.kind = "input", graph.name = "x"},
                 %t: tensor<4xi64> {graph.kind = "input", graph.name = "t"},
                 %w: tensor<8x6xbf16> {graph.kind = "param_copy", graph.name = "w"},
                 %v: tensor<8x10xbf16> {graph.kind = "param_copy", graph.name = "v"},
                 %r0: tensor<4x6xf32> {graph.kind = "residual", graph.name = "residual:0"},
                 %r1: tensor<4x10xf32> {graph.kind = "residual", graph.name = "residual:1"},
                 %r2: tensor<4x6xf32> {graph.kind = "residual", graph.name = "residual:2"},
                 %r3: tensor<4x6xf32> {graph.kind = "residual", graph.name = "residual:3"},
                 %dl: tensor<4xf32> {graph.kind = "cotangent", graph.name = "cotangent:0"})
    -> (tensor<6x4xf32>, tensor<4x10xbf16>, tensor<6x6xf32>, tensor<4x6xf32>)
    attributes {graph.output_names = ["a", "b", "c", "d"],
                dist.outlined = #dist.outlined<module = 0, name = "head", num_in = 0, num_out = 1, num_residuals = 4>} {
  %d = graph.mul %r0, %r0 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %e = graph.neg %d : tensor<4x6xf32>
  %c = graph.transpose %e {perm = array<i64: 1, 0>} : tensor<4x6xf32> -> tensor<6x4xf32>
  %dz = graph.softmax_cross_entropy_grad %r1, %t, %dl {ignore_index = -100 : i64} : (tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x10xbf16>
  %r2t = graph.transpose %r2 {perm = array<i64: 1, 0>} : tensor<4x6xf32> -> tensor<6x4xf32>
  %mm = graph.matmul %r2t, %r2 : (tensor<6x4xf32>, tensor<4x6xf32>) -> tensor<6x6xf32>
  %n = graph.neg %r3 : tensor<4x6xf32>
  return %c, %dz, %mm, %n : tensor<6x4xf32>, tensor<4x10xbf16>, tensor<6x6xf32>, tensor<4x6xf32>
}
