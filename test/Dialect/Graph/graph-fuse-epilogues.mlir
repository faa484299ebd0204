// RUN: lamina-opt %s -split-input-file -graph-fuse-epilogues | FileCheck %s
// RUN: lamina-opt %s -split-input-file -graph-fuse-epilogues -convert-graph-to-rt | FileCheck %s --check-prefix=RT

// graph-fuse-epilogues: the adds and the narrowing cast after a
// matmul become its epilogue.

// A linear layer and the residual add after it: bias, then addend, one op
// named after the matmul's node.
// CHECK-LABEL: func.func @bias_then_residual
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xbf16>, %[[W:.*]]: tensor<8x8xbf16>, %[[B:.*]]: tensor<8xf32>, %[[R:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = graph.fused_matmul %[[X]], %[[W]] bias %[[B]] addend %[[R]] : (tensor<2x4x8xbf16>, tensor<8x8xbf16>, tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[Y]]
// Lowered: one call, bias and addend in place of the unit attributes an
// absent one would get.
// RT-LABEL: func.func @bias_then_residual
// RT: rt.call "lamina::rt::gen::matmulEpilogue"(%{{.*}}) {args = [0 : index, 1 : index, 2 : index, 3 : index, 4 : index, false, false], where = "node 'proj' (graph.fused_matmul)"}
// RT-NEXT: return
func.func @bias_then_residual(%x: tensor<2x4x8xbf16>, %w: tensor<8x8xbf16>, %b: tensor<8xf32>, %r: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = graph.matmul %x, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xf32> loc("proj")
  %1 = graph.add %0, %b : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> loc("proj_bias")
  %2 = graph.add %r, %1 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("residual")
  return %2 : tensor<2x4x8xf32>
}

// -----

// The bias as a [1, n] row, the sum written either way round; f32 throughout.
// CHECK-LABEL: func.func @row_bias
// CHECK-NEXT: graph.fused_matmul %arg0, %arg1 bias %arg2 : (tensor<4x8xf32>, tensor<8x3xf32>, tensor<1x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT: return
func.func @row_bias(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<1x3xf32>) -> tensor<4x3xf32> {
  %0 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = graph.add %b, %0 : (tensor<1x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %1 : tensor<4x3xf32>
}

// -----

// Lowered: the transposed lhs read with BLAS's flag (no transpose kernel),
// the result written over the addend, whose value dies here; an absent
// bias is a unit attribute.
// RT-LABEL: func.func @transposed_in_place
// RT: %[[E:.*]] = rt.view %arg0[[[OFF:[0-9]+]]] : memref<4x3xf32>
// RT-NEXT: rt.call "lamina::rt::unary"
// RT-NEXT: %[[Y:.*]] = rt.view %arg0[[[OFF]]] : memref<4x3xf32>
// RT-NEXT: rt.call "lamina::rt::gen::matmulEpilogue"(%arg1, %arg2, %[[E]], %[[Y]]) {args = [0 : index, 1 : index, unit, 2 : index, 3 : index, true, false]
// RT-NEXT: return
func.func @transposed_in_place(%x: tensor<8x4xf32>, %w: tensor<8x3xf32>, %y: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %t = graph.transpose %x {perm = array<i64: 1, 0>} : tensor<8x4xf32> -> tensor<4x8xf32>
  %r = graph.exp %y : tensor<4x3xf32>
  %0 = graph.matmul %t, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = graph.add %0, %r : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %1 : tensor<4x3xf32>
}

// -----

// The q/k/v projection under mixed precision: its f32 sum is narrowed for
// the slices. The product is stored as bf16, the bias cast to bf16 first.
// CHECK-LABEL: func.func @narrowed
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xbf16>, %[[W:.*]]: tensor<8x6xbf16>, %[[B:.*]]: tensor<6xf32>)
// CHECK-NEXT: %[[NB:.*]] = graph.cast %[[B]] : tensor<6xf32> to tensor<6xbf16>
// CHECK-NEXT: %[[Y:.*]] = graph.fused_matmul %[[X]], %[[W]] bias %[[NB]] : (tensor<4x8xbf16>, tensor<8x6xbf16>, tensor<6xbf16>) -> tensor<4x6xbf16>
// CHECK-NEXT: return %[[Y]]
func.func @narrowed(%x: tensor<4x8xbf16>, %w: tensor<8x6xbf16>, %b: tensor<6xf32>) -> tensor<4x6xbf16> {
  %0 = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %1 = graph.add %0, %b : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %2 = graph.cast %1 : tensor<4x6xf32> to tensor<4x6xbf16>
  return %2 : tensor<4x6xbf16>
}

// -----

// A plain product narrowed (exact: the accumulator rounded once), and an
// addend that is a widened bf16 value moves as that value.
// CHECK-LABEL: func.func @narrowed_exact
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf16>, %[[W:.*]]: tensor<8x6xf16>, %[[A:.*]]: tensor<4x6xf16>)
// CHECK-NEXT: %[[P:.*]] = graph.matmul %[[X]], %[[W]] : (tensor<4x8xf16>, tensor<8x6xf16>) -> tensor<4x6xf16>
// CHECK-NEXT: %[[Q:.*]] = graph.fused_matmul %[[X]], %[[W]] addend %[[A]] : (tensor<4x8xf16>, tensor<8x6xf16>, tensor<4x6xf16>) -> tensor<4x6xf16>
// CHECK-NEXT: return %[[P]], %[[Q]]
func.func @narrowed_exact(%x: tensor<4x8xf16>, %w: tensor<8x6xf16>, %a: tensor<4x6xf16>) -> (tensor<4x6xf16>, tensor<4x6xf16>) {
  %0 = graph.matmul %x, %w : (tensor<4x8xf16>, tensor<8x6xf16>) -> tensor<4x6xf32>
  %1 = graph.cast %0 : tensor<4x6xf32> to tensor<4x6xf16>
  %wa = graph.cast %a : tensor<4x6xf16> to tensor<4x6xf32>
  %2 = graph.matmul %x, %w : (tensor<4x8xf16>, tensor<8x6xf16>) -> tensor<4x6xf32>
  %3 = graph.add %2, %wa : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %4 = graph.cast %3 : tensor<4x6xf32> to tensor<4x6xf16>
  return %1, %4 : tensor<4x6xf16>, tensor<4x6xf16>
}

// -----

// Left alone: a product something else reads too (its f32 value is
// needed), a sum that broadcasts the product up, a column (not a row), a
// second bias, an f32 addend under a narrowing cast (not exact: fused in
// f32, the cast stays), a cast of an f32 product of f32 operands.
// CHECK-LABEL: func.func @not_epilogues
// CHECK: graph.matmul
// CHECK-NEXT: graph.add
// CHECK-NEXT: graph.matmul
// CHECK-NEXT: graph.add
// CHECK-NEXT: graph.matmul
// CHECK-NEXT: graph.add
// CHECK-NEXT: graph.fused_matmul %arg0, %arg1 bias %arg2 :
// CHECK-NEXT: graph.add
// CHECK-NEXT: graph.fused_matmul %arg5, %arg6 addend %arg7 : {{.*}} -> tensor<4x3xf32>
// CHECK-NEXT: graph.cast
// CHECK-NEXT: graph.matmul
// CHECK-NEXT: graph.cast
// CHECK-NEXT: graph.add
// CHECK-NEXT: return
func.func @not_epilogues(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<3xf32>, %c: tensor<4x1xf32>, %big: tensor<2x4x3xf32>, %xb: tensor<4x8xbf16>, %wb: tensor<8x3xbf16>, %r: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<2x4x3xf32>, tensor<4x3xf32>, tensor<4x3xbf16>, tensor<4x3xbf16>) {
  %0 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = graph.add %0, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %2 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %3 = graph.add %2, %big : (tensor<4x3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  %4 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %5 = graph.add %4, %c : (tensor<4x3xf32>, tensor<4x1xf32>) -> tensor<4x3xf32>
  %6 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %7 = graph.add %6, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %8 = graph.add %7, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %9 = graph.matmul %xb, %wb : (tensor<4x8xbf16>, tensor<8x3xbf16>) -> tensor<4x3xf32>
  %10 = graph.add %9, %r : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %11 = graph.cast %10 : tensor<4x3xf32> to tensor<4x3xbf16>
  %12 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %13 = graph.cast %12 : tensor<4x3xf32> to tensor<4x3xbf16>
  %s = graph.add %0, %1 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %s, %5, %3, %8, %11, %13 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<2x4x3xf32>, tensor<4x3xf32>, tensor<4x3xbf16>, tensor<4x3xbf16>
}

// -----

// A norm's input gradient summed with the residual's (as autodiff writes
// it): the norm's gradient kernel adds it. The residual's gradient is
// defined before the norm gradient, so the fused op stays where it was and
// its parameter gradients keep their readers.
// CHECK-LABEL: func.func @norm_grad_residual
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[S:.*]]: tensor<8xf32>, %[[G:.*]]: tensor<4x8xf32>, %[[R:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[E:.*]] = graph.exp %[[R]]
// CHECK-NEXT: %[[DX:[a-z_0-9]+]], %[[DS:[a-z_0-9]+]], %[[DB:[a-z_0-9]+]] = graph.layer_norm_grad %[[X]], %[[S]], %[[G]] addend %[[E]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[N:.*]] = graph.neg %[[DS]]
// CHECK-NEXT: %[[DY:[a-z_0-9]+]], %[[DYS:[a-z_0-9]+]] = graph.rms_norm_grad %[[X]], %[[S]], %[[G]] addend %[[E]]
// CHECK-NEXT: return %[[DX]], %[[N]], %[[DB]], %[[DY]], %[[DYS]]
func.func @norm_grad_residual(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %g: tensor<4x8xf32>, %r: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>) {
  %e = graph.exp %r : tensor<4x8xf32>
  %dx:3 = graph.layer_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %n = graph.neg %dx#1 : tensor<8xf32>
  %sum = graph.add %dx#0, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dy:2 = graph.rms_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>
  %sum2 = graph.add %e, %dy#0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %sum, %n, %dx#2, %sum2, %dy#1 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// The other gradient computed after the norm gradient: the fused op moves
// to the add when its parameter gradients are read only after it, and
// stays unfused when one is read in between. A norm gradient read twice,
// or summed with a broadcast value, keeps its add.
// CHECK-LABEL: func.func @norm_grad_order
// CHECK: %[[A:[a-z_0-9]+]], %{{.*}}, %{{.*}} = graph.layer_norm_grad %arg0, %arg1, %arg2 {
// CHECK-NEXT: %[[E:.*]] = graph.exp %arg3
// CHECK-NEXT: graph.layer_norm_grad %arg0, %arg1, %arg2 addend %[[E]] {
// CHECK-NEXT: %[[C:[a-z_0-9]+]], %[[CS:[a-z_0-9]+]], %{{.*}} = graph.layer_norm_grad %arg0, %arg1, %arg2 {
// CHECK-NEXT: graph.neg %[[CS]]
// CHECK-NEXT: %[[F:.*]] = graph.exp %arg3
// CHECK-NEXT: graph.add %[[C]], %[[F]]
// CHECK-NEXT: graph.add %[[A]], %[[E]]
// CHECK-NEXT: graph.add %[[A]], %arg4
// CHECK-NEXT: return
func.func @norm_grad_order(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %g: tensor<4x8xf32>, %r: tensor<4x8xf32>, %row: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %a:3 = graph.layer_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %b:3 = graph.layer_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %e = graph.exp %r : tensor<4x8xf32>
  %sb = graph.add %b#0, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c:3 = graph.layer_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %n = graph.neg %c#1 : tensor<8xf32>
  %f = graph.exp %r : tensor<4x8xf32>
  %sc = graph.add %c#0, %f : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sa = graph.add %a#0, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sa2 = graph.add %a#0, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %sb, %b#1, %sc, %n, %sa, %sa2 : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// The LM head's gradient: a bf16 cast that is the f32 cross-entropy
// gradient's only use becomes the gradient's own type (the kernel rounds
// on store); with another use of the f32 gradient, nothing changes.
// CHECK-LABEL: func.func @narrow_cross_entropy_grad
// CHECK-NOT: graph.cast
// CHECK: %[[G:.*]] = graph.softmax_cross_entropy_grad %arg0, %arg1, %arg2 {ignore_index = -100 : i64} : (tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x10xbf16>
// CHECK-NEXT: return %[[G]]
// RT-LABEL: func.func @narrow_cross_entropy_grad
// RT: rt.call "lamina::rt::softmaxCrossEntropyBackward"{{.*}} memref<4x10xbf16>
func.func @narrow_cross_entropy_grad(%l: tensor<4x10xf32>, %t: tensor<4xi64>, %g: tensor<4xf32>) -> tensor<4x10xbf16> {
  %0 = graph.softmax_cross_entropy_grad %l, %t, %g {ignore_index = -100 : i64} : (tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x10xf32>
  %1 = graph.cast %0 : tensor<4x10xf32> to tensor<4x10xbf16>
  return %1 : tensor<4x10xbf16>
}

// -----

// CHECK-LABEL: func.func @cross_entropy_grad_kept
// CHECK: graph.softmax_cross_entropy_grad {{.*}} -> tensor<4x10xf32>
// CHECK: graph.cast
func.func @cross_entropy_grad_kept(%l: tensor<4x10xf32>, %t: tensor<4xi64>, %g: tensor<4xf32>) -> (tensor<4x10xbf16>, tensor<4x10xf32>) {
  %0 = graph.softmax_cross_entropy_grad %l, %t, %g {ignore_index = -100 : i64} : (tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x10xf32>
  %1 = graph.cast %0 : tensor<4x10xf32> to tensor<4x10xbf16>
  return %1, %0 : tensor<4x10xbf16>, tensor<4x10xf32>
}

// -----

// A transposed product (the tied LM head's weight gradient: (h^T d)^T) is
// computed as the swapped product of the transposed operands; every
// transpose then folds into the GEMM's flags, the operand that was itself
// a transpose read as stored.
// CHECK-LABEL: func.func @transposed_product
// CHECK: %[[HT:.*]] = graph.transpose %arg0
// CHECK-NEXT: %[[DT:.*]] = graph.transpose %arg1 {perm = array<i64: 1, 0>} : tensor<6x16xbf16> -> tensor<16x6xbf16>
// CHECK-NEXT: %[[HTT:.*]] = graph.transpose %[[HT]] {perm = array<i64: 1, 0>} : tensor<8x6xbf16> -> tensor<6x8xbf16>
// CHECK-NEXT: %[[P:.*]] = graph.matmul %[[DT]], %[[HTT]] : (tensor<16x6xbf16>, tensor<6x8xbf16>) -> tensor<16x8xbf16>
// CHECK-NEXT: return %[[P]]
// RT-LABEL: func.func @transposed_product
// RT-NOT: lamina::rt::transpose
// RT: rt.call "lamina::rt::matmul"(%arg2, %arg1, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, true, false]
func.func @transposed_product(%h: tensor<6x8xbf16>, %d: tensor<6x16xbf16>) -> tensor<16x8xbf16> {
  %ht = graph.transpose %h {perm = array<i64: 1, 0>} : tensor<6x8xbf16> -> tensor<8x6xbf16>
  %0 = graph.matmul %ht, %d : (tensor<8x6xbf16>, tensor<6x16xbf16>) -> tensor<8x16xbf16>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : tensor<8x16xbf16> -> tensor<16x8xbf16>
  return %1 : tensor<16x8xbf16>
}

// -----

// Products of bf16 operands read only by elementwise steps are stored in
// bf16 (an MLP's hidden pre-activation with its bias, read by the forward
// and the backward chains; the gradient of the activation), one widening
// cast per reader, which graph-fuse-elementwise absorbs: no f32 tensor
// between them. Kept f32: a product with an addend, one read by a
// non-elementwise op, one summed into a function result (a tied
// embedding's gradient), and a product of f32 operands.
// CHECK-LABEL: func.func @narrow_activations
// CHECK: %[[B:.*]] = graph.cast %arg2 : tensor<6xf32> to tensor<6xbf16>
// CHECK-NEXT: %[[H:.*]] = graph.fused_matmul %arg0, %arg1 bias %[[B]] : (tensor<4x8xbf16>, tensor<8x6xbf16>, tensor<6xbf16>) -> tensor<4x6xbf16>
// CHECK-NEXT: %[[D:.*]] = graph.matmul %arg0, %arg1 : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
// CHECK-NEXT: %[[H1:.*]] = graph.cast %[[H]] : tensor<4x6xbf16> to tensor<4x6xf32>
// CHECK-NEXT: graph.gelu %[[H1]]
// CHECK-DAG: %[[D1:.*]] = graph.cast %[[D]] : tensor<4x6xbf16> to tensor<4x6xf32>
// CHECK-DAG: %[[H2:.*]] = graph.cast %[[H]] : tensor<4x6xbf16> to tensor<4x6xf32>
// CHECK: graph.mul %[[D1]], %[[H2]]
// CHECK: graph.fused_matmul %arg0, %arg1 addend %arg3 : {{.*}} -> tensor<4x6xf32>
// CHECK-NEXT: graph.matmul %arg0, %arg1 : {{.*}} -> tensor<4x6xf32>
// CHECK-NEXT: graph.reduce_sum
// CHECK-NEXT: graph.matmul %arg0, %arg1 : {{.*}} -> tensor<4x6xf32>
// CHECK-NEXT: graph.mul
// CHECK-NEXT: graph.matmul %arg4, %arg5 : {{.*}} -> tensor<4x6xf32>
// CHECK-NEXT: graph.neg
// CHECK-NEXT: return
// RUN: lamina-opt %s -split-input-file -graph-fuse-epilogues -graph-fuse-elementwise | FileCheck %s --check-prefix=FUSED
// FUSED-LABEL: func.func @narrow_activations
// FUSED-NOT: graph.cast {{.*}} : tensor<4x6xbf16> to tensor<4x6xf32>
// FUSED: graph.fused_elementwise {{.*}} : (tensor<4x6xbf16>) -> tensor<4x6xbf16>
// FUSED: graph.fused_elementwise {{.*}} : (tensor<4x6xbf16>, tensor<4x6xbf16>) -> tensor<4x6xbf16>
func.func @narrow_activations(%x: tensor<4x8xbf16>, %w: tensor<8x6xbf16>, %b: tensor<6xf32>, %r: tensor<4x6xf32>, %xf: tensor<4x8xf32>, %wf: tensor<8x6xf32>, %v: tensor<6x2xbf16>) -> (tensor<4x2xbf16>, tensor<4x2xbf16>, tensor<4x6xf32>, tensor<6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %0 = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %h = graph.add %0, %b : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %d = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %g = graph.gelu %h {tanh} : tensor<4x6xf32>
  %gb = graph.cast %g : tensor<4x6xf32> to tensor<4x6xbf16>
  %dh = graph.mul %d, %h : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %dhb = graph.cast %dh : tensor<4x6xf32> to tensor<4x6xbf16>
  %y = graph.matmul %gb, %v : (tensor<4x6xbf16>, tensor<6x2xbf16>) -> tensor<4x2xbf16>
  %dy = graph.matmul %dhb, %v : (tensor<4x6xbf16>, tensor<6x2xbf16>) -> tensor<4x2xbf16>
  %1 = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %res = graph.add %1, %r : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %2 = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %s = graph.reduce_sum %2 {axes = array<i64: 0>, keepdims = false} : tensor<4x6xf32> -> tensor<6xf32>
  %3 = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %tied = graph.mul %3, %r : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %4 = graph.matmul %xf, %wf : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %n = graph.neg %4 : tensor<4x6xf32>
  return %y, %dy, %res, %s, %tied, %n : tensor<4x2xbf16>, tensor<4x2xbf16>, tensor<4x6xf32>, tensor<6xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// Logits of bf16 operands that only cross-entropy reads (and a model
// output, `output:NAME`, returns) are stored bf16: the loss and its
// gradient stay f32, the function result becomes bf16. Not when the
// cross-entropy gradient is f32 (it would have to be bf16 too), when
// anything else reads them, or when another kind of result returns them (a
// distributed module's residual: its backward module reads it as f32).
// CHECK-LABEL: func.func @narrow_logits
// CHECK-SAME: -> (tensor<4xf32>, tensor<4x6xbf16>, tensor<4x6xbf16>)
// CHECK: %[[L:.*]] = graph.matmul %arg0, %arg1 : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
// CHECK-NEXT: %[[LOSS:.*]] = graph.softmax_cross_entropy %[[L]], %arg2 {{.*}} : (tensor<4x6xbf16>, tensor<4xi64>) -> tensor<4xf32>
// CHECK-NEXT: %[[G:.*]] = graph.softmax_cross_entropy_grad %[[L]], %arg2, %arg3 {{.*}} : (tensor<4x6xbf16>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x6xbf16>
// CHECK-NEXT: return %[[LOSS]], %[[G]], %[[L]]
func.func @narrow_logits(%x: tensor<4x8xbf16>, %w: tensor<8x6xbf16>, %labels: tensor<4xi64>, %dl: tensor<4xf32>) -> (tensor<4xf32>, tensor<4x6xbf16>, tensor<4x6xf32>) attributes {graph.output_names = ["loss", "grad:x", "output:logits"]} {
  %l = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %loss = graph.softmax_cross_entropy %l, %labels {ignore_index = -100 : i64} : (tensor<4x6xf32>, tensor<4xi64>) -> tensor<4xf32>
  %g = graph.softmax_cross_entropy_grad %l, %labels, %dl {ignore_index = -100 : i64} : (tensor<4x6xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x6xf32>
  %gb = graph.cast %g : tensor<4x6xf32> to tensor<4x6xbf16>
  return %loss, %gb, %l : tensor<4xf32>, tensor<4x6xbf16>, tensor<4x6xf32>
}
// RT-LABEL: func.func @narrow_logits
// RT: rt.call "lamina::rt::softmaxCrossEntropy"({{.*}} : memref<4x6xbf16>, memref<4xi64>, memref<4xf32>
// RT: rt.call "lamina::rt::softmaxCrossEntropyBackward"({{.*}} : memref<4x6xbf16>, memref<4xi64>, memref<4xf32>, memref<4x6xbf16>

// CHECK-LABEL: func.func @wide_logits
// CHECK: graph.matmul %arg0, %arg1 : {{.*}} -> tensor<4x6xf32>
// CHECK: graph.matmul %arg0, %arg1 : {{.*}} -> tensor<4x6xf32>
// CHECK: graph.matmul %arg0, %arg1 : {{.*}} -> tensor<4x6xf32>
func.func @wide_logits(%x: tensor<4x8xbf16>, %w: tensor<8x6xbf16>, %labels: tensor<4xi64>, %dl: tensor<4xf32>) -> (tensor<4x6xf32>, tensor<4xf32>, tensor<4x6xf32>, tensor<4xf32>, tensor<4x6xf32>) attributes {graph.output_names = ["grad:a", "loss", "output:n", "loss2", "residual:0"]} {
  %l = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %g = graph.softmax_cross_entropy_grad %l, %labels, %dl {ignore_index = -100 : i64} : (tensor<4x6xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x6xf32>
  %m = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %loss = graph.softmax_cross_entropy %m, %labels {ignore_index = -100 : i64} : (tensor<4x6xf32>, tensor<4xi64>) -> tensor<4xf32>
  %n = graph.neg %m : tensor<4x6xf32>
  %k = graph.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xf32>
  %loss2 = graph.softmax_cross_entropy %k, %labels {ignore_index = -100 : i64} : (tensor<4x6xf32>, tensor<4xi64>) -> tensor<4xf32>
  return %g, %loss, %n, %loss2, %k : tensor<4x6xf32>, tensor<4xf32>, tensor<4x6xf32>, tensor<4xf32>, tensor<4x6xf32>
}

// -----

// A product of bf16 operands read only as the result gradient of norm
// gradients (the input gradient of the matmul a norm's output feeds) is
// stored bf16, and the norm gradients read it as it is (their kernels
// widen on load). Kept f32: one a norm gradient reads as its addend, one
// something else reads too, one a function result returns.
// CHECK-LABEL: func.func @narrow_norm_gradient
// CHECK: %[[D:.*]] = graph.matmul %arg2, %arg3 : (tensor<4x6xbf16>, tensor<6x8xbf16>) -> tensor<4x8xbf16>
// CHECK-NEXT: graph.layer_norm_grad %arg0, %arg1, %[[D]] {{.*}} : tensor<4x8xf32>, tensor<8xf32>, dy tensor<4x8xbf16> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: graph.rms_norm_grad %arg0, %arg1, %[[D]] {{.*}} : tensor<4x8xf32>, tensor<8xf32>, dy tensor<4x8xbf16>{{$}}
// CHECK-NEXT: %[[A:.*]] = graph.matmul %arg2, %arg3 : {{.*}} -> tensor<4x8xf32>
// CHECK-NEXT: graph.layer_norm_grad %arg0, %arg1, %arg4 addend %[[A]] {{.*}} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[T:.*]] = graph.matmul %arg2, %arg3 : {{.*}} -> tensor<4x8xf32>
// CHECK-NEXT: graph.rms_norm_grad %arg0, %arg1, %[[T]] {{.*}} : tensor<4x8xf32>, tensor<8xf32>{{$}}
// CHECK-NEXT: graph.neg %[[T]]
// CHECK-NEXT: %[[R:.*]] = graph.matmul %arg2, %arg3 : {{.*}} -> tensor<4x8xf32>
// CHECK-NEXT: graph.rms_norm_grad %arg0, %arg1, %[[R]] {{.*}} : tensor<4x8xf32>, tensor<8xf32>{{$}}
// RT-LABEL: func.func @narrow_norm_gradient
// RT: rt.call "lamina::rt::gen::layerNormBackward"({{.*}} : memref<4x8xf32>, memref<8xf32>, memref<4x8xbf16>, memref<4x8xf32>, memref<8xf32>, memref<8xf32>{{$}}
func.func @narrow_norm_gradient(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %h: tensor<4x6xbf16>, %w: tensor<6x8xbf16>, %g: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %d = graph.matmul %h, %w : (tensor<4x6xbf16>, tensor<6x8xbf16>) -> tensor<4x8xf32>
  %a:3 = graph.layer_norm_grad %x, %s, %d {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %b:2 = graph.rms_norm_grad %x, %s, %d {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>
  %e = graph.matmul %h, %w : (tensor<4x6xbf16>, tensor<6x8xbf16>) -> tensor<4x8xf32>
  %c:3 = graph.layer_norm_grad %x, %s, %g addend %e {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %t = graph.matmul %h, %w : (tensor<4x6xbf16>, tensor<6x8xbf16>) -> tensor<4x8xf32>
  %f:2 = graph.rms_norm_grad %x, %s, %t {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>
  %n = graph.neg %t : tensor<4x8xf32>
  %r = graph.matmul %h, %w : (tensor<4x6xbf16>, tensor<6x8xbf16>) -> tensor<4x8xf32>
  %k:2 = graph.rms_norm_grad %x, %s, %r {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>
  return %a#0, %a#1, %b#0, %c#0, %f#0, %n, %r, %k#0 : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// The swap's own transposes are not swapped again (the driver visits only
// the ops there were), though one reads a product only it reads.
// CHECK-LABEL: func.func @swap_once
// CHECK: %[[M:.*]] = graph.matmul %arg0, %arg1 : {{.*}} -> tensor<4x16xf32>
// CHECK-NEXT: %[[L:.*]] = graph.transpose %[[M]] {perm = array<i64: 1, 0>}
// CHECK-NEXT: %[[R:.*]] = graph.transpose %arg2 {perm = array<i64: 1, 0>}
// CHECK-NEXT: %[[P:.*]] = graph.matmul %[[L]], %[[R]] : {{.*}} -> tensor<16x16xf32>
// CHECK-NEXT: graph.slice %[[P]]
func.func @swap_once(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<16x4xf32>) -> tensor<4x16xf32> {
  %m1 = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %m = graph.matmul %c, %m1 : (tensor<16x4xf32>, tensor<4x16xf32>) -> tensor<16x16xf32>
  %t = graph.transpose %m {perm = array<i64: 1, 0>} : tensor<16x16xf32> -> tensor<16x16xf32>
  %s = graph.slice %t {sizes = array<i64: 4, 16>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<16x16xf32> -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}
