// RUN: lamina-opt %s -split-input-file -graph-autodiff="loss=b" -graph-verify-train-step -verify-diagnostics | FileCheck %s

// The 'loss' option picks one of several scalar outputs by name.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.output_names = ["loss", "grad:w"]
// CHECK: %[[M:.*]] = graph.reduce_max
// CHECK: return %[[M]], %{{.*}} : tensor<f32>, tensor<4xf32>
func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> (tensor<f32>, tensor<f32>) attributes {graph.output_names = ["a", "b"]} {
  %0 = graph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  %1 = graph.reduce_max %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %0, %1 : tensor<f32>, tensor<f32>
}

// -----

// A 'loss' name that is not an output.
// expected-error @+1 {{graph-autodiff: no output named 'b'; outputs: 'a'}}
func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> tensor<f32> attributes {graph.output_names = ["a"]} {
  %0 = graph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// The loss must be a float scalar.
// expected-error @+1 {{graph-autodiff: loss 'b' must be a scalar f32 or f64 tensor, not 'tensor<2xf32>'}}
func.func @forward(%w: tensor<2xf32> {graph.kind = "trainable", graph.name = "w"})
    -> tensor<2xf32> attributes {graph.output_names = ["b"]} {
  return %w : tensor<2xf32>
}
