// RUN: lamina-opt %s -split-input-file -graph-fuse-elementwise | FileCheck %s

// A chain with broadcast inputs becomes one op; registers follow first use.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>, %[[S:.*]]: tensor<1xf32>)
// CHECK-NOT: graph.add
// CHECK: %[[R:.*]] = graph.fused_elementwise %[[X]], %[[B]], %[[S]]
// CHECK-SAME: lhs = array<i64: 0, 3, 4>, ops = ["add", "gelu_tanh", "mul"], rhs = array<i64: 1, -1, 2>
// CHECK-SAME: (tensor<4x8xf32>, tensor<8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %s: tensor<1xf32>) -> tensor<4x8xf32> {
  %0 = graph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = graph.gelu %0 {tanh} : tensor<4x8xf32>
  %2 = graph.mul %1, %s : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// A DAG: an intermediate read by two ops of the group, an input read twice.
// CHECK-LABEL: func.func @dag
// CHECK: %[[R:.*]] = graph.fused_elementwise %{{.*}}, %{{.*}} {lhs = array<i64: 0, 2, 2, 3>, ops = ["sub", "exp", "mul", "div"], rhs = array<i64: 1, -1, 0, 4>}
// CHECK-NEXT: return %[[R]]
func.func @dag(%x: tensor<16xbf16>, %y: tensor<16xbf16>) -> tensor<16xbf16> {
  %0 = graph.sub %x, %y : (tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  %1 = graph.exp %0 : tensor<16xbf16>
  %2 = graph.mul %0, %x : (tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  %3 = graph.div %1, %2 : (tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  return %3 : tensor<16xbf16>
}

// -----

// An intermediate with another user ends the group: the exp (read by the
// reduction too) is the input of the group above it and roots its own.
// CHECK-LABEL: func.func @multi_use
// CHECK: %[[E:.*]] = graph.fused_elementwise %{{.*}} {lhs = array<i64: 0, 1>, ops = ["neg", "exp"], rhs = array<i64: -1, -1>}
// CHECK: %[[F:.*]] = graph.fused_elementwise %[[E]], %{{.*}} {lhs = array<i64: 0, 2>, ops = ["add", "tanh"], rhs = array<i64: 1, -1>}
// CHECK: %[[S:.*]] = graph.reduce_sum %[[E]]
// CHECK: return %[[F]], %[[S]]
func.func @multi_use(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<f32>) {
  %0 = graph.neg %x : tensor<8xf32>
  %1 = graph.exp %0 : tensor<8xf32>
  %2 = graph.add %1, %y : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %3 = graph.tanh %2 : tensor<8xf32>
  %4 = graph.reduce_sum %1 {axes = array<i64: 0>, keepdims = false} : tensor<8xf32> -> tensor<f32>
  return %3, %4 : tensor<8xf32>, tensor<f32>
}

// -----

// An intermediate that is a function result is not fused into its user.
// CHECK-LABEL: func.func @returned
// CHECK: %[[A:.*]] = graph.add
// CHECK-NEXT: %[[T:.*]] = graph.tanh %[[A]]
// CHECK-NEXT: return %[[A]], %[[T]]
func.func @returned(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = graph.add %x, %y : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = graph.tanh %0 : tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// Integer and f64 ops are not fused (the kernels compute f32, f16, bf16);
// nor are compares, selects and casts.
// CHECK-LABEL: func.func @not_float
// CHECK: graph.add %{{.*}} : (tensor<8xi64>
// CHECK: graph.mul %{{.*}} : (tensor<8xi64>
// CHECK: graph.exp %{{.*}} : tensor<8xf64>
// CHECK: graph.neg %{{.*}} : tensor<8xf64>
// CHECK: graph.cast
// CHECK: graph.neg %{{.*}} : tensor<8xf32>
// CHECK-NOT: graph.fused_elementwise
func.func @not_float(%i: tensor<8xi64>, %d: tensor<8xf64>) -> (tensor<8xi64>, tensor<8xf64>, tensor<8xf32>) {
  %0 = graph.add %i, %i : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  %1 = graph.mul %0, %i : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  %2 = graph.exp %d : tensor<8xf64>
  %3 = graph.neg %2 : tensor<8xf64>
  %4 = graph.cast %1 : tensor<8xi64> to tensor<8xf32>
  %5 = graph.neg %4 : tensor<8xf32>
  return %1, %3, %5 : tensor<8xi64>, tensor<8xf64>, tensor<8xf32>
}

// -----

// At most 4 inputs: taking the first add would make a fifth (a, b, c, d,
// e), so it stays and its result is an input.
// CHECK-LABEL: func.func @input_limit
// CHECK: %[[A:.*]] = graph.add
// CHECK-NEXT: %[[G:.*]] = graph.fused_elementwise %[[A]], %{{.*}}, %{{.*}}, %{{.*}} {lhs = array<i64: 0, 4, 5, 6>, ops = ["exp", "add", "add", "add"], rhs = array<i64: -1, 1, 2, 3>}
// CHECK-NEXT: return %[[G]]
func.func @input_limit(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>, %d: tensor<8xf32>, %e: tensor<8xf32>) -> tensor<8xf32> {
  %0 = graph.add %a, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = graph.exp %0 : tensor<8xf32>
  %2 = graph.add %1, %c : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %3 = graph.add %2, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = graph.add %3, %e : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %4 : tensor<8xf32>
}

// -----

// At most 16 steps: a chain of 18 unary ops becomes 16 + 2.
// CHECK-LABEL: func.func @step_limit
// CHECK: %[[G1:.*]] = graph.fused_elementwise %{{.*}} {lhs = array<i64: 0, 1>, ops = ["neg", "neg"]
// CHECK: %[[G2:.*]] = graph.fused_elementwise %[[G1]] {lhs = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>
// CHECK-NEXT: return %[[G2]]
func.func @step_limit(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = graph.neg %x : tensor<8xf32>
  %1 = graph.neg %0 : tensor<8xf32>
  %2 = graph.neg %1 : tensor<8xf32>
  %3 = graph.neg %2 : tensor<8xf32>
  %4 = graph.neg %3 : tensor<8xf32>
  %5 = graph.neg %4 : tensor<8xf32>
  %6 = graph.neg %5 : tensor<8xf32>
  %7 = graph.neg %6 : tensor<8xf32>
  %8 = graph.neg %7 : tensor<8xf32>
  %9 = graph.neg %8 : tensor<8xf32>
  %10 = graph.neg %9 : tensor<8xf32>
  %11 = graph.neg %10 : tensor<8xf32>
  %12 = graph.neg %11 : tensor<8xf32>
  %13 = graph.neg %12 : tensor<8xf32>
  %14 = graph.neg %13 : tensor<8xf32>
  %15 = graph.neg %14 : tensor<8xf32>
  %16 = graph.neg %15 : tensor<8xf32>
  %17 = graph.neg %16 : tensor<8xf32>
  return %17 : tensor<8xf32>
}

// -----

// A smaller intermediate (it would be recomputed per broadcast element) is
// an input of the group, not a step of it.
// CHECK-LABEL: func.func @smaller_intermediate
// CHECK: %[[S:.*]] = graph.sqrt %{{.*}} : tensor<4x1xf32>
// CHECK: graph.fused_elementwise %{{.*}}, %[[S]] {lhs = array<i64: 0, 2>, ops = ["div", "relu"], rhs = array<i64: 1, -1>}
func.func @smaller_intermediate(%x: tensor<4x8xf32>, %v: tensor<4x1xf32>) -> tensor<4x8xf32> {
  %0 = graph.sqrt %v : tensor<4x1xf32>
  %1 = graph.div %x, %0 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %2 = graph.relu %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// A single op stays as it is.
// CHECK-LABEL: func.func @single
// CHECK: graph.add
// CHECK-NOT: graph.fused_elementwise
func.func @single(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = graph.add %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
