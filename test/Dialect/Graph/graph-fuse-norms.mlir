// RUN: lamina-opt %s -split-input-file -graph-fuse-norms | FileCheck %s

// LLaMA's RMSNorm as torch.export writes it: pow, mean over the last dim,
// + eps, sqrt, reciprocal, * x, then the weight on the left.
// CHECK-LABEL: func.func @rms_reciprocal
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[Y:.*]] = graph.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999{{[0-9]*}}{{[eE]}}-7 : f64} : tensor<2x3x8xf32>, tensor<8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rms_reciprocal(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %two = graph.constant dense<2.000000e+00> : tensor<f32>
  %p = graph.pow %x, %two : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %m = graph.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %eps = graph.constant dense<9.99999997E-7> : tensor<f32>
  %a = graph.add %m, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %s = graph.sqrt %a : tensor<2x3x1xf32>
  %r = graph.reciprocal %s : tensor<2x3x1xf32>
  %n = graph.mul %x, %r : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %y = graph.mul %w, %n : (tensor<8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// TorchScript's spelling: 1 / sqrt as a division, x * x as the square,
// the weight on the right.
// CHECK-LABEL: func.func @rms_divide
// CHECK-NEXT: graph.rms_norm
// CHECK-NEXT: return
func.func @rms_divide(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %p = graph.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = graph.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %eps = graph.constant dense<1.000000e-05> : tensor<f32>
  %a = graph.add %eps, %m : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %s = graph.sqrt %a : tensor<4x1xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %r = graph.div %one, %s : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = graph.mul %r, %x : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = graph.mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// GPT-2's LayerNorm at opset 14 (TorchScript): the centred value is read
// by its square and by the division.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x8xf32>, %[[W:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[Y:.*]] = graph.layer_norm %[[X]], %[[W]], %[[B]] {axis = 2 : i64, epsilon = 9.99999{{[0-9]*}}{{[eE]}}-6 : f64} : tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %mean = graph.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %d = graph.sub %x, %mean : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %two = graph.constant dense<2.000000e+00> : tensor<f32>
  %p = graph.pow %d, %two : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %v = graph.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %eps = graph.constant dense<9.99999974E-6> : tensor<f32>
  %a = graph.add %v, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %s = graph.sqrt %a : tensor<2x3x1xf32>
  %n = graph.div %d, %s : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %m = graph.mul %n, %w : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %y = graph.add %m, %b : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// No bias after the scale: a layer_norm without one.
// CHECK-LABEL: func.func @layer_norm_no_bias
// CHECK-NEXT: %[[Y:.*]] = graph.layer_norm %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999{{[0-9]*}}{{[eE]}}-6 : f64} : tensor<4x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[R:.*]] = graph.relu %[[Y]]
func.func @layer_norm_no_bias(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %mean = graph.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = graph.sub %x, %mean : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = graph.mul %d, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %v = graph.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %eps = graph.constant dense<1.000000e-05> : tensor<f32>
  %a = graph.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = graph.sqrt %a : tensor<4x1xf32>
  %n = graph.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %m = graph.mul %w, %n : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = graph.relu %m : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Left alone: the statistic is read elsewhere too (its value must stay),
// and a mean over another dim is no norm.
// CHECK-LABEL: func.func @rms_statistic_read
// CHECK-NOT: graph.rms_norm
// CHECK: graph.reciprocal
func.func @rms_statistic_read(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  %p = graph.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = graph.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %eps = graph.constant dense<1.000000e-05> : tensor<f32>
  %a = graph.add %m, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = graph.sqrt %a : tensor<4x1xf32>
  %r = graph.reciprocal %s : tensor<4x1xf32>
  %n = graph.mul %x, %r : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = graph.mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y, %s : tensor<4x8xf32>, tensor<4x1xf32>
}

// -----

// CHECK-LABEL: func.func @mean_over_rows
// CHECK-NOT: graph.rms_norm
func.func @mean_over_rows(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %p = graph.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = graph.reduce_mean %p {axes = array<i64: 0>, keepdims = true} : tensor<4x8xf32> -> tensor<1x8xf32>
  %eps = graph.constant dense<1.000000e-05> : tensor<f32>
  %a = graph.add %m, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %s = graph.sqrt %a : tensor<1x8xf32>
  %r = graph.reciprocal %s : tensor<1x8xf32>
  %n = graph.mul %x, %r : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %y = graph.mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
