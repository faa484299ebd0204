// Large splats are one element filled at run time; long functions are split
// into non-inlined parts, each making the Tensors it uses.
// RUN: lamina-opt %s -convert-graph-to-rt '-convert-rt-to-emitc=model-path=/m.onnx calls-per-function=2' | lamina-translate --mlir-to-cpp | FileCheck %s
// RUN: lamina-opt %s -convert-graph-to-rt '-convert-rt-to-emitc=model-path=/m.onnx target=cuda calls-per-function=2' | lamina-translate --mlir-to-cpp | FileCheck %s --check-prefix=CUDA
// RUN: lamina-opt %s -convert-graph-to-rt -convert-rt-to-emitc=model-path=/m.onnx | lamina-translate --mlir-to-cpp | FileCheck %s --check-prefix=WHOLE

// CHECK-DAG: static const uint64_t [[ZERO:lamina_const_[0-9]+]][1] = {0x0ULL};
// CHECK-DAG: static const uint64_t [[ONE:lamina_const_[0-9]+]][1] = {0x3f800000ULL};
// A small splat stays an array.
// CHECK-DAG: static const uint64_t {{lamina_const_[0-9]+}}[2] = {0x3f8000003f800000ULL, 0x3f8000003f800000ULL};
// CHECK: __attribute__((noinline)) static void lamina_forward_part0(const lamina::rt::Tensor* [[ARGS:v[0-9]+]], void*
// CHECK: lamina::rt::gen::arg([[ARGS]], 0,
// CHECK: lamina::rt::gen::splat([[ONE]], lamina::rt::DType::F32, 2,
// CHECK: lamina::rt::BinaryOp::Add
// CHECK: lamina::rt::BinaryOp::Mul
// CHECK-NOT: lamina::rt::BinaryOp
// CHECK: return;
// CHECK: static void lamina_forward_part1(const lamina::rt::Tensor* [[ARGS1:v[0-9]+]], void*
// CHECK: lamina::rt::gen::splat([[ZERO]], lamina::rt::DType::F32, 2,
// CHECK: lamina::rt::BinaryOp::Add
// CHECK: lamina::rt::gen::arg([[ARGS1]], 0,
// CHECK: lamina::rt::BinaryOp::Sub
// CHECK: static void lamina_forward_part2(
// CHECK: static void lamina_forward_part3(
// CHECK-NOT: part4
// CHECK: static void lamina_forward(const lamina::rt::Tensor* [[A:v[0-9]+]], void* [[B:v[0-9]+]]) {
// CHECK-NEXT: lamina_forward_part0([[A]], [[B]]);
// CHECK-NEXT: lamina_forward_part1([[A]], [[B]]);
// CHECK-NEXT: lamina_forward_part2([[A]], [[B]]);
// CHECK-NEXT: lamina_forward_part3([[A]], [[B]]);
// CHECK-NEXT: return;

// CUDA: lamina_forward_part0(
// CUDA-NEXT: cudaStream_t [[S:v[0-9]+]] = lamina::rt::cuda::currentStream();
// CUDA: lamina::rt::cuda::gen::splat(
// CUDA: lamina::rt::cuda::binary(lamina::rt::BinaryOp::Add, {{.*}}, [[S]]);
// CUDA: lamina_forward_part1(
// CUDA-NEXT: cudaStream_t {{v[0-9]+}} = lamina::rt::cuda::currentStream();

// WHOLE-NOT: part0
// WHOLE: static void lamina_forward(
// WHOLE-COUNT-6: lamina::rt::binary(
func.func @forward(%x: tensor<4x8xf32> {graph.name = "x", graph.kind = "input"}) -> (tensor<4x8xf32>) attributes {graph.output_names = ["y"]} {
  %z = graph.constant dense<0.0> : tensor<4x8xf32>
  %o = graph.constant dense<1.0> : tensor<4x8xf32>
  %s = graph.constant dense<1.0> : tensor<4xf32>
  %a = graph.add %x, %o : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %b = graph.mul %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = graph.add %b, %z : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %d = graph.sub %c, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = graph.mul %d, %o : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = graph.transpose %e {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %f = graph.add %t, %s : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %g = graph.transpose %f {perm = array<i64: 1, 0>} : tensor<8x4xf32> -> tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}
