// RUN: lamina-opt %s -split-input-file -graph-fold-matmul-casts | FileCheck %s
// RUN: lamina-opt %s -split-input-file -graph-fold-matmul-casts -graph-autodiff -graph-verify-train-step | FileCheck %s --check-prefix=GRAD

// A bf16 product cast to f32 becomes a matmul with an f32 result; a cast of
// a product used elsewhere, and a narrowing cast, stay.
// CHECK-LABEL: func.func @forward
// CHECK: %[[A:.*]] = graph.cast %arg0 : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: %[[B:.*]] = graph.cast %arg1 : tensor<8x2xf32> to tensor<8x2xbf16>
// CHECK: %[[W:.*]] = graph.matmul %[[A]], %[[B]] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xf32>
// CHECK-NOT: graph.cast %[[W]]
// CHECK: %[[N:.*]] = graph.matmul %[[A]], %[[B]] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
// CHECK: graph.cast %[[N]] : tensor<4x2xbf16> to tensor<4x2xf32>
// GRAD-LABEL: func.func @train_step
// The gradient of a wide product is rounded to the operands' type first.
// GRAD: graph.cast %{{.*}} : tensor<4x2xf32> to tensor<4x2xbf16>
// GRAD: graph.matmul %{{.*}}, %{{.*}} : (tensor<4x2xbf16>, tensor<2x8xbf16>) -> tensor<4x8xbf16>
func.func @forward(%x: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "x"},
                   %w: tensor<8x2xf32> {graph.kind = "trainable", graph.name = "w"})
    -> (tensor<f32>, tensor<4x2xbf16>) attributes {graph.output_names = ["loss", "n"]} {
  %a = graph.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
  %b = graph.cast %w : tensor<8x2xf32> to tensor<8x2xbf16>
  %0 = graph.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %1 = graph.cast %0 : tensor<4x2xbf16> to tensor<4x2xf32>
  %2 = graph.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %3 = graph.cast %2 : tensor<4x2xbf16> to tensor<4x2xf32>
  %4 = graph.add %1, %3 : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %l = graph.reduce_sum %4 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x2xf32> -> tensor<f32>
  return %l, %2 : tensor<f32>, tensor<4x2xbf16>
}
