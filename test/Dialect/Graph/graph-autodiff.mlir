// RUN: lamina-opt %s -split-input-file -graph-autodiff -graph-verify-train-step -verify-diagnostics | FileCheck %s

// Chain rule through tanh and a product: dL/dw = (1 - tanh(w x)^2) x.
// CHECK-LABEL: func.func @forward
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[W:.*]]: tensor<3xf32> {graph.kind = "trainable", graph.name = "w"}, %[[X:.*]]: tensor<3xf32>
// CHECK-SAME: -> (tensor<f32>, tensor<3xf32>)
// CHECK-SAME: graph.output_names = ["loss", "grad:w"]
// CHECK: %[[P:.*]] = graph.mul %[[W]], %[[X]]
// CHECK: %[[T:.*]] = graph.tanh %[[P]]
// CHECK: %[[L:.*]] = graph.reduce_sum %[[T]]
// CHECK: %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[G:.*]] = graph.broadcast
// CHECK: %[[TT:.*]] = graph.mul %[[T]], %[[T]]
// CHECK: %[[D:.*]] = graph.sub %{{.*}}, %[[TT]]
// CHECK: %[[GP:.*]] = graph.mul %[[G]], %[[D]]
// CHECK: %[[GW:.*]] = graph.mul %[[GP]], %[[X]]
// CHECK: return %[[L]], %[[GW]] : tensor<f32>, tensor<3xf32>
func.func @forward(%w: tensor<3xf32> {graph.kind = "trainable", graph.name = "w"},
                   %x: tensor<3xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.mul %w, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = graph.tanh %0 : tensor<3xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0>, keepdims = false} : tensor<3xf32> -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// A tied weight (used by two matmuls) gets the sum of both gradients.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.output_names = ["loss", "grad:w"]
// CHECK: graph.reduce_sum
// CHECK: %[[G2:.*]] = graph.matmul %{{.*}} : (tensor<4x2xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[G1:.*]] = graph.matmul %{{.*}} : (tensor<4x2xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[SUM:.*]] = graph.add %[[G2]], %[[G1]] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK: return %{{.*}}, %[[SUM]]
func.func @forward(%w: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w"},
                   %x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = graph.matmul %0, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// A broadcast bias: its gradient is summed over the broadcast dims and
// reshaped back to the bias shape.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[R:.*]] = graph.reduce_sum %{{.*}} {axes = array<i64: 0, 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<3xf32>
// CHECK: %[[B:.*]] = graph.reshape %[[R]] : tensor<3xf32> to tensor<3x1xf32>
// CHECK: return %{{.*}}, %[[B]] : tensor<f32>, tensor<3x1xf32>
func.func @forward(%b: tensor<3x1xf32> {graph.kind = "trainable", graph.name = "b"},
                   %x: tensor<2x3x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.add %x, %b : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  %1 = graph.exp %0 : tensor<2x3x4xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// Integer token ids are not differentiable: the embedding gets a scatter-add,
// the ids nothing; an unused parameter gets a zero gradient; the loss is
// the only scalar output, and the other output is dropped.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<8x4xf32>, tensor<4xf32>)
// CHECK-SAME: graph.output_names = ["loss", "grad:wte", "grad:unused"]
// CHECK-NOT: graph.reduce_max
// CHECK: %[[IDX:.*]] = graph.reshape %{{.*}} : tensor<2x3xi64> to tensor<2x3x1xi64>
// CHECK: %[[E:.*]] = graph.scatter_nd %{{.*}}, %[[IDX]], %{{.*}} {reduction = "add"} : (tensor<8x4xf32>, tensor<2x3x1xi64>, tensor<2x3x4xf32>) -> tensor<8x4xf32>
// CHECK: %[[Z:.*]] = graph.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: return %{{.*}}, %[[E]], %[[Z]]
func.func @forward(%wte: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "wte"},
                   %unused: tensor<4xf32> {graph.kind = "trainable", graph.name = "unused"},
                   %ids: tensor<2x3xi64> {graph.kind = "input", graph.name = "ids"})
    -> (tensor<2x3xf32>, tensor<f32>) attributes {graph.output_names = ["peak", "loss"]} {
  %0 = graph.gather %wte, %ids {axis = 0 : i64} : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %f = graph.cast %ids : tensor<2x3xi64> to tensor<2x3xf32>
  %s = graph.reshape %f : tensor<2x3xf32> to tensor<2x3x1xf32>
  %1 = graph.mul %0, %s : (tensor<2x3x4xf32>, tensor<2x3x1xf32>) -> tensor<2x3x4xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  %3 = graph.reduce_max %1 {axes = array<i64: 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<2x3xf32>
  return %3, %2 : tensor<2x3xf32>, tensor<f32>
}

// -----

// An op without a gradient rule (another dialect's) between a parameter and
// the loss.
func.func private @helper(tensor<4xf32>) -> tensor<4xf32>
func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  // expected-error @+1 {{graph-autodiff: no gradient rule for 'func.call', which lies between a trainable parameter and the loss}}
  %0 = func.call @helper(%w) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// attention's lse is the backward's input: a loss reading it has no rule
// (rather than a gradient that silently leaves that term out).
func.func @forward(%q: tensor<1x1x4x4xf32> {graph.kind = "trainable", graph.name = "q"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  // expected-error @+1 {{graph-autodiff: no gradient rule for 'graph.attention' in this form}}
  %o, %lse = graph.attention %q, %q, %q {causal, scale = 0.5 : f64} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> (tensor<1x1x4x4xf32>, tensor<1x1x4xf32>)
  %l1 = graph.reduce_sum %lse {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<1x1x4xf32> -> tensor<f32>
  %l2 = graph.reduce_sum %o {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<1x1x4x4xf32> -> tensor<f32>
  %l = graph.add %l1, %l2 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// scatter_nd with mul, max and min: data and updates both get gradients
// (values are checked by finite differences in GradientTest.cpp). mul
// scatters the updates onto ones for the data; max counts tied candidates
// with a scatter-add.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.output_names = ["loss", "grad:w", "grad:u"]
// CHECK-DAG: graph.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} {reduction = "mul"} : (tensor<4xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<4xf32>
// CHECK-DAG: graph.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} {reduction = "add"} : (tensor<4xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<4xf32>
// CHECK-DAG: graph.gather_nd
// CHECK: return
func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"},
                   %u: tensor<2xf32> {graph.kind = "trainable", graph.name = "u"},
                   %i: tensor<2x1xi64> {graph.kind = "input", graph.name = "i"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.scatter_nd %w, %i, %u {reduction = "mul"} : (tensor<4xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<4xf32>
  %1 = graph.scatter_nd %0, %i, %u {reduction = "max"} : (tensor<4xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<4xf32>
  %2 = graph.scatter_nd %1, %i, %u {reduction = "min"} : (tensor<4xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<4xf32>
  %3 = graph.reduce_sum %2 {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %3 : tensor<f32>
}

// -----

// Two scalar outputs and no 'loss' option: which one is the loss?
// expected-error @+1 {{graph-autodiff: @forward has 2 scalar outputs; name the loss with the 'loss' option}}
func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> (tensor<f32>, tensor<f32>) attributes {graph.output_names = ["a", "b"]} {
  %0 = graph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  %1 = graph.reduce_max %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %0, %1 : tensor<f32>, tensor<f32>
}
