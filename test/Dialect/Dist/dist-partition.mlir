// RUN: split-file %s %t
// RUN: lamina-opt %t/seven.mlir --dist-partition="pp=3" | FileCheck %s --check-prefix=CONTIG
// RUN: lamina-opt %t/seven.mlir --dist-partition="pp=4" | FileCheck %s --check-prefix=CONTIG4
// RUN: lamina-opt %t/seven.mlir --dist-partition="pp=3 placement=modular" | FileCheck %s --check-prefix=MODULAR
// RUN: lamina-opt %t/heavy.mlir --dist-partition="pp=3 placement=balanced" | FileCheck %s --check-prefix=BALANCED
// RUN: lamina-opt %t/heavy.mlir --dist-partition="pp=3" | FileCheck %s --check-prefix=HEAVYCONTIG
// RUN: lamina-opt %t/seven.mlir --dist-partition="pp=9" 2>&1 >/dev/null | FileCheck %s --check-prefix=WIDEWARN
// RUN: lamina-opt %t/seven.mlir --dist-partition="pp=9" 2>/dev/null | FileCheck %s --check-prefix=WIDE
// RUN: not lamina-opt %t/plain.mlir --dist-partition="pp=2" 2>&1 | FileCheck %s --check-prefix=NOCHAIN
// RUN: not lamina-opt %t/seven.mlir --dist-partition="pp=0" 2>&1 | FileCheck %s --check-prefix=NOPP
// RUN: not lamina-opt %t/seven.mlir --dist-partition="pp=2 placement=zigzag" 2>&1 | FileCheck %s --check-prefix=BADKIND
// Every layer count 1..13 on 1..8 ranks with each placement: every layer
// placed exactly once, where its placement puts it.
// RUN: %python %S/Inputs/partition_sweep.py lamina-opt | FileCheck %s --check-prefix=SWEEP

// 7 layers do not divide by 3: the first rank takes one more (3, 2, 2);
// the embedding rides with layer 0, the head with layer 6.
// CONTIG: dist.placement = #dist.placement<pp = 3, contiguous, ranks = [0, 0, 0, 0, 1, 1, 2, 2, 2]>
// On 4 ranks: 2, 2, 2, 1.
// CONTIG4: dist.placement = #dist.placement<pp = 4, contiguous, ranks = [0, 0, 0, 1, 1, 2, 2, 3, 3]>
// MODULAR: dist.placement = #dist.placement<pp = 3, modular, ranks = [0, 0, 1, 2, 0, 1, 2, 0, 0]>
// WIDEWARN: warning: dist-partition: 7 layers on --pp=9 ranks leave 2 ranks without a layer
// WIDE: dist.placement = #dist.placement<pp = 9, contiguous, ranks = [0, 0, 1, 2, 3, 4, 5, 6, 6]>
// NOCHAIN: error: dist-partition: @forward has no 'dist.chain'; run dist-discover-modules first
// NOPP: error: dist-partition: --pp=0 must be at least 1
// BADKIND: error: dist-partition: unknown --placement='zigzag'; expected contiguous, modular or balanced
// SWEEP: checked 312 placements, failures: 0

//--- seven.mlir
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> attributes {
    dist.chain = [#dist.module<"embedding", embedding>,
                  #dist.module<"layer.0", layer, body = 0>, #dist.module<"layer.1", layer, body = 0>,
                  #dist.module<"layer.2", layer, body = 0>, #dist.module<"layer.3", layer, body = 0>,
                  #dist.module<"layer.4", layer, body = 0>, #dist.module<"layer.5", layer, body = 0>,
                  #dist.module<"layer.6", layer, body = 0>, #dist.module<"head", head>]} {
  %0 = graph.neg %x {dist.module = 0 : i64} : tensor<4xf32>
  %1 = graph.tanh %0 {dist.module = 1 : i64} : tensor<4xf32>
  %2 = graph.tanh %1 {dist.module = 2 : i64} : tensor<4xf32>
  %3 = graph.tanh %2 {dist.module = 3 : i64} : tensor<4xf32>
  %4 = graph.tanh %3 {dist.module = 4 : i64} : tensor<4xf32>
  %5 = graph.tanh %4 {dist.module = 5 : i64} : tensor<4xf32>
  %6 = graph.tanh %5 {dist.module = 6 : i64} : tensor<4xf32>
  %7 = graph.tanh %6 {dist.module = 7 : i64} : tensor<4xf32>
  %8 = graph.neg %7 {dist.module = 8 : i64} : tensor<4xf32>
  return %8 : tensor<4xf32>
}

//--- heavy.mlir
// A head as costly as two layers (an 8x8x8 GEMM, 1024 FLOPs, against
// 512 per layer): balanced gives it a rank of its own, where contiguous
// stacks it onto the last layers.
// BALANCED: dist.placement = #dist.placement<pp = 3, balanced, ranks = [0, 0, 0, 1, 1, 2]>
// HEAVYCONTIG: dist.placement = #dist.placement<pp = 3, contiguous, ranks = [0, 0, 0, 1, 2, 2]>
func.func @forward(%x: tensor<8x8xf32>, %h: tensor<8x8xf32>, %w: tensor<8x4xf32>, %v: tensor<4x8xf32>) -> tensor<8x8xf32> attributes {
    dist.chain = [#dist.module<"embedding", embedding>,
                  #dist.module<"layer.0", layer, body = 0>, #dist.module<"layer.1", layer, body = 0>,
                  #dist.module<"layer.2", layer, body = 0>, #dist.module<"layer.3", layer, body = 0>,
                  #dist.module<"head", head>]} {
  %0 = graph.neg %x {dist.module = 0 : i64} : tensor<8x8xf32>
  %1 = graph.matmul %0, %w {dist.module = 1 : i64} : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %2 = graph.matmul %1, %v {dist.module = 2 : i64} : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %3 = graph.matmul %2, %w {dist.module = 3 : i64} : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %4 = graph.matmul %3, %v {dist.module = 4 : i64} : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %5 = graph.matmul %4, %h {dist.module = 5 : i64} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %5 : tensor<8x8xf32>
}

//--- plain.mlir
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.neg %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
