// The rt step passes' diagnostics.
// RUN: lamina-opt %s -split-input-file -verify-diagnostics -rt-retire-reductions -rt-verify-steps -rt-plan-step-buffers

// A step function needs its ZeRO level (convert-dist-to-rt writes it).
// expected-error @+1 {{rt-retire-reductions: the step function has no rt.step_zero}}
func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64} {
  rt.step_optimizer %s
  return
}

// -----

// Rank 0 waits for its first send before starting the second, which rank 1
// receives first: each waits for the other forever.
func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
// expected-error @+1 {{rt-verify-steps: the training step's waits would deadlock: pipeline rank 0 waits forever at its call 2 (wait_send 0, micro-batch 0, peer 1); pipeline rank 1 waits forever at its call 0 (recv 0, micro-batch 1, peer 0)}}
func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
  rt.step_call %s @fwd_0[0]
  rt.step_send %s 0, 0 to 1
  rt.step_wait_send %s 0, 0 to 1
  rt.step_send %s 0, 1 to 1
  rt.step_wait_send %s 0, 1 to 1
  return
}
func.func @lamina_step_1(%s: !rt.step) attributes {rt.step_pp = 1 : i64, rt.step_zero = 0 : i64} {
  rt.step_recv %s 0, 1 from 0
  rt.step_recv %s 0, 0 from 0
  return
}

// -----

// The ranks' step functions are numbered from 0 without gaps.
// expected-error @+1 {{rt-verify-steps: pipeline rank 0 has no step function}}
func.func @lamina_step_1(%s: !rt.step) attributes {rt.step_pp = 1 : i64, rt.step_zero = 0 : i64} {
  return
}

// -----

// A step function calls only outlined module functions.
func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m0", num_in = 0, num_out = 0, num_residuals = 0>}
func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
  // expected-error @+1 {{calls @helper, which is no outlined module function}}
  rt.step_call %s @helper[0]
  return
}
func.func private @helper()

// -----

// Without the module's rt.dist the step buffers have no sizes.
// expected-error @+1 {{rt-plan-step-buffers: step functions need the module's rt.dist (modules, dp, zero)}}
module {
  func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
    rt.step_optimizer %s
    return
  }
}
