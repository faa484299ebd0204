// RUN: not lamina-opt %s -graph-autodiff 2>&1 | FileCheck %s

// The missing-rule diagnostic names the ONNX node behind the op (its NameLoc).
// CHECK: error: {{.*}}graph-autodiff: no gradient rule for 'func.call' (ONNX node '/model/Custom_3'), which lies between a trainable parameter and the loss
func.func private @helper(tensor<4xf32>) -> tensor<4xf32>
func.func @forward(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = func.call @helper(%w) : (tensor<4xf32>) -> tensor<4xf32> loc("/model/Custom_3")
  %1 = graph.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %1 : tensor<f32>
}
