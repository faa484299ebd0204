// rt-wait-sends: each send is waited for right before the second compute
// call after it (so it overlaps the one in between and its buffer is free
// for what follows); a send no second compute call follows keeps its wait
// at the end. A second run changes nothing.
// RUN: lamina-opt %s -rt-wait-sends | FileCheck %s
// RUN: lamina-opt %s -rt-wait-sends -rt-wait-sends | FileCheck %s

func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @bwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @fwd_1() attributes {dist.outlined = #dist.outlined<module = 1, name = "m1", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @bwd_1() attributes {dist.outlined = #dist.outlined<module = 1, name = "m1", num_in = 0, num_out = 0, num_residuals = 0>}

// Rank 0 of 1F1B over 2 ranks, 2 micro-batches (receives posted).
// CHECK-LABEL: func.func @lamina_step_0(
// CHECK-NEXT:  rt.step_post_recv %{{.*}} gradient 0, 0 from 1
// CHECK-NEXT:  rt.step_call %{{.*}} @fwd_0[0]
// CHECK-NEXT:  rt.step_send %{{.*}} 0, 0 to 1
// CHECK-NEXT:  rt.step_call %{{.*}} @fwd_0[1]
// CHECK-NEXT:  rt.step_send %{{.*}} 0, 1 to 1
// CHECK-NEXT:  rt.step_post_recv %{{.*}} gradient 0, 1 from 1
// CHECK-NEXT:  rt.step_recv %{{.*}} gradient 0, 0 from 1
// CHECK-NEXT:  rt.step_wait_send %{{.*}} 0, 0 to 1
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_0[0]
// CHECK-NEXT:  rt.step_accumulate
// CHECK-NEXT:  rt.step_recv %{{.*}} gradient 0, 1 from 1
// CHECK-NEXT:  rt.step_wait_send %{{.*}} 0, 1 to 1
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_0[1]
// CHECK-NEXT:  rt.step_accumulate
// CHECK-NEXT:  rt.step_optimizer
// CHECK-NEXT:  return
func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
  rt.step_post_recv %s gradient 0, 0 from 1
  rt.step_call %s @fwd_0[0]
  rt.step_send %s 0, 0 to 1
  rt.step_call %s @fwd_0[1]
  rt.step_send %s 0, 1 to 1
  rt.step_post_recv %s gradient 0, 1 from 1
  rt.step_recv %s gradient 0, 0 from 1
  rt.step_call %s @bwd_0[0]
  rt.step_accumulate %s 0
  rt.step_recv %s gradient 0, 1 from 1
  rt.step_call %s @bwd_0[1]
  rt.step_accumulate %s 0
  rt.step_optimizer %s
  rt.step_wait_send %s 0, 0 to 1
  rt.step_wait_send %s 0, 1 to 1
  return
}

// Rank 1: the last gradient's send has one compute call after it at most.
// CHECK-LABEL: func.func @lamina_step_1(
// CHECK:       rt.step_send %{{.*}} gradient 0, 0 to 0
// CHECK-NEXT:  rt.step_recv %{{.*}} 0, 1 from 0
// CHECK-NEXT:  rt.step_call %{{.*}} @fwd_1[1]
// CHECK-NEXT:  rt.step_wait_send %{{.*}} gradient 0, 0 to 0
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_1[1]
// CHECK-NEXT:  rt.step_accumulate
// CHECK-NEXT:  rt.step_send %{{.*}} gradient 0, 1 to 0
// CHECK-NEXT:  rt.step_optimizer
// CHECK-NEXT:  rt.step_wait_send %{{.*}} gradient 0, 1 to 0
// CHECK-NEXT:  return
func.func @lamina_step_1(%s: !rt.step) attributes {rt.step_pp = 1 : i64, rt.step_zero = 0 : i64} {
  rt.step_recv %s 0, 0 from 0
  rt.step_call %s @fwd_1[0]
  rt.step_call %s @bwd_1[0]
  rt.step_accumulate %s 1
  rt.step_send %s gradient 0, 0 to 0
  rt.step_recv %s 0, 1 from 0
  rt.step_call %s @fwd_1[1]
  rt.step_call %s @bwd_1[1]
  rt.step_accumulate %s 1
  rt.step_send %s gradient 0, 1 to 0
  rt.step_optimizer %s
  rt.step_wait_send %s gradient 0, 0 to 0
  rt.step_wait_send %s gradient 0, 1 to 0
  return
}
