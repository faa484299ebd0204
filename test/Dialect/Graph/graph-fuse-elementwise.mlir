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

// -----

// Float casts at the boundary of an f32 chain are absorbed, exactly: the
// kernel widens each input to f32 on load (bf16/f16 -> f32 is exact, so a
// widening cast is the identity on the registers), computes every step in
// f32 as the f32 ops do one by one, and rounds the last register once on
// store, to nearest even as graph.cast does. So the fused op computes bit
// for bit what cast, the f32 ops and the final cast compute one by one.
// Here matmul(bf16) -> cast f32 -> add bias -> gelu -> cast bf16: the
// bf16 value is an input as it is, the result is bf16.
// CHECK-LABEL: func.func @casts_at_the_boundary
// CHECK-SAME: (%[[M:.*]]: tensor<4x8xbf16>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NOT: graph.cast
// CHECK: %[[R:.*]] = graph.fused_elementwise %[[M]], %[[B]] {lhs = array<i64: 0, 2>, ops = ["add", "gelu"], rhs = array<i64: 1, -1>}
// CHECK-SAME: (tensor<4x8xbf16>, tensor<8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT: return %[[R]]
func.func @casts_at_the_boundary(%m: tensor<4x8xbf16>, %b: tensor<8xf32>) -> tensor<4x8xbf16> {
  %0 = graph.cast %m : tensor<4x8xbf16> to tensor<4x8xf32>
  %1 = graph.add %0, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = graph.gelu %1 : tensor<4x8xf32>
  %3 = graph.cast %2 : tensor<4x8xf32> to tensor<4x8xbf16>
  return %3 : tensor<4x8xbf16>
}

// -----

// One real step is enough when a cast goes with it: add -> cast bf16 (a
// narrowing root), and cast f32 -> div (a widening input, here f16, and an
// f32 result). Two widened uses of one value are one input.
// CHECK-LABEL: func.func @one_step_and_a_cast
// CHECK: %[[A:.*]] = graph.fused_elementwise %{{.*}}, %{{.*}} {lhs = array<i64: 0>, ops = ["add"], rhs = array<i64: 1>} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xbf16>
// CHECK: %[[D:.*]] = graph.fused_elementwise %{{.*}}, %{{.*}} {lhs = array<i64: 0>, ops = ["div"], rhs = array<i64: 1>} : (tensor<8xf16>, tensor<1xf32>) -> tensor<8xf32>
// CHECK: %[[T:.*]] = graph.fused_elementwise %{{.*}} {lhs = array<i64: 0>, ops = ["mul"], rhs = array<i64: 0>} : (tensor<8xbf16>) -> tensor<8xf32>
// CHECK-NOT: graph.cast
// CHECK: return %[[A]], %[[D]], %[[T]]
func.func @one_step_and_a_cast(%x: tensor<8xf32>, %y: tensor<8xf32>, %h: tensor<8xf16>, %s: tensor<1xf32>, %z: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>) {
  %0 = graph.add %x, %y : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = graph.cast %0 : tensor<8xf32> to tensor<8xbf16>
  %2 = graph.cast %h : tensor<8xf16> to tensor<8xf32>
  %3 = graph.div %2, %s : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
  %4 = graph.cast %z : tensor<8xbf16> to tensor<8xf32>
  %5 = graph.cast %z : tensor<8xbf16> to tensor<8xf32>
  %6 = graph.mul %4, %5 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %1, %3, %6 : tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>
}

// -----

// A narrowing cast in the middle is not absorbed (fused, the chain would
// skip its rounding): it roots the group below it, and the widening cast
// after it is absorbed above, reading its bf16 result as an input.
// CHECK-LABEL: func.func @narrowing_in_the_middle
// CHECK: %[[N:.*]] = graph.fused_elementwise %{{.*}} {lhs = array<i64: 0>, ops = ["exp"], rhs = array<i64: -1>} : (tensor<8xf32>) -> tensor<8xbf16>
// CHECK: %[[R:.*]] = graph.fused_elementwise %[[N]] {lhs = array<i64: 0>, ops = ["neg"], rhs = array<i64: -1>} : (tensor<8xbf16>) -> tensor<8xf32>
// CHECK-NOT: graph.cast
// CHECK: return %[[R]]
func.func @narrowing_in_the_middle(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = graph.exp %x : tensor<8xf32>
  %1 = graph.cast %0 : tensor<8xf32> to tensor<8xbf16>
  %2 = graph.cast %1 : tensor<8xbf16> to tensor<8xf32>
  %3 = graph.neg %2 : tensor<8xf32>
  return %3 : tensor<8xf32>
}

