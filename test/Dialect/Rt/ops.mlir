// RUN: lamina-opt %s | lamina-opt | FileCheck %s

// CHECK-LABEL: func.func @forward
func.func @forward(%arena: !rt.arena, %x: memref<4xf32>) -> memref<4xf32> {
  // CHECK: %[[V:.*]] = rt.view %{{.*}}[64] : memref<4xf32>
  %0 = rt.view %arena[64] : memref<4xf32>
  // CHECK: rt.constant dense<[0, 2, 1]> : tensor<3xi64> : memref<3xi64>
  %c = rt.constant dense<[0, 2, 1]> : tensor<3xi64> : memref<3xi64>
  // CHECK: rt.call "lamina::rt::unary"(%{{.*}}, %[[V]]) {args = ["lamina::rt::UnaryOp::Exp", 0 : index, 1 : index], where = "n"}
  rt.call "lamina::rt::unary"(%x, %0) {args = ["lamina::rt::UnaryOp::Exp", 0 : index, 1 : index], where = "n"} : memref<4xf32>, memref<4xf32>
  return %0 : memref<4xf32>
}
