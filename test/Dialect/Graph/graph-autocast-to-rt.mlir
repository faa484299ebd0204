// RUN: lamina-opt %s -graph-autocast -convert-graph-to-rt | FileCheck %s

// After graph-autocast the transpose of the last two dims sits after the
// cast to bf16 and still folds into the matmul's transposition flag: no
// transpose kernel runs, the bf16 matmul reads k with transposeRhs.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: lamina::rt::transpose
// CHECK: rt.call "lamina::rt::cast"(%arg1, %[[A:[0-9]+]]) {{.*}} : memref<2x4x8xf32>, memref<2x4x8xbf16>
// CHECK: rt.call "lamina::rt::cast"(%arg2, %[[K:[0-9]+]]) {{.*}} : memref<2x4x8xf32>, memref<2x4x8xbf16>
// CHECK-NOT: lamina::rt::transpose
// CHECK: rt.call "lamina::rt::matmul"(%[[A]], %[[K]], %[[S:[0-9]+]]) {args = [0 : index, 1 : index, 2 : index, false, true]{{.*}} : memref<2x4x8xbf16>, memref<2x4x8xbf16>, memref<2x4x4xbf16>
// CHECK: rt.call "lamina::rt::cast"(%[[S]], %[[R:[0-9]+]]) {{.*}} : memref<2x4x4xbf16>, memref<2x4x4xf32>
// CHECK: return %[[R]]
func.func @forward(%a: tensor<2x4x8xf32> {graph.kind = "input", graph.name = "a"},
                   %k: tensor<2x4x8xf32> {graph.kind = "input", graph.name = "k"})
    -> tensor<2x4x4xf32> attributes {graph.output_names = ["s"]} {
  %kt = graph.transpose %k {perm = array<i64: 0, 2, 1>} : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %s = graph.matmul %a, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  return %s : tensor<2x4x4xf32>
}
