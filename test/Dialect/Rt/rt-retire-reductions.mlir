// rt-retire-reductions: at ZeRO 2-3, when an accumulate starts a module's
// new full gradient, every reduce-scatter in flight but the newest is
// waited for right before it, oldest first (the wait moves from before the
// optimizer). Layered gradient accumulation over three modules on one
// rank at ZeRO 2: module 2's reduce-scatter runs during module 1's
// backwards and is waited for when module 0's gradient starts, so at most
// two full gradients are held at once. At level 1 (gradients kept whole,
// reduced in place) the waits stay before the optimizer.
// RUN: lamina-opt %s -rt-retire-reductions | FileCheck %s
// RUN: lamina-opt %s -rt-retire-reductions -rt-retire-reductions | FileCheck %s

func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @bwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @fwd_1() attributes {dist.outlined = #dist.outlined<module = 1, name = "m1", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @bwd_1() attributes {dist.outlined = #dist.outlined<module = 1, name = "m1", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @fwd_2() attributes {dist.outlined = #dist.outlined<module = 2, name = "m2", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @bwd_2() attributes {dist.outlined = #dist.outlined<module = 2, name = "m2", num_in = 0, num_out = 0, num_residuals = 0>}

// CHECK-LABEL: func.func @lamina_step_0(
// CHECK:       rt.step_reduce_scatter %{{.*}} 2
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_1[0]
// CHECK-NEXT:  rt.step_accumulate %{{.*}} 1
// CHECK-NEXT:  rt.step_reduce_scatter %{{.*}} 1
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_0[0]
// CHECK-NEXT:  rt.step_wait_gradients %{{.*}} 2
// CHECK-NEXT:  rt.step_accumulate %{{.*}} 0
// CHECK-NEXT:  rt.step_reduce_scatter %{{.*}} 0
// CHECK-NEXT:  rt.step_wait_gradients %{{.*}} 1
// CHECK-NEXT:  rt.step_wait_gradients %{{.*}} 0
// CHECK-NEXT:  rt.step_optimizer
func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 2 : i64} {
  rt.step_call %s @fwd_0[0]
  rt.step_call %s @fwd_1[0]
  rt.step_call %s @fwd_2[0]
  rt.step_call %s @bwd_2[0]
  rt.step_accumulate %s 2
  rt.step_reduce_scatter %s 2
  rt.step_call %s @bwd_1[0]
  rt.step_accumulate %s 1
  rt.step_reduce_scatter %s 1
  rt.step_call %s @bwd_0[0]
  rt.step_accumulate %s 0
  rt.step_reduce_scatter %s 0
  rt.step_wait_gradients %s 2
  rt.step_wait_gradients %s 1
  rt.step_wait_gradients %s 0
  rt.step_optimizer %s
  return
}

// CHECK-LABEL: func.func @lamina_step_level1(
// CHECK:       rt.step_reduce_scatter %{{.*}} 0
// CHECK-NEXT:  rt.step_wait_gradients %{{.*}} 2
// CHECK-NEXT:  rt.step_wait_gradients %{{.*}} 1
// CHECK-NEXT:  rt.step_wait_gradients %{{.*}} 0
// CHECK-NEXT:  rt.step_optimizer
func.func @lamina_step_level1(%s: !rt.step) attributes {rt.step_pp = 1 : i64, rt.step_zero = 1 : i64} {
  rt.step_call %s @bwd_2[0]
  rt.step_accumulate %s 2
  rt.step_reduce_scatter %s 2
  rt.step_call %s @bwd_1[0]
  rt.step_accumulate %s 1
  rt.step_reduce_scatter %s 1
  rt.step_call %s @bwd_0[0]
  rt.step_accumulate %s 0
  rt.step_reduce_scatter %s 0
  rt.step_wait_gradients %s 2
  rt.step_wait_gradients %s 1
  rt.step_wait_gradients %s 0
  rt.step_optimizer %s
  return
}

