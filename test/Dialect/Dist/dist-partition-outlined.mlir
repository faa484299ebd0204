// After dist-outline-modules, dist-partition places the outlined modules and
// records the placement on the module; dist-schedule orders the modules
// where it put them, and refuses a placement its schedule cannot run.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=modular" -dist-schedule="schedule=breadth-first pp=2 micro-batches=2" | FileCheck %s --check-prefix=MODULAR
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=contiguous" -dist-schedule="schedule=1f1b pp=2 micro-batches=2" | FileCheck %s --check-prefix=CONTIGUOUS
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=balanced" | FileCheck %s --check-prefix=BALANCED
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=contiguous" -dist-schedule="schedule=breadth-first pp=2 micro-batches=2" 2>&1 | FileCheck %s --check-prefix=WRONG
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=modular" -dist-schedule="schedule=breadth-first pp=4 micro-batches=4" 2>&1 | FileCheck %s --check-prefix=PP
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=5" -dist-schedule="schedule=1f1b pp=5" 2>&1 | FileCheck %s --check-prefix=TOOMANY

// MODULAR: module attributes {dist.num_modules = 4 : i64, dist.placement = #dist.placement<pp = 2, modular, ranks = [0, 1, 0, 1]>
// MODULAR: dist.schedule "breadth-first" modules = 4, pp = 2, dp = 1, micro_batches = 2, zero = 0, placement = [0, 1, 0, 1]
// CONTIGUOUS: dist.placement = #dist.placement<pp = 2, contiguous, ranks = [0, 0, 1, 1]>
// CONTIGUOUS: dist.schedule "1f1b" modules = 4, pp = 2, dp = 1, micro_batches = 2, zero = 0, placement = [0, 0, 1, 1]
// Equal layers: equal halves.
// BALANCED: dist.placement = #dist.placement<pp = 2, balanced, ranks = [0, 0, 1, 1]>
// WRONG: dist-schedule: invalid options schedule=breadth-first pp=2 dp=1 micro-batches=2 zero=0 modules=4: breadth-first needs module l on rank l mod p (the modular placement); the placement puts module 1 on rank 0
// PP: dist-schedule: the module's dist.placement is for pp=2, not pp=4
// TOOMANY: dist-schedule: invalid options schedule=1f1b pp=5 dp=1 micro-batches=1 zero=0 modules=4: 1f1b needs at least one module per pipeline rank: L = 4 < p = 5

func.func @forward(%w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.w"},
                   %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.w"},
                   %w2: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.2.w"},
                   %w3: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.3.w"},
                   %x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = graph.matmul %0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = graph.matmul %1, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %3 = graph.matmul %2, %w3 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %4 = graph.reduce_sum %3 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %4 : tensor<f32>
}
