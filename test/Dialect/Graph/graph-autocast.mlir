// RUN: lamina-opt %s -split-input-file -graph-autocast | FileCheck %s
// RUN: lamina-opt %s -split-input-file -graph-autocast=precision=f16 | FileCheck %s --check-prefix=F16
// RUN: not lamina-opt %s -split-input-file -graph-autocast=precision=fp8 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: graph-autocast: unknown precision 'fp8' (expected bf16 or f16)

// A linear layer: both operands cast (the weight inside the function, the
// argument stays f32), the matmul in bf16, its result cast back to f32 for
// the bias add, which stays f32.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<8x32xf32>, %[[W:.*]]: tensor<32x64xf32> {graph.kind = "trainable", graph.name = "w"}, %[[B:.*]]: tensor<64xf32>
// CHECK-NEXT: %[[XL:.*]] = graph.cast %[[X]] : tensor<8x32xf32> to tensor<8x32xbf16>
// CHECK-NEXT: %[[WL:.*]] = graph.cast %[[W]] : tensor<32x64xf32> to tensor<32x64xbf16>
// CHECK-NEXT: %[[M:.*]] = graph.matmul %[[XL]], %[[WL]] : (tensor<8x32xbf16>, tensor<32x64xbf16>) -> tensor<8x64xbf16>
// CHECK-NEXT: %[[MF:.*]] = graph.cast %[[M]] : tensor<8x64xbf16> to tensor<8x64xf32>
// CHECK-NEXT: %[[Y:.*]] = graph.add %[[MF]], %[[B]] : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
// CHECK-NEXT: return %[[Y]] : tensor<8x64xf32>
// F16-LABEL: func.func @linear
// F16: graph.matmul {{.*}} : (tensor<8x32xf16>, tensor<32x64xf16>) -> tensor<8x64xf16>
func.func @linear(%x: tensor<8x32xf32>,
                  %w: tensor<32x64xf32> {graph.kind = "trainable", graph.name = "w"},
                  %b: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = graph.matmul %x, %w : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
  %1 = graph.add %0, %b : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// One cast per distinct value: %x feeds three matmuls (cast once); the weight
// %w is shared by two matmuls (cast once). The non-matmul use of %x and the
// softmax stay f32.
func.func @reuse(%x: tensor<4x16xf32>, %w: tensor<16x16xf32>, %v: tensor<16x16xf32>)
    -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = graph.matmul %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %1 = graph.softmax %0 {axis = 1 : i64} : tensor<4x16xf32>
  %2 = graph.matmul %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %3 = graph.matmul %x, %v : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %4 = graph.add %1, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %5 = graph.add %2, %3 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %4, %5 : tensor<4x16xf32>, tensor<4x16xf32>
}
// CHECK-LABEL: func.func @reuse
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<16x16xf32>, %[[V:.*]]: tensor<16x16xf32>)
// CHECK-NEXT: %[[XL:.*]] = graph.cast %[[X]] : tensor<4x16xf32> to tensor<4x16xbf16>
// CHECK-NEXT: %[[WL:.*]] = graph.cast %[[W]] : tensor<16x16xf32> to tensor<16x16xbf16>
// CHECK-NEXT: %[[M0:.*]] = graph.matmul %[[XL]], %[[WL]] : (tensor<4x16xbf16>, tensor<16x16xbf16>) -> tensor<4x16xbf16>
// CHECK-NEXT: %[[F0:.*]] = graph.cast %[[M0]] : tensor<4x16xbf16> to tensor<4x16xf32>
// CHECK-NEXT: %[[S:.*]] = graph.softmax %[[F0]] {axis = 1 : i64} : tensor<4x16xf32>
// CHECK-NEXT: %[[M2:.*]] = graph.matmul %[[XL]], %[[WL]]
// CHECK-NEXT: %[[F2:.*]] = graph.cast %[[M2]]
// CHECK-NEXT: %[[VL:.*]] = graph.cast %[[V]] : tensor<16x16xf32> to tensor<16x16xbf16>
// CHECK-NEXT: %[[M3:.*]] = graph.matmul %[[XL]], %[[VL]]
// CHECK-NEXT: %[[F3:.*]] = graph.cast %[[M3]]
// CHECK-NEXT: %[[A:.*]] = graph.add %[[S]], %[[X]] : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[B:.*]] = graph.add %[[F2]], %[[F3]]
// CHECK-NEXT: return %[[A]], %[[B]]

// -----

