// The training-preparation passes act on the entry function, the one marked
// graph.entry (the importer marks the function it creates), whatever its
// name: an unmarked @forward beside it is left alone. The module passes
// (the loss, autodiff, the evaluation step) find it the same way; the
// functions they derive from it are not the entry.
// RUN: lamina-opt %s --mlir-print-op-on-diagnostic=false -graph-fill-window-inputs -graph-freeze="regex=^w" 2>&1 | FileCheck %s
// RUN: lamina-opt %s -graph-add-loss="kind=output output=l" -graph-autodiff -graph-eval-step | FileCheck %s --check-prefix=STEPS

// CHECK: remark: input attention_mask: all ones
// CHECK: remark: not trained: 1 initializers matching --freeze '^w'
// CHECK-LABEL: func.func @forward
// CHECK-SAME: graph.kind = "trainable", graph.name = "w"
// CHECK-SAME: graph.name = "attention_mask"
// CHECK-LABEL: func.func @model
// CHECK-SAME: graph.kind = "constant", graph.name = "w"
// CHECK-SAME: graph.kind = "trainable", graph.name = "v"
// CHECK-NOT: attention_mask
// CHECK-SAME: attributes {graph.entry,

// STEPS-LABEL: func.func @forward(
// STEPS-NOT: graph.entry
// STEPS-LABEL: func.func @eval_step(
// STEPS-SAME: -> tensor<f32> attributes {graph.output_names = ["l"]}
// STEPS-LABEL: func.func @train_step(
// STEPS-SAME: attributes {graph.output_names = ["loss", "grad:w", "grad:v"]}
// STEPS-NOT: graph.entry

func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"},
                   %mask: tensor<2x4xi64> {graph.kind = "input", graph.name = "attention_mask"})
    -> tensor<4xf32> attributes {graph.output_names = ["y"]} {
  return %w : tensor<4xf32>
}

func.func @model(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"},
                 %v: tensor<4xf32> {graph.kind = "trainable", graph.name = "v"},
                 %mask: tensor<2x4xi64> {graph.kind = "input", graph.name = "attention_mask"})
    -> (tensor<4xf32>, tensor<f32>, tensor<2x4xi64>)
    attributes {graph.entry, graph.output_names = ["y", "l", "m"]} {
  %p = graph.mul %w, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %p, %l, %mask : tensor<4xf32>, tensor<f32>, tensor<2x4xi64>
}
