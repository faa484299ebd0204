// RUN: lamina-opt %s -dist-hoist-param-casts=every-read=bf16 | FileCheck %s
// RUN: not lamina-opt %s -dist-hoist-param-casts=every-read=f32 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: dist-hoist-param-casts: every-read is 'f32', not bf16 or f16

// every-read=bf16 (lamina compile --param-reads=copies): every weight gets
// a bf16 copy, cast or not, in order of first appearance, and every read
// goes through it: the bf16 cast is the copy, the embedding gathers the
// copy's rows and widens them (not the whole table), the norm-like weight
// g and the f32 matmul's w read the copy widened once at the entry (a
// cast of w to f16 reads the widened copy too). No f32 weight is read, so
// both functions say copies_only: the runtime leaves the f32 weights
// unbound and ZeRO 3 gathers the copies.
// CHECK-LABEL: func.func @fwd_0
// CHECK-SAME: %arg1: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "e"}
// CHECK-SAME: %arg4: tensor<8x4xbf16> {graph.kind = "param_copy", graph.name = "e"}
// CHECK-SAME: %arg5: tensor<4x4xbf16> {graph.kind = "param_copy", graph.name = "w"}
// CHECK-SAME: %arg6: tensor<4xbf16> {graph.kind = "param_copy", graph.name = "g"})
// CHECK-SAME: dist.outlined = #dist.outlined<{{.*}}copies_only = true>
// CHECK-NEXT: %[[G:.*]] = graph.cast %arg6 : tensor<4xbf16> to tensor<4xf32>
// CHECK-NEXT: %[[ROWS:.*]] = graph.gather %arg4, %arg0 {axis = 0 : i64} : (tensor<8x4xbf16>, tensor<2xi64>) -> tensor<2x4xbf16>
// CHECK-NEXT: %[[X:.*]] = graph.cast %[[ROWS]] : tensor<2x4xbf16> to tensor<2x4xf32>
// CHECK-NEXT: graph.mul %[[X]], %[[G]]
// CHECK: graph.matmul %{{.*}}, %arg5
// CHECK-NOT: %arg1
// CHECK-NOT: %arg2
// CHECK-NOT: %arg3
// CHECK-LABEL: func.func @bwd_0
// CHECK-SAME: %arg6: tensor<4xbf16> {graph.kind = "param_copy", graph.name = "g"}, %arg7: tensor<2x4xf32> {graph.kind = "cotangent"
// CHECK-SAME: dist.outlined = #dist.outlined<{{.*}}copies_only = true>
// CHECK-DAG: %[[G:.*]] = graph.cast %arg6 : tensor<4xbf16> to tensor<4xf32>
// CHECK-DAG: %[[W:.*]] = graph.cast %arg5 : tensor<4x4xbf16> to tensor<4x4xf32>
// CHECK: %[[A:.*]] = graph.mul %arg7, %[[G]]
// CHECK: graph.mul %[[A]], %[[G]]
// CHECK: graph.cast %[[W]] : tensor<4x4xf32> to tensor<4x4xf16>
// CHECK: graph.matmul %[[A]], %[[W]]
// CHECK-NOT: %arg1
// CHECK-NOT: %arg2
// CHECK-NOT: %arg3
func.func @fwd_0(%ids: tensor<2xi64> {graph.kind = "input", graph.name = "ids"},
                 %e: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "e"},
                 %w: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w"},
                 %g: tensor<4xf32> {graph.kind = "trainable", graph.name = "g"})
    -> tensor<2x4xbf16> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0>} {
  %x = graph.gather %e, %ids {axis = 0 : i64} : (tensor<8x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  %xg = graph.mul %x, %g : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %xb = graph.cast %xg : tensor<2x4xf32> to tensor<2x4xbf16>
  %wb = graph.cast %w : tensor<4x4xf32> to tensor<4x4xbf16>
  %y = graph.matmul %xb, %wb : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
  return %y : tensor<2x4xbf16>
}
func.func @bwd_0(%ids: tensor<2xi64> {graph.kind = "input", graph.name = "ids"},
                 %e: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "e"},
                 %w: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w"},
                 %g: tensor<4xf32> {graph.kind = "trainable", graph.name = "g"},
                 %dy: tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "cotangent:0"})
    -> (tensor<2x4xf32>, tensor<2x4xf16>) attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0>} {
  %a = graph.mul %dy, %g : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %b = graph.mul %a, %g : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %wh = graph.cast %w : tensor<4x4xf32> to tensor<4x4xf16>
  %h = graph.matmul %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %hh = graph.cast %h : tensor<2x4xf32> to tensor<2x4xf16>
  return %b, %hh : tensor<2x4xf32>, tensor<2x4xf16>
}

