// RUN: lamina-opt %s -graph-verify-train-step -split-input-file -verify-diagnostics

// A well-formed train step passes (graph-autodiff's output is checked in
// graph-autodiff.mlir).
func.func @train_step(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"},
                      %x: tensor<4xf32> {graph.kind = "input", graph.name = "x"})
    -> (tensor<f32>, tensor<4xf32>) attributes {graph.output_names = ["loss", "grad:w"]} {
  %0 = graph.mul %w, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %1, %x : tensor<f32>, tensor<4xf32>
}

// -----
// No train step at all.
// expected-error @+1 {{no func.func @train_step (run graph-autodiff)}}
module {
  func.func @forward() {
    return
  }
}

// -----
// The loss comes first.
// expected-error @+1 {{the first result of @train_step must be the scalar f32/f64 'loss'}}
func.func @train_step(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> (tensor<4xf32>, tensor<f32>) attributes {graph.output_names = ["grad:w", "loss"]} {
  %0 = graph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %w, %0 : tensor<4xf32>, tensor<f32>
}

// -----
// Every trainable argument has its gradient.
// expected-error @+1 {{result 1 of @train_step must be 'grad:w' of type 'tensor<4xf32>'}}
func.func @train_step(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----
// A gradient has its parameter's type.
// expected-error @+1 {{result 1 of @train_step must be 'grad:w' of type 'tensor<4xf32>'}}
func.func @train_step(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> (tensor<f32>, tensor<f32>) attributes {graph.output_names = ["loss", "grad:w"]} {
  %0 = graph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %0, %0 : tensor<f32>, tensor<f32>
}

// -----
// Nothing beyond the loss and the gradients.
// expected-error @+1 {{@train_step has 1 results beyond the loss, the gradients and kept outputs}}
func.func @train_step(%x: tensor<4xf32> {graph.kind = "input", graph.name = "x"})
    -> (tensor<f32>, tensor<4xf32>) attributes {graph.output_names = ["loss", "x"]} {
  %0 = graph.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %0, %x : tensor<f32>, tensor<4xf32>
}
