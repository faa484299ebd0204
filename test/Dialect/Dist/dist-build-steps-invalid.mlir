// dist-build-steps' diagnostics: what the schedule or the functions lack
// to build a step from, named at the action that needs it.
// RUN: lamina-opt %s -split-input-file -dist-build-steps -verify-diagnostics

// No schedule to build from.
// expected-error @below {{dist-build-steps needs exactly one training dist.schedule (run dist-schedule, dist-insert-comm, dist-verify-schedule) and at most one forward_only one; found 0 and 0}}
module {
}

// -----

// A module without its outlined functions.
// expected-error @below {{dist-build-steps: module 1 has no outlined forward function (run dist-outline-modules)}}
module {
func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
dist.schedule "gpipe" modules = 2, pp = 1, dp = 1, micro_batches = 1, zero = 0, placement = [0, 0] {
  dist.rank 0 {
    dist.forward 0, 0
    dist.optimizer_step
  }
}
}

// -----

// A backward before its forward: the step has nothing to pass it.
module {
func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @fwd_1(tensor<2x4xf32> {graph.kind = "boundary", graph.name = "b"}, tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w1"}) -> tensor<f32> attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 1, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_1(tensor<2x4xf32> {graph.kind = "boundary", graph.name = "b"}, tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w1"}, tensor<f32> {graph.kind = "cotangent", graph.name = "grad:loss"}) -> (tensor<2x4xf32>, tensor<4x4xf32>) attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 1, num_out = 1, num_residuals = 0, recompute = true>}
dist.schedule "gpipe" modules = 2, pp = 1, dp = 1, micro_batches = 1, zero = 0, placement = [0, 0] {
  dist.rank 0 {
    dist.forward 0, 0
    // expected-error @below {{dist-build-steps: the backward of module 1, micro-batch 0 runs before its forward on pipeline rank 0}}
    dist.backward 1, 0
    dist.forward 1, 0
    dist.backward 0, 0
    dist.optimizer_step
  }
}
}

// -----

// A forward whose boundary input is neither computed nor received.
module {
func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @fwd_1(tensor<2x4xf32> {graph.kind = "boundary", graph.name = "b"}, tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w1"}) -> tensor<f32> attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 1, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_1(tensor<2x4xf32> {graph.kind = "boundary", graph.name = "b"}, tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w1"}, tensor<f32> {graph.kind = "cotangent", graph.name = "grad:loss"}) -> (tensor<2x4xf32>, tensor<4x4xf32>) attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 1, num_out = 1, num_residuals = 0, recompute = true>}
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    dist.forward 0, 0
    dist.optimizer_step
  }
  dist.rank 1 {
    // expected-error @below {{dist-build-steps: the forward of module 1, micro-batch 0 needs its boundary input, which pipeline rank 1 has neither computed nor received by then}}
    dist.forward 1, 0
    dist.backward 1, 0
    dist.optimizer_step
  }
}
}
