// RUN: lamina-opt %s -split-input-file -graph-add-loss="labels=ids" -verify-diagnostics | FileCheck %s

// causal-lm: position t's logits against token t+1. The labels move one
// step left and the last position gets the ignore index (-100), so the
// fused cross-entropy reads the logits whole (no slice of them); ignored
// labels are masked out of the mean.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<2x4x8xf32>, tensor<f32>)
// CHECK-SAME: graph.output_names = ["logits", "loss"]
// CHECK: %[[L:.*]] = graph.matmul
// CHECK: %[[IGN:.*]] = graph.constant dense<-100> : tensor<i64>
// CHECK: %[[PAD:.*]] = graph.broadcast %[[IGN]] : tensor<i64> to tensor<2x1xi64>
// CHECK: %[[NEXT:.*]] = graph.slice %arg1 {sizes = array<i64: 2, 3>, starts = array<i64: 0, 1>, steps = array<i64: 1, 1>}
// CHECK: %[[Y:.*]] = graph.concat %[[NEXT]], %[[PAD]] {axis = 1 : i64} : (tensor<2x3xi64>, tensor<2x1xi64>) -> tensor<2x4xi64>
// CHECK: %[[ROWS:.*]] = graph.softmax_cross_entropy %[[L]], %[[Y]] {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
// CHECK: %[[EQ:.*]] = graph.equal %[[Y]], %[[IGN]]
// CHECK: %[[VALID:.*]] = graph.not %[[EQ]]
// CHECK: %[[MASK:.*]] = graph.cast %[[VALID]] : tensor<2x4xi1> to tensor<2x4xf32>
// CHECK: %[[N:.*]] = graph.reduce_sum %[[MASK]]
// CHECK: %[[COUNT:.*]] = graph.max %[[N]]
// CHECK: %[[TOTAL:.*]] = graph.reduce_sum %[[ROWS]]
// CHECK: %[[LOSS:.*]] = graph.div %[[TOTAL]], %[[COUNT]]
// CHECK: return %[[L]], %[[LOSS]]

func.func @forward(%w: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "w"},
                   %ids: tensor<2x4xi64> {graph.kind = "input", graph.name = "ids"},
                   %y: tensor<2x4xi32> {graph.kind = "input", graph.name = "y"})
    -> tensor<2x4x8xf32> attributes {graph.output_names = ["logits"]} {
  %e = graph.cast %ids : tensor<2x4xi64> to tensor<2x4xf32>
  %r = graph.reshape %e : tensor<2x4xf32> to tensor<2x4x1xf32>
  %b = graph.broadcast %r : tensor<2x4x1xf32> to tensor<2x4x4xf32>
  %0 = graph.matmul %b, %w : (tensor<2x4x4xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

// The logits must be identifiable: two candidate outputs.
// expected-error @+1 {{graph-add-loss: 2 outputs could be the logits; name one with the 'logits' option}}
func.func @forward(%w: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "w"},
                   %y: tensor<4xi32> {graph.kind = "input", graph.name = "y"})
    -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {graph.output_names = ["a", "b"]} {
  return %w, %w : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// The labels must be shaped like the logits without the class dim.
// expected-error @+1 {{graph-add-loss: labels must be integers shaped like the logits without their last dim ('tensor<4x8xf32>'), not 'tensor<3xi32>'}}
func.func @forward(%w: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "w"},
                   %ids: tensor<3xi32> {graph.kind = "input", graph.name = "ids"},
                   %y: tensor<3xi32> {graph.kind = "input", graph.name = "y"})
    -> tensor<4x8xf32> attributes {graph.output_names = ["logits"]} {
  return %w : tensor<4x8xf32>
}

// -----

// A model that already has a loss output.
// expected-error @+1 {{graph-add-loss: @forward already has an output named 'loss'}}
func.func @forward(%w: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "w"},
                   %y: tensor<4xi32> {graph.kind = "input", graph.name = "y"})
    -> tensor<4x8xf32> attributes {graph.output_names = ["loss"]} {
  return %w : tensor<4x8xf32>
}

// -----

// causal-lm needs at least two positions to predict one token.
// expected-error @+1 {{graph-add-loss: causal-lm needs a sequence of at least 2 tokens}}
func.func @forward(%w: tensor<2x1x8xf32> {graph.kind = "trainable", graph.name = "w"},
                   %ids: tensor<2x1xi32> {graph.kind = "input", graph.name = "ids"},
                   %y: tensor<2x1xi32> {graph.kind = "input", graph.name = "y"})
    -> tensor<2x1x8xf32> attributes {graph.output_names = ["logits"]} {
  return %w : tensor<2x1x8xf32>
}
