// RUN: lamina-opt %s -split-input-file -dist-hoist-param-casts -verify-diagnostics | FileCheck %s

// Module 0's forward casts w; its backward (recomputing) casts w and b.
// Both get copies of w and b, in order of first appearance, right after the
// forward's arguments: the end of @fwd_0, and in @bwd_0 before the
// cotangent, so the backward still starts with the forward's arguments.
// The f32 uses and the cast of an input stay; module 1 casts nothing and
// gets nothing.
// CHECK-LABEL: func.func @fwd_0
// CHECK-SAME: %arg0: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}
// CHECK-SAME: %arg1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w"}
// CHECK-SAME: %arg2: tensor<4xf32> {graph.kind = "trainable", graph.name = "b"}
// CHECK-SAME: %arg3: tensor<4x4xbf16> {graph.kind = "param_copy", graph.name = "w"}
// CHECK-SAME: %arg4: tensor<4xbf16> {graph.kind = "param_copy", graph.name = "b"})
// CHECK-NOT: graph.cast %arg1
// CHECK: graph.matmul %{{.*}}, %arg3
// CHECK-LABEL: func.func @bwd_0
// CHECK-SAME: %arg2: tensor<4xf32> {graph.kind = "trainable", graph.name = "b"}
// CHECK-SAME: %arg3: tensor<4x4xbf16> {graph.kind = "param_copy", graph.name = "w"}
// CHECK-SAME: %arg4: tensor<4xbf16> {graph.kind = "param_copy", graph.name = "b"}
// CHECK-SAME: %arg5: tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "cotangent:0"})
// CHECK-NOT: graph.cast %arg1
// CHECK-NOT: graph.cast %arg2
// CHECK: graph.matmul %{{.*}}, %arg3
// CHECK: graph.add %{{.*}}, %arg4
// CHECK: graph.mul %arg5, %arg2
// CHECK-LABEL: func.func @fwd_1
// CHECK-SAME: (%arg0: tensor<4xf32> {graph.kind = "trainable", graph.name = "c"}) -> tensor<4xf32>
// CHECK-NEXT: graph.add %arg0, %arg0
func.func @fwd_0(%x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"},
                 %w: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w"},
                 %b: tensor<4xf32> {graph.kind = "trainable", graph.name = "b"})
    -> tensor<2x4xbf16> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0>} {
  %xb = graph.cast %x : tensor<2x4xf32> to tensor<2x4xbf16>
  %wb = graph.cast %w : tensor<4x4xf32> to tensor<4x4xbf16>
  %y = graph.matmul %xb, %wb : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
  return %y : tensor<2x4xbf16>
}
func.func @bwd_0(%x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"},
                 %w: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w"},
                 %b: tensor<4xf32> {graph.kind = "trainable", graph.name = "b"},
                 %dy: tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "cotangent:0"})
    -> (tensor<2x4xbf16>, tensor<2x4xf32>) attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0>} {
  %xb = graph.cast %x : tensor<2x4xf32> to tensor<2x4xbf16>
  %wb = graph.cast %w : tensor<4x4xf32> to tensor<4x4xbf16>
  %bb = graph.cast %b : tensor<4xf32> to tensor<4xbf16>
  %y = graph.matmul %xb, %wb : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
  %z = graph.add %y, %bb : (tensor<2x4xbf16>, tensor<4xbf16>) -> tensor<2x4xbf16>
  %g = graph.mul %dy, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %z, %g : tensor<2x4xbf16>, tensor<2x4xf32>
}
func.func @fwd_1(%c: tensor<4xf32> {graph.kind = "trainable", graph.name = "c"})
    -> tensor<4xf32> attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 0, num_out = 1, num_residuals = 0>} {
  %d = graph.add %c, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %d : tensor<4xf32>
}
func.func @bwd_1(%c: tensor<4xf32> {graph.kind = "trainable", graph.name = "c"})
    -> tensor<4xf32> attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 0, num_out = 1, num_residuals = 0>} {
  return %c : tensor<4xf32>
}

// -----

// A backward that does not start with its forward's arguments breaks the
// runtime's contract (DistProgram.h): refused.
// expected-error @+1 {{module 0 lacks @fwd_0 or @bwd_0, or the backward does not start with the forward's arguments}}
module {
  func.func @fwd_0(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
      -> tensor<4xbf16> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0>} {
    %wb = graph.cast %w : tensor<4xf32> to tensor<4xbf16>
    return %wb : tensor<4xbf16>
  }
  func.func @bwd_0(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "v"})
      -> tensor<4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0>} {
    return %w : tensor<4xf32>
  }
}
