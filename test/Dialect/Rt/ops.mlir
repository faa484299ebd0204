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

// A step function's ops round-trip.
// CHECK-LABEL: func.func @step(
// CHECK-NEXT: rt.step_post_recv %{{.*}} gradient 0, 1 from 1 at 0
// CHECK-NEXT: rt.step_all_gather %{{.*}} 0 at 16384
// CHECK-NEXT: rt.step_use_weights %{{.*}} 0
// CHECK-NEXT: rt.step_call %{{.*}} @fwd_0[1] out 4096
// CHECK-NEXT: rt.step_send %{{.*}} 0, 1 to 1 at 4096
// CHECK-NEXT: rt.step_recv %{{.*}} gradient 0, 1 from 1 at 0
// CHECK-NEXT: rt.step_call %{{.*}} @bwd_1[1] in 4096 res 8192 cot 0 out 12288
// CHECK-NEXT: rt.step_wait_send %{{.*}} 0, 1 to 1
// CHECK-NEXT: rt.step_accumulate %{{.*}} 0 into 20480
// CHECK-NEXT: rt.step_reduce_scatter %{{.*}} 0 from 20480 part 24576
// CHECK-NEXT: rt.step_all_reduce %{{.*}} 0
// CHECK-NEXT: rt.step_wait_gradients %{{.*}} 0
// CHECK-NEXT: rt.step_sum_shared %{{.*}} "wte"
// CHECK-NEXT: rt.step_wait_shared_sum %{{.*}} "wte"
// CHECK-NEXT: rt.step_optimizer %{{.*}}
// CHECK-NEXT: rt.step_gather_shared %{{.*}} "wte"
// CHECK-NEXT: rt.step_wait_weights %{{.*}} 0
// CHECK-NEXT: rt.step_wait_shared_gather %{{.*}} "wte"
func.func @bwd_1(%a: !rt.arena, %g: memref<4xf32> {graph.kind = "cotangent"}) attributes {dist.outlined = #dist.outlined<module = 1, name = "m1", num_in = 1, num_out = 1, num_residuals = 2>} {
  return
}
func.func @fwd_0(%a: !rt.arena) attributes {dist.outlined = #dist.outlined<module = 0, name = "m", num_in = 0, num_out = 1, num_residuals = 0>} {
  return
}
func.func @step(%s: !rt.step) attributes {rt.step_pp = 0 : i64} {
  rt.step_post_recv %s gradient 0, 1 from 1 at 0
  rt.step_all_gather %s 0 at 16384
  rt.step_use_weights %s 0
  rt.step_call %s @fwd_0[1] out 4096
  rt.step_send %s 0, 1 to 1 at 4096
  rt.step_recv %s gradient 0, 1 from 1 at 0
  rt.step_call %s @bwd_1[1] in 4096 res 8192 cot 0 out 12288
  rt.step_wait_send %s 0, 1 to 1
  rt.step_accumulate %s 0 into 20480
  rt.step_reduce_scatter %s 0 from 20480 part 24576
  rt.step_all_reduce %s 0
  rt.step_wait_gradients %s 0
  rt.step_sum_shared %s "wte"
  rt.step_wait_shared_sum %s "wte"
  rt.step_optimizer %s
  rt.step_gather_shared %s "wte"
  rt.step_wait_weights %s 0
  rt.step_wait_shared_gather %s "wte"
  return
}