// -----

// A narrowing cast with another user stays: the chain below it is fused
// into an f32 result, and the cast reads that.
// CHECK-LABEL: func.func @narrowing_with_two_users
// CHECK: %[[F:.*]] = graph.fused_elementwise %{{.*}} {lhs = array<i64: 0, 1>, ops = ["exp", "neg"], rhs = array<i64: -1, -1>} : (tensor<8xf32>) -> tensor<8xf32>
// CHECK: %[[C:.*]] = graph.cast %[[F]] : tensor<8xf32> to tensor<8xbf16>
// CHECK: return %[[F]], %[[C]]
func.func @narrowing_with_two_users(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xbf16>) {
  %0 = graph.exp %x : tensor<8xf32>
  %1 = graph.neg %0 : tensor<8xf32>
  %2 = graph.cast %1 : tensor<8xf32> to tensor<8xbf16>
  return %1, %2 : tensor<8xf32>, tensor<8xbf16>
}

// -----

// A bf16 chain is fused as before and gets no casts: the widening cast
// of its result and the narrowing cast of its input stay (absorbing them
// would change the type its steps compute in). A group of casts alone is
// not fused.
// CHECK-LABEL: func.func @bf16_chain_untouched
// CHECK: %[[N:.*]] = graph.cast %{{.*}} : tensor<8xf32> to tensor<8xbf16>
// CHECK: %[[F:.*]] = graph.fused_elementwise %[[N]], %{{.*}} {lhs = array<i64: 0, 2>, ops = ["add", "exp"], rhs = array<i64: 1, -1>} : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
// CHECK: %[[W:.*]] = graph.cast %[[F]] : tensor<8xbf16> to tensor<8xf32>
// CHECK: %[[C1:.*]] = graph.cast %{{.*}} : tensor<8xbf16> to tensor<8xf32>
// CHECK: %[[C2:.*]] = graph.cast %[[C1]] : tensor<8xf32> to tensor<8xf16>
// CHECK: return %[[W]], %[[C2]]
func.func @bf16_chain_untouched(%x: tensor<8xf32>, %y: tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xf16>) {
  %0 = graph.cast %x : tensor<8xf32> to tensor<8xbf16>
  %1 = graph.add %0, %y : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %2 = graph.exp %1 : tensor<8xbf16>
  %3 = graph.cast %2 : tensor<8xbf16> to tensor<8xf32>
  %4 = graph.cast %y : tensor<8xbf16> to tensor<8xf32>
  %5 = graph.cast %4 : tensor<8xf32> to tensor<8xf16>
  return %3, %5 : tensor<8xf32>, tensor<8xf16>
}

// -----

// A bias gradient: the GELU backward chain's f32 result feeds only its
// sum over the leading dims and the bf16 cast for the matmuls. One op
// gives both; the f32 tensor is gone.
// CHECK-LABEL: func.func @bias_grad_chain
// CHECK-SAME: (%[[P:.*]]: tensor<2x4x8xf32>, %[[D:.*]]: tensor<2x4x8xf32>)
// CHECK-NOT: graph.cast
// CHECK-NOT: graph.reduce_sum
// CHECK: %[[R:.*]], %[[S:.*]] = graph.fused_elementwise %[[P]], %[[D]] {lhs = array<i64: 0, 2>, ops = ["gelu_derivative", "mul"], rhs = array<i64: -1, 1>} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xbf16>, tensor<8xf32>)
// CHECK-NEXT: return %[[R]], %[[S]]
func.func @bias_grad_chain(%p: tensor<2x4x8xf32>, %d: tensor<2x4x8xf32>) -> (tensor<2x4x8xbf16>, tensor<8xf32>) {
  %0 = graph.gelu_derivative %p : tensor<2x4x8xf32>
  %1 = graph.mul %0, %d : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4x8xf32> -> tensor<8xf32>
  %3 = graph.cast %1 : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
  return %3, %2 : tensor<2x4x8xbf16>, tensor<8xf32>
}

