// graph-add-loss records the loss (kind=output: the model's own), autodiff
// and graph-eval-step read it from graph.train: @forward becomes
// @eval_step, computing the loss only.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=l" -graph-autodiff -graph-eval-step | FileCheck %s
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=y" 2>&1 | FileCheck %s --check-prefix=NOTSCALAR
// RUN: not lamina-opt %s -graph-add-loss="kind=output" 2>&1 | FileCheck %s --check-prefix=NONAME
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=z" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not lamina-opt %s -graph-eval-step 2>&1 | FileCheck %s --check-prefix=NOLOSS

// CHECK: module attributes {graph.train = #graph.train<loss = output, output = "l">}
// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: -> tensor<f32> attributes {graph.output_names = ["l"]}
// CHECK-NOT: graph.tanh
// CHECK: graph.reduce_sum
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.output_names = ["loss", "grad:w"]
// NOTSCALAR: error: graph-add-loss: the loss output 'y' must be a scalar f32 or f64, not 'tensor<4xf32>'
// NONAME: error: graph-add-loss: kind=output needs the 'output' option naming the model's loss output
// MISSING: error: graph-add-loss: no output named 'z' (the loss output)
// NOLOSS: error: graph-eval-step: @forward has no output named '' (run graph-add-loss first)

func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"},
                   %x: tensor<4xf32> {graph.kind = "input", graph.name = "x"})
    -> (tensor<4xf32>, tensor<f32>) attributes {graph.output_names = ["y", "l"]} {
  %p = graph.mul %w, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %y = graph.tanh %p : tensor<4xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %y, %l : tensor<4xf32>, tensor<f32>
}
