// The verifiers of dist.program and its steps (DistStepOps.td): transfers
// pair up with equal types, calls match their outlined callee and its
// placement, values are produced before they are used.
// RUN: lamina-opt %s -split-input-file -verify-diagnostics

// A send whose peer never receives it.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %x = dist.batch "x"[0] : tensor<2x4xf32>
    // expected-error @below {{sends the activation of boundary 0, micro-batch 0 to pipeline rank 1, which never receives it}}
    dist.p2p_send activation 0, 0 to 1 (%x) : tensor<2x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// A receive of the wrong type.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %x = dist.batch "x"[0] : tensor<2x4xf32>
    // expected-note @below {{the send}}
    dist.p2p_send activation 0, 0 to 1 (%x) : tensor<2x4xf32>
  }
  dist.step 1 {
    // expected-error @below {{receives the activation of boundary 0, micro-batch 0 as 'tensor<2x8xf32>' but pipeline rank 0 sends 'tensor<2x4xf32>'}}
    %a = dist.p2p_recv activation 0, 0 from 0 : tensor<2x8xf32>
  }
}

// -----

// A receive nobody sends.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
  }
  dist.step 1 {
    // expected-error @below {{receives the gradient of boundary 0, micro-batch 0 from pipeline rank 0, which never sends it}}
    %a = dist.p2p_recv gradient 0, 0 from 0 : tensor<2x4xf32>
  }
}

// -----

// A transfer to the rank itself.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %x = dist.batch "x"[0] : tensor<2x4xf32>
    // expected-error @below {{peer 0 is the rank itself}}
    dist.p2p_send activation 0, 0 to 0 (%x) : tensor<2x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// A missing step.
// expected-error @below {{has no dist.step 1 (pp = 2)}}
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
  }
}

// -----

// A module called on a rank the placement does not give it.
func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
  }
  dist.step 1 {
    %w = dist.param "trainable" "w0" : tensor<4x4xf32>
    %x = dist.batch "x"[0] : tensor<2x4xf32>
    // expected-error @below {{calls module 0 on pipeline rank 1, but the placement puts it on rank 0}}
    %a = dist.call @fwd_0 [0] (%w, %x) : (tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  }
}

// -----

// A call whose operand does not match the callee.
func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %w = dist.param "trainable" "w0" : tensor<4x4xf32>
    %x = dist.batch "x"[0] : tensor<2x8xf32>
    // expected-error @below {{operand #1 is 'tensor<2x8xf32>' but @fwd_0 has 'tensor<2x4xf32>'}}
    %a = dist.call @fwd_0 [0] (%w, %x) : (tensor<4x4xf32>, tensor<2x8xf32>) -> tensor<2x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// A call with too few operands.
func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %w = dist.param "trainable" "w0" : tensor<4x4xf32>
    // expected-error @below {{has 1 operands but @fwd_0 has 2}}
    %a = dist.call @fwd_0 [0] (%w) : (tensor<4x4xf32>) -> tensor<2x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// A call of a function that is not an outlined module.
func.func private @helper(tensor<4x4xf32>) -> tensor<4x4xf32>
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %w = dist.param "trainable" "w0" : tensor<4x4xf32>
    // expected-error @below {{calls @helper, which is not an outlined module function (no 'dist.outlined')}}
    %a = dist.call @helper [0] (%w) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// A value used before it is produced: a backward before its forward.
func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %w = dist.param "trainable" "w0" : tensor<4x4xf32>
    %x = dist.batch "x"[0] : tensor<2x4xf32>
    // expected-error @below {{operand #2 does not dominate this use}}
    %gw = dist.call @bwd_0 [0] (%w, %x, %g) : (tensor<4x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
    // expected-note @below {{operand defined here}}
    %g = dist.call @fwd_0 [0] (%w, %x) : (tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// dist.accumulate takes a backward call's last results.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %w = dist.param "trainable" "w0" : tensor<4x4xf32>
    // expected-error @below {{accumulates values that no dist.call produced}}
    dist.accumulate %w : tensor<4x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// A schedule action inside a step.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    // expected-error @below {{inside a dist.step; only dist.batch, dist.param}}
    dist.forward 0, 0
  }
  dist.step 1 {
  }
}

// -----

// A micro-batch out of range.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    // expected-error @below {{micro-batch 1 is outside [0, 1)}}
    %x = dist.batch "x"[1] : tensor<2x4xf32>
  }
  dist.step 1 {
  }
}

// -----

// A loss weight is an f32 scalar.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    // expected-error @below {{is an f32 scalar, not 'tensor<2xf32>'}}
    %s = dist.loss_weight [0] : tensor<2xf32>
  }
  dist.step 1 {
  }
}

// -----

// A parameter kind the functions do not take.
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    // expected-error @below {{kind 'input' is not trainable, constant or param_copy}}
    %w = dist.param "input" "w0" : tensor<4x4xf32>
  }
  dist.step 1 {
  }
}
