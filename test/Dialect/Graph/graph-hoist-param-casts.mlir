// RUN: lamina-opt %s -graph-hoist-param-casts | FileCheck %s
// RUN: lamina-opt %s -graph-hoist-param-casts -convert-graph-to-rt | FileCheck %s --check-prefix=RT

// The casts of trainable arguments to bf16 become arguments of kind
// param_copy named after the parameter, appended in one order to every
// function with trainable arguments (the train step and the evaluation
// entry take one list, even where one of them does not cast a parameter).
// A cast of an input, a cast to f32 and the f32 uses stay.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "w"}
// CHECK-SAME: %arg3: tensor<4x8xbf16> {graph.kind = "param_copy", graph.name = "w"}
// CHECK-SAME: %arg4: tensor<8xbf16> {graph.kind = "param_copy", graph.name = "b"}
// CHECK-NOT: graph.cast %arg0
// CHECK-NOT: graph.cast %arg1
// CHECK: graph.matmul %arg2, %arg3
// CHECK-NEXT: graph.add {{.*}}, %arg4
// CHECK-NEXT: graph.add %arg0, %arg0
// CHECK-NEXT: graph.cast %arg2 : tensor<2x4xbf16> to tensor<2x4xf32>
// CHECK-NEXT: return
// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: %arg3: tensor<4x8xbf16> {graph.kind = "param_copy", graph.name = "w"}
// CHECK-SAME: %arg4: tensor<8xbf16> {graph.kind = "param_copy", graph.name = "b"}
// CHECK: graph.matmul %arg2, %arg3
// CHECK-LABEL: func.func @no_params
// CHECK-SAME: (%arg0: tensor<4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<4xbf16>
// CHECK-NEXT: graph.cast %arg0
// RT-LABEL: func.func @train_step
// RT-SAME: %arg4: memref<4x8xbf16> {graph.kind = "param_copy", graph.name = "w"}
func.func @train_step(%w: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "w"},
                      %b: tensor<8xf32> {graph.kind = "trainable", graph.name = "b"},
                      %x: tensor<2x4xbf16> {graph.kind = "input", graph.name = "x"})
    -> (tensor<2x8xbf16>, tensor<4x8xf32>, tensor<2x4xf32>) {
  %wb = graph.cast %w : tensor<4x8xf32> to tensor<4x8xbf16>
  %bb = graph.cast %b : tensor<8xf32> to tensor<8xbf16>
  %y = graph.matmul %x, %wb : (tensor<2x4xbf16>, tensor<4x8xbf16>) -> tensor<2x8xbf16>
  %z = graph.add %y, %bb : (tensor<2x8xbf16>, tensor<8xbf16>) -> tensor<2x8xbf16>
  %wd = graph.add %w, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %xf = graph.cast %x : tensor<2x4xbf16> to tensor<2x4xf32>
  return %z, %wd, %xf : tensor<2x8xbf16>, tensor<4x8xf32>, tensor<2x4xf32>
}
func.func @eval_step(%w: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "w"},
                     %b: tensor<8xf32> {graph.kind = "trainable", graph.name = "b"},
                     %x: tensor<2x4xbf16> {graph.kind = "input", graph.name = "x"})
    -> tensor<2x8xbf16> {
  %wb = graph.cast %w : tensor<4x8xf32> to tensor<4x8xbf16>
  %y = graph.matmul %x, %wb : (tensor<2x4xbf16>, tensor<4x8xbf16>) -> tensor<2x8xbf16>
  return %y : tensor<2x8xbf16>
}
func.func @no_params(%x: tensor<4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<4xbf16> {
  %y = graph.cast %x : tensor<4xf32> to tensor<4xbf16>
  return %y : tensor<4xbf16>
}
