// RUN: lamina-opt %s -canonicalize -split-input-file | FileCheck %s

// Exporter-style shape arithmetic folds to one constant.
// CHECK-LABEL: func @shape_arith
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[2, 16, 4, 16]> : tensor<4xi64>
// CHECK-NEXT: return %[[C]]
func.func @shape_arith() -> tensor<4xi64> {
  %shape = graph.constant dense<[2, 16, 64]> : tensor<3xi64>
  %i0 = graph.constant dense<0> : tensor<i64>
  %i1 = graph.constant dense<1> : tensor<i64>
  %heads = graph.constant dense<[4]> : tensor<1xi64>
  %b = graph.gather %shape, %i0 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %s = graph.gather %shape, %i1 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %hid = graph.slice %shape {starts = array<i64: 2>, sizes = array<i64: 1>, steps = array<i64: 1>} : tensor<3xi64> -> tensor<1xi64>
  %hd = graph.div %hid, %heads : (tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %b1 = graph.reshape %b : tensor<i64> to tensor<1xi64>
  %s1 = graph.reshape %s : tensor<i64> to tensor<1xi64>
  %r = graph.concat %b1, %s1, %heads, %hd {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  return %r : tensor<4xi64>
}

// -----
// Float scalars fold with rounding to the element type: 1/sqrt(64).
// CHECK-LABEL: func @scale
// CHECK-NEXT: graph.constant dense<1.250000e-01> : tensor<f32>
func.func @scale() -> tensor<f32> {
  %c = graph.constant dense<64> : tensor<i64>
  %f = graph.cast %c : tensor<i64> to tensor<f32>
  %s = graph.sqrt %f : tensor<f32>
  %r = graph.reciprocal %s : tensor<f32>
  return %r : tensor<f32>
}

// -----
// Splats fold at any size: a causal-mask fill never materialises.
// CHECK-LABEL: func @splat
// CHECK-NEXT: graph.constant dense<-1.000000e+09> : tensor<2048x2048xf32>
func.func @splat() -> tensor<2048x2048xf32> {
  %c = graph.constant dense<1.0> : tensor<2048x2048xf32>
  %m = graph.constant dense<-1.0e9> : tensor<f32>
  %r = graph.mul %c, %m : (tensor<2048x2048xf32>, tensor<f32>) -> tensor<2048x2048xf32>
  return %r : tensor<2048x2048xf32>
}

// -----
// Identities fold to their input.
// CHECK-LABEL: func @identities
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identities(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.transpose %x {perm = array<i64: 0, 1>} : tensor<2x3xf32> -> tensor<2x3xf32>
  %1 = graph.reshape %0 : tensor<2x3xf32> to tensor<2x3xf32>
  %2 = graph.broadcast %1 : tensor<2x3xf32> to tensor<2x3xf32>
  %3 = graph.slice %2 {starts = array<i64: 0, 0>, sizes = array<i64: 2, 3>, steps = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<2x3xf32>
  %4 = graph.cast %3 : tensor<2x3xf32> to tensor<2x3xf32>
  %5 = graph.concat %4 {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %5 : tensor<2x3xf32>
}

// -----
// Reshape of reshape is one reshape.
// CHECK-LABEL: func @reshape_chain
// CHECK-NEXT: graph.reshape %{{.*}} : tensor<2x3xf32> to tensor<6xf32>
// CHECK-NEXT: return
func.func @reshape_chain(%x: tensor<2x3xf32>) -> tensor<6xf32> {
  %0 = graph.reshape %x : tensor<2x3xf32> to tensor<3x2xf32>
  %1 = graph.reshape %0 : tensor<3x2xf32> to tensor<6xf32>
  return %1 : tensor<6xf32>
}

// -----
// Where on shape values and comparisons fold (a TorchScript idiom for
// Reshape's "0 keeps the dim").
// CHECK-LABEL: func @where_shape
// CHECK-NEXT: graph.constant dense<[2, 16, 1]> : tensor<3xi64>
func.func @where_shape() -> tensor<3xi64> {
  %shape = graph.constant dense<[2, 16, -1]> : tensor<3xi64>
  %neg = graph.constant dense<-1> : tensor<i64>
  %one = graph.constant dense<1> : tensor<3xi64>
  %eq = graph.equal %shape, %neg : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %r = graph.select %eq, %one, %shape : (tensor<3xi1>, tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  return %r : tensor<3xi64>
}

// -----
// Reductions of constants fold; ReduceProd of a shape gives its size.
// CHECK-LABEL: func @reduce
// CHECK-DAG: graph.constant dense<24> : tensor<i64>
// CHECK-DAG: graph.constant dense<[2.000000e+00, 5.000000e+00]> : tensor<2xf32>
func.func @reduce() -> (tensor<i64>, tensor<2xf32>) {
  %shape = graph.constant dense<[2, 3, 4]> : tensor<3xi64>
  %p = graph.reduce_prod %shape {axes = array<i64: 0>, keepdims = false} : tensor<3xi64> -> tensor<i64>
  %m = graph.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %r = graph.reduce_mean %m {axes = array<i64: 1>, keepdims = false} : tensor<2x3xf32> -> tensor<2xf32>
  return %p, %r : tensor<i64>, tensor<2xf32>
}

// -----
// Trilu of a small constant folds.
// CHECK-LABEL: func @trilu
// CHECK-NEXT: graph.constant dense<{{\[\[}}1, 0, 0], [1, 1, 0], [1, 1, 1]]> : tensor<3x3xi64>
func.func @trilu() -> tensor<3x3xi64> {
  %c = graph.constant dense<1> : tensor<3x3xi64>
  %r = graph.trilu %c {k = 0 : i64} : tensor<3x3xi64>
  return %r : tensor<3x3xi64>
}

// -----
// Integer division by zero is left for the runtime.
// CHECK-LABEL: func @div_zero
// CHECK: graph.div
func.func @div_zero() -> tensor<i64> {
  %a = graph.constant dense<7> : tensor<i64>
  %z = graph.constant dense<0> : tensor<i64>
  %r = graph.div %a, %z : (tensor<i64>, tensor<i64>) -> tensor<i64>
  return %r : tensor<i64>
}

// -----
// Casts: float to int truncates toward zero, anything to i1 tests != 0.
// CHECK-LABEL: func @casts
// CHECK-DAG: graph.constant dense<[-2, 2]> : tensor<2xi64>
// CHECK-DAG: graph.constant dense<[true, false]> : tensor<2xi1>
func.func @casts() -> (tensor<2xi64>, tensor<2xi1>) {
  %f = graph.constant dense<[-2.7, 2.7]> : tensor<2xf32>
  %i = graph.cast %f : tensor<2xf32> to tensor<2xi64>
  %g = graph.constant dense<[0.5, 0.0]> : tensor<2xf32>
  %b = graph.cast %g : tensor<2xf32> to tensor<2xi1>
  return %i, %b : tensor<2xi64>, tensor<2xi1>
}
