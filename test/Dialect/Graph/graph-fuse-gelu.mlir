// RUN: lamina-opt %s -split-input-file -graph-fuse-gelu | FileCheck %s

// GPT-2's tanh form, as the TorchScript exporter writes it: (0.5 x) * (1 + tanh(...)).
// CHECK-LABEL: func.func @tanh_form
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>
// CHECK-NOT: graph.{{(tanh|pow|mul|add)}}
// CHECK: %[[G:.*]] = graph.gelu %[[X]] {tanh} : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @tanh_form(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %0 = graph.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %three = graph.constant dense<3.000000e+00> : tensor<f32>
  %1 = graph.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %k = graph.constant dense<4.471500e-02> : tensor<f32>
  %2 = graph.mul %1, %k : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = graph.add %x, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = graph.constant dense<0.797884583> : tensor<f32>
  %4 = graph.mul %3, %s : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %5 = graph.tanh %4 : tensor<2x8xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %6 = graph.add %5, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %7 = graph.mul %0, %6 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %7 : tensor<2x8xf32>
}

// -----

// BERT's erf form with the factors in the other order: (x * (1 + erf(x / sqrt 2))) * 0.5.
// CHECK-LABEL: func.func @erf_form
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>
// CHECK-NOT: graph.{{(erf|div|mul|add)}}
// CHECK: %[[G:.*]] = graph.gelu %[[X]] : tensor<4xf32>
// CHECK-NEXT: return %[[G]]
func.func @erf_form(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r2 = graph.constant dense<1.41421354> : tensor<f32>
  %0 = graph.div %x, %r2 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = graph.erf %0 : tensor<4xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %2 = graph.add %one, %1 : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = graph.mul %x, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %4 = graph.mul %3, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// An intermediate value with another use keeps the chain as it is.
// CHECK-LABEL: func.func @shared_intermediate
// CHECK-NOT: graph.gelu
// CHECK: graph.erf
func.func @shared_intermediate(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %r2 = graph.constant dense<1.41421354> : tensor<f32>
  %0 = graph.div %x, %r2 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = graph.erf %0 : tensor<4xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %2 = graph.add %1, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = graph.mul %x, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %4 = graph.mul %3, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %4, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A different constant is not GELU.
// CHECK-LABEL: func.func @wrong_constant
// CHECK-NOT: graph.gelu
func.func @wrong_constant(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r2 = graph.constant dense<2.0> : tensor<f32>
  %0 = graph.div %x, %r2 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = graph.erf %0 : tensor<4xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %2 = graph.add %1, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = graph.mul %x, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %4 = graph.mul %3, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// Only the chain goes: an op the function leaves unread stays (the pass
// erases no dead op but the chain's).
// CHECK-LABEL: func.func @unread_op_stays
// CHECK: graph.neg
// CHECK: graph.gelu
func.func @unread_op_stays(%x: tensor<4xf32>) -> tensor<4xf32> {
  %unread = graph.neg %x : tensor<4xf32>
  %r2 = graph.constant dense<1.41421354> : tensor<f32>
  %0 = graph.div %x, %r2 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = graph.erf %0 : tensor<4xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %2 = graph.add %1, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = graph.mul %x, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %4 = graph.mul %3, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}
