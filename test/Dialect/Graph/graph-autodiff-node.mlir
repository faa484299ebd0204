// RUN: not lamina-opt %s -graph-autodiff 2>&1 | FileCheck %s

// The missing-rule diagnostic names the ONNX node behind the op (its NameLoc).
// CHECK: error: {{.*}}graph-autodiff: no gradient rule for 'graph.scatter_nd' in this form (ONNX node '/model/ScatterND_3'), which lies between a trainable parameter and the loss
func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"},
                   %i: tensor<1x1xi64> {graph.kind = "input", graph.name = "i"},
                   %u: tensor<1xf32> {graph.kind = "input", graph.name = "u"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.scatter_nd %w, %i, %u {reduction = "mul"} : (tensor<4xf32>, tensor<1x1xi64>, tensor<1xf32>) -> tensor<4xf32> loc("/model/ScatterND_3")
  %1 = graph.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %1 : tensor<f32>
}
