// RUN: lamina-opt %s --pass-pipeline='builtin.module(func.func(graph-tp-regroup-projections{tp=2}))' --split-input-file | FileCheck %s

// GPT-2's fused q/k/v projection (lamina compile --tp 2): its weight and
// bias stored as each rank's share of the three parts ([dim, parts]), the
// slices reading part j of [2, 16, t=2, 3, 16].
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: %[[W:.*]]: tensor<32x96xf32> {graph.kind = "trainable", graph.name = "c_attn.weight", graph.tp_parts = array<i64: 1, 3>}
// CHECK-SAME: %[[B:.*]]: tensor<96xf32> {graph.kind = "trainable", graph.name = "c_attn.bias", graph.tp_parts = array<i64: 0, 3>}
// CHECK: %[[Y:.*]] = graph.add
// CHECK: %[[V:.*]] = graph.reshape %[[Y]] : tensor<2x16x96xf32> to tensor<2x16x2x3x16xf32>
// CHECK: %[[Q:.*]] = graph.slice %[[V]] {sizes = array<i64: 2, 16, 2, 1, 16>, starts = array<i64: 0, 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1, 1>}
// CHECK: graph.reshape %[[Q]] : tensor<2x16x2x1x16xf32> to tensor<2x16x32xf32>
// CHECK: %[[K:.*]] = graph.slice %[[V]] {sizes = array<i64: 2, 16, 2, 1, 16>, starts = array<i64: 0, 0, 0, 1, 0>
// CHECK: %[[VV:.*]] = graph.slice %[[V]] {sizes = array<i64: 2, 16, 2, 1, 16>, starts = array<i64: 0, 0, 0, 2, 0>
// CHECK-NOT: graph.slice
func.func @gpt2(%x: tensor<2x16x32xf32> {graph.kind = "input", graph.name = "x"},
                %w: tensor<32x96xf32> {graph.kind = "trainable", graph.name = "c_attn.weight"},
                %b: tensor<96xf32> {graph.kind = "trainable", graph.name = "c_attn.bias"})
    -> (tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) {
  %mm = graph.matmul %x, %w : (tensor<2x16x32xf32>, tensor<32x96xf32>) -> tensor<2x16x96xf32>
  %y = graph.add %mm, %b : (tensor<2x16x96xf32>, tensor<96xf32>) -> tensor<2x16x96xf32>
  %q = graph.slice %y {sizes = array<i64: 2, 16, 32>, starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x16x96xf32> -> tensor<2x16x32xf32>
  %k = graph.slice %y {sizes = array<i64: 2, 16, 32>, starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x16x96xf32> -> tensor<2x16x32xf32>
  %v = graph.slice %y {sizes = array<i64: 2, 16, 32>, starts = array<i64: 0, 0, 64>, steps = array<i64: 1, 1, 1>} : tensor<2x16x96xf32> -> tensor<2x16x32xf32>
  return %q, %k, %v : tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>
}

// -----

// PyTorch's Linear layout ([out, in], read transposed): the parts are the
// weight's dim 0; no bias.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: graph.tp_parts = array<i64: 0, 2>
// CHECK: graph.reshape %{{.*}} : tensor<4x64xf32> to tensor<4x2x2x16xf32>
func.func @linear(%x: tensor<4x32xf32> {graph.kind = "input", graph.name = "x"},
                  %w: tensor<64x32xf32> {graph.kind = "trainable", graph.name = "gate_up.weight"})
    -> (tensor<4x32xf32>, tensor<4x32xf32>) {
  %wt = graph.transpose %w {perm = array<i64: 1, 0>} : tensor<64x32xf32> -> tensor<32x64xf32>
  %y = graph.matmul %x, %wt : (tensor<4x32xf32>, tensor<32x64xf32>) -> tensor<4x64xf32>
  %g = graph.slice %y {sizes = array<i64: 4, 32>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<4x64xf32> -> tensor<4x32xf32>
  %u = graph.slice %y {sizes = array<i64: 4, 32>, starts = array<i64: 0, 32>, steps = array<i64: 1, 1>} : tensor<4x64xf32> -> tensor<4x32xf32>
  return %g, %u : tensor<4x32xf32>, tensor<4x32xf32>
}

// -----

// Left alone: the product also read whole; parts of unequal sizes.
// CHECK-LABEL: func.func @other_reader
// CHECK-NOT: graph.tp_parts
// CHECK-NOT: graph.reshape
func.func @other_reader(%x: tensor<4x32xf32> {graph.kind = "input", graph.name = "x"},
                        %w: tensor<32x64xf32> {graph.kind = "trainable", graph.name = "w"})
    -> (tensor<4x32xf32>, tensor<4x64xf32>) {
  %y = graph.matmul %x, %w : (tensor<4x32xf32>, tensor<32x64xf32>) -> tensor<4x64xf32>
  %g = graph.slice %y {sizes = array<i64: 4, 32>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<4x64xf32> -> tensor<4x32xf32>
  return %g, %y : tensor<4x32xf32>, tensor<4x64xf32>
}

// -----

// CHECK-LABEL: func.func @unequal
// CHECK-NOT: graph.tp_parts
func.func @unequal(%x: tensor<4x32xf32> {graph.kind = "input", graph.name = "x"},
                   %w: tensor<32x48xf32> {graph.kind = "trainable", graph.name = "w"})
    -> (tensor<4x32xf32>, tensor<4x16xf32>) {
  %y = graph.matmul %x, %w : (tensor<4x32xf32>, tensor<32x48xf32>) -> tensor<4x48xf32>
  %a = graph.slice %y {sizes = array<i64: 4, 32>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<4x48xf32> -> tensor<4x32xf32>
  %b = graph.slice %y {sizes = array<i64: 4, 16>, starts = array<i64: 0, 32>, steps = array<i64: 1, 1>} : tensor<4x48xf32> -> tensor<4x16xf32>
  return %a, %b : tensor<4x32xf32>, tensor<4x16xf32>
}
