// RUN: lamina-opt %s -graph-autocast -graph-autodiff | FileCheck %s

// graph-autocast before graph-autodiff: the gradient of each cast is the
// cast back, so the backward's matmul (dW = X^T G) is a bf16 matmul (its
// transpose folds into the matmul's flag when lowered), the weight stays an
// f32 argument and its gradient arrives in f32.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: tensor<8x32xf32> {{.*}}, %[[W:.*]]: tensor<32x16xf32> {graph.kind = "trainable", graph.name = "w"}) -> (tensor<f32>, tensor<32x16xf32>)
// CHECK-NEXT: %[[XL:.*]] = graph.cast %[[X]] : tensor<8x32xf32> to tensor<8x32xbf16>
// CHECK-NEXT: %[[WL:.*]] = graph.cast %[[W]] : tensor<32x16xf32> to tensor<32x16xbf16>
// CHECK-NEXT: %[[M:.*]] = graph.matmul %[[XL]], %[[WL]] : (tensor<8x32xbf16>, tensor<32x16xbf16>) -> tensor<8x16xbf16>
// CHECK-NEXT: %[[MF:.*]] = graph.cast %[[M]] : tensor<8x16xbf16> to tensor<8x16xf32>
// CHECK-NEXT: %[[T:.*]] = graph.tanh %[[MF]] : tensor<8x16xf32>
// CHECK-NEXT: %[[LOSS:.*]] = graph.reduce_sum %[[T]]
// The tanh gradient is f32, then cast to bf16 for the matmul's gradient.
// CHECK: graph.sub
// CHECK-NEXT: %[[G:.*]] = graph.mul {{.*}} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %[[GL:.*]] = graph.cast %[[G]] : tensor<8x16xf32> to tensor<8x16xbf16>
// CHECK-NEXT: %[[XT:.*]] = graph.transpose %[[XL]] {perm = array<i64: 1, 0>} : tensor<8x32xbf16> -> tensor<32x8xbf16>
// CHECK-NEXT: %[[DW:.*]] = graph.matmul %[[XT]], %[[GL]] : (tensor<32x8xbf16>, tensor<8x16xbf16>) -> tensor<32x16xbf16>
// CHECK-NEXT: %[[DWF:.*]] = graph.cast %[[DW]] : tensor<32x16xbf16> to tensor<32x16xf32>
// CHECK-NEXT: return %[[LOSS]], %[[DWF]] : tensor<f32>, tensor<32x16xf32>
func.func @forward(%x: tensor<8x32xf32> {graph.kind = "input", graph.name = "x"},
                   %w: tensor<32x16xf32> {graph.kind = "trainable", graph.name = "w"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %1 = graph.tanh %0 : tensor<8x16xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<8x16xf32> -> tensor<f32>
  return %2 : tensor<f32>
}