// -----

// One step op is enough (each distinct operand one input), and the sum may
// keep several trailing dims.
// CHECK-LABEL: func.func @bias_grad_single
// CHECK-SAME: (%[[X:.*]]: tensor<4x2x8xf32>)
// CHECK: %[[R:.*]], %[[S:.*]] = graph.fused_elementwise %[[X]] {lhs = array<i64: 0>, ops = ["mul"], rhs = array<i64: 0>} : (tensor<4x2x8xf32>) -> (tensor<4x2x8xf16>, tensor<2x8xf32>)
// CHECK-NEXT: return %[[R]], %[[S]]
func.func @bias_grad_single(%x: tensor<4x2x8xf32>) -> (tensor<4x2x8xf16>, tensor<2x8xf32>) {
  %0 = graph.mul %x, %x : (tensor<4x2x8xf32>, tensor<4x2x8xf32>) -> tensor<4x2x8xf32>
  %1 = graph.cast %0 : tensor<4x2x8xf32> to tensor<4x2x8xf16>
  %2 = graph.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<4x2x8xf32> -> tensor<2x8xf32>
  return %1, %2 : tensor<4x2x8xf16>, tensor<2x8xf32>
}

// -----

// A value the residual path reads on (a norm's input gradient): the sum
// and the cast come from one op with no steps, reading it once; the value
// stays.
// CHECK-LABEL: func.func @bias_grad_shared
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK: %[[T:.*]] = graph.tanh %[[X]]
// CHECK-NEXT: %[[R:.*]], %[[S:.*]] = graph.fused_elementwise %[[T]] {lhs = array<i64>, ops = [], rhs = array<i64>} : (tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<8xf32>)
// CHECK-NEXT: return %[[S]], %[[R]], %[[T]]
func.func @bias_grad_shared(%x: tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>) {
  %0 = graph.tanh %x : tensor<4x8xf32>
  %1 = graph.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
  %2 = graph.cast %0 : tensor<4x8xf32> to tensor<4x8xbf16>
  return %1, %2, %0 : tensor<8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>
}

// -----

// Not a bias gradient: a sum over a trailing dim, a sum that keeps its
// dims, a single total, a sum without a narrowing cast. Each stays as it
// is.
// CHECK-LABEL: func.func @not_bias_grads
// CHECK-COUNT-4: graph.reduce_sum
// CHECK-NOT: -> (tensor
func.func @not_bias_grads(%x: tensor<4x8xf32>, %y: tensor<4x1xf32>) -> (tensor<4xf32>, tensor<4x8xbf16>, tensor<1x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<4x8xf32>, tensor<1xf32>, tensor<4x1xbf16>) {
  %0 = graph.exp %x : tensor<4x8xf32>
  %1 = graph.reduce_sum %0 {axes = array<i64: 1>, keepdims = false} : tensor<4x8xf32> -> tensor<4xf32>
  %2 = graph.cast %0 : tensor<4x8xf32> to tensor<4x8xbf16>
  %3 = graph.neg %x : tensor<4x8xf32>
  %4 = graph.reduce_sum %3 {axes = array<i64: 0>, keepdims = true} : tensor<4x8xf32> -> tensor<1x8xf32>
  %5 = graph.cast %3 : tensor<4x8xf32> to tensor<4x8xbf16>
  %6 = graph.tanh %x : tensor<4x8xf32>
  %7 = graph.reduce_sum %6 {axes = array<i64: 0>, keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
  %9 = graph.sqrt %y : tensor<4x1xf32>
  %10 = graph.reduce_sum %9 {axes = array<i64: 0>, keepdims = false} : tensor<4x1xf32> -> tensor<1xf32>
  %11 = graph.cast %9 : tensor<4x1xf32> to tensor<4x1xbf16>
  return %1, %2, %4, %5, %7, %6, %10, %11 : tensor<4xf32>, tensor<4x8xbf16>, tensor<1x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<4x8xf32>, tensor<1xf32>, tensor<4x1xbf16>
}
