// rt-post-receives: every receive is posted ahead. The first from each peer
// at the start of the step (ascending peers), each later one right before
// the previous receive from that peer is waited for, so a pair's receives
// are posted in the order they are sent. A second run changes nothing;
// functions without rt.step_pp are left alone.
// RUN: lamina-opt %s -rt-post-receives | FileCheck %s
// RUN: lamina-opt %s -rt-post-receives -rt-post-receives | FileCheck %s

func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @bwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @fwd_1() attributes {dist.outlined = #dist.outlined<module = 1, name = "m1", num_in = 0, num_out = 0, num_residuals = 0>}
func.func private @bwd_1() attributes {dist.outlined = #dist.outlined<module = 1, name = "m1", num_in = 0, num_out = 0, num_residuals = 0>}

// Rank 0 of 1F1B over 2 ranks, 2 micro-batches: the gradients of boundary 0.
// CHECK-LABEL: func.func @lamina_step_0(
// CHECK-NEXT:  rt.step_post_recv %{{.*}} gradient 0, 0 from 1
// CHECK-NEXT:  rt.step_call %{{.*}} @fwd_0[0]
// CHECK-NEXT:  rt.step_send %{{.*}} 0, 0 to 1
// CHECK-NEXT:  rt.step_call %{{.*}} @fwd_0[1]
// CHECK-NEXT:  rt.step_send %{{.*}} 0, 1 to 1
// CHECK-NEXT:  rt.step_post_recv %{{.*}} gradient 0, 1 from 1
// CHECK-NEXT:  rt.step_recv %{{.*}} gradient 0, 0 from 1
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_0[0]
// CHECK-NEXT:  rt.step_accumulate
// CHECK-NEXT:  rt.step_recv %{{.*}} gradient 0, 1 from 1
// CHECK-NOT:   rt.step_post_recv
// CHECK:       return
func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
  rt.step_call %s @fwd_0[0]
  rt.step_send %s 0, 0 to 1
  rt.step_call %s @fwd_0[1]
  rt.step_send %s 0, 1 to 1
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

// A middle rank with two peers: activations from rank 0, gradients from
// rank 2, each chained on its own. A receive already posted keeps its post.
// CHECK-LABEL: func.func @lamina_step_1(
// CHECK-NEXT:  rt.step_post_recv %{{.*}} 0, 0 from 0
// CHECK-NEXT:  rt.step_post_recv %{{.*}} gradient 1, 0 from 2
// CHECK-NEXT:  rt.step_post_recv %{{.*}} 0, 1 from 0
// CHECK-NEXT:  rt.step_recv %{{.*}} 0, 0 from 0
// CHECK-NEXT:  rt.step_call %{{.*}} @fwd_1[0]
// CHECK-NEXT:  rt.step_recv %{{.*}} 0, 1 from 0
// CHECK-NEXT:  rt.step_call %{{.*}} @fwd_1[1]
// CHECK-NEXT:  rt.step_post_recv %{{.*}} gradient 1, 1 from 2
// CHECK-NEXT:  rt.step_recv %{{.*}} gradient 1, 0 from 2
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_1[0]
// CHECK-NEXT:  rt.step_recv %{{.*}} gradient 1, 1 from 2
// CHECK-NEXT:  rt.step_call %{{.*}} @bwd_1[1]
// CHECK-NEXT:  return
func.func @lamina_step_1(%s: !rt.step) attributes {rt.step_pp = 1 : i64, rt.step_zero = 0 : i64} {
  rt.step_post_recv %s 0, 1 from 0
  rt.step_recv %s 0, 0 from 0
  rt.step_call %s @fwd_1[0]
  rt.step_recv %s 0, 1 from 0
  rt.step_call %s @fwd_1[1]
  rt.step_recv %s gradient 1, 0 from 2
  rt.step_call %s @bwd_1[0]
  rt.step_recv %s gradient 1, 1 from 2
  rt.step_call %s @bwd_1[1]
  return
}

// CHECK-LABEL: func.func @not_a_step(
// CHECK-NEXT:  rt.step_recv
// CHECK-NEXT:  return
func.func @not_a_step(%s: !rt.step) {
  rt.step_recv %s 0, 0 from 0
  return
}