// A transpose of the last two dims feeding a matmul: the cast goes before
// it, so the narrow transpose still folds into the matmul's transposition
// flag; the f32 transpose goes away. A matmul reading another autocast
// matmul's f32 result directly uses the bf16 value (the round trip is exact).
// CHECK-LABEL: func.func @transposed
// CHECK-SAME: (%[[A:.*]]: tensor<2x4x8xf32>, %[[K:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[AL:.*]] = graph.cast %[[A]] : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
// CHECK-NEXT: %[[KL:.*]] = graph.cast %[[K]] : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
// CHECK-NEXT: %[[KT:.*]] = graph.transpose %[[KL]] {perm = array<i64: 0, 2, 1>} : tensor<2x4x8xbf16> -> tensor<2x8x4xbf16>
// CHECK-NEXT: %[[S:.*]] = graph.matmul %[[AL]], %[[KT]] : (tensor<2x4x8xbf16>, tensor<2x8x4xbf16>) -> tensor<2x4x4xbf16>
// CHECK-NEXT: %[[SF:.*]] = graph.cast %[[S]] : tensor<2x4x4xbf16> to tensor<2x4x4xf32>
// CHECK-NEXT: %[[O:.*]] = graph.matmul %[[S]], %[[AL]] : (tensor<2x4x4xbf16>, tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16>
// CHECK-NEXT: %[[OF:.*]] = graph.cast %[[O]] : tensor<2x4x8xbf16> to tensor<2x4x8xf32>
// CHECK-NEXT: return %[[SF]], %[[OF]]
// CHECK-NOT: graph.transpose
func.func @transposed(%a: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>)
    -> (tensor<2x4x4xf32>, tensor<2x4x8xf32>) {
  %kt = graph.transpose %k {perm = array<i64: 0, 2, 1>} : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %s = graph.matmul %a, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %o = graph.matmul %s, %a : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %s, %o : tensor<2x4x4xf32>, tensor<2x4x8xf32>
}

// -----

// Left alone: f64 and bf16 matmuls, and everything that is not a matmul.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: graph.cast
// CHECK: graph.matmul %{{.*}}, %{{.*}} : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
// CHECK-NOT: graph.cast
// CHECK: graph.matmul %{{.*}}, %{{.*}} : (tensor<2x2xbf16>, tensor<2x2xbf16>) -> tensor<2x2xbf16>
// CHECK-NOT: graph.cast
// CHECK: graph.transpose
// CHECK-NOT: graph.cast
// CHECK: return
func.func @untouched(%a: tensor<2x2xf64>, %b: tensor<2x2xbf16>, %c: tensor<2x2xf32>)
    -> (tensor<2x2xf64>, tensor<2x2xbf16>, tensor<2x2xf32>) {
  %0 = graph.matmul %a, %a : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  %1 = graph.matmul %b, %b : (tensor<2x2xbf16>, tensor<2x2xbf16>) -> tensor<2x2xbf16>
  %2 = graph.transpose %c {perm = array<i64: 1, 0>} : tensor<2x2xf32> -> tensor<2x2xf32>
  return %0, %1, %2 : tensor<2x2xf64>, tensor<2x2xbf16>, tensor<2x2xf32>
}

// -----

// A value read only, through slices and reshapes, by matmuls (q, k, v of a
// fused projection) is cast once, before the slices, which then move half
// the bytes; nothing f32 of it is left.
// CHECK-LABEL: func.func @sliced_projection
// CHECK: %[[X:.*]] = graph.add
// CHECK: %[[XC:.*]] = graph.cast %[[X]] : tensor<4x12xf32> to tensor<4x12xbf16>
// CHECK: graph.slice %[[XC]] {{.*}} : tensor<4x12xbf16> -> tensor<4x4xbf16>
// CHECK: graph.slice %[[XC]] {{.*}} : tensor<4x12xbf16> -> tensor<4x4xbf16>
// CHECK: graph.reshape %{{.*}} : tensor<4x4xbf16> to tensor<2x2x4xbf16>
// CHECK-NOT: graph.slice %[[X]]
// CHECK-NOT: graph.reshape {{.*}}xf32> to tensor<2x2x4xf32>
func.func @sliced_projection(%x: tensor<4x8xf32>, %w: tensor<8x12xf32>, %b: tensor<12xf32>, %u: tensor<4x3xf32>, %v: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<2x2x3xf32>) {
  %p = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x12xf32>) -> tensor<4x12xf32>
  %a = graph.add %p, %b : (tensor<4x12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  %s0 = graph.slice %a {sizes = array<i64: 4, 4>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<4x12xf32> -> tensor<4x4xf32>
  %s1 = graph.slice %a {sizes = array<i64: 4, 4>, starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : tensor<4x12xf32> -> tensor<4x4xf32>
  %r1 = graph.reshape %s1 : tensor<4x4xf32> to tensor<2x2x4xf32>
  %m0 = graph.matmul %s0, %u : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %uw = graph.slice %v {sizes = array<i64: 4, 3>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<4x3xf32> -> tensor<4x3xf32>
  %m1 = graph.matmul %r1, %uw : (tensor<2x2x4xf32>, tensor<4x3xf32>) -> tensor<2x2x3xf32>
  return %m0, %m1 : tensor<4x3xf32>, tensor<2x2x3xf32>
}
