// dist-verify-schedule simulates a dist.program's steps as it does a
// dist.schedule's lists: two ranks that each receive before they send
// deadlock, and the error names the receive.
// RUN: lamina-opt %s -dist-verify-schedule -verify-diagnostics


func.func private @fwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<2x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_0(tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w0"}, tensor<2x4xf32> {graph.kind = "input", graph.name = "x"}, tensor<2x4xf32> {graph.kind = "cotangent", graph.name = "grad:b"}) -> tensor<4x4xf32> attributes {dist.outlined = #dist.outlined<module = 0, name = "layer.0", num_in = 0, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @fwd_1(tensor<2x4xf32> {graph.kind = "boundary", graph.name = "b"}, tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w1"}) -> tensor<f32> attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 1, num_out = 1, num_residuals = 0, recompute = true>}
func.func private @bwd_1(tensor<2x4xf32> {graph.kind = "boundary", graph.name = "b"}, tensor<4x4xf32> {graph.kind = "trainable", graph.name = "w1"}, tensor<f32> {graph.kind = "cotangent", graph.name = "grad:loss"}) -> (tensor<2x4xf32>, tensor<4x4xf32>) attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 1, num_out = 1, num_residuals = 0, recompute = true>}
dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.step 0 {
    %w = dist.param "trainable" "w0" : tensor<4x4xf32>
    %x = dist.batch "x"[0] : tensor<2x4xf32>
    %a = dist.call @fwd_0 [0] (%w, %x) : (tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    // expected-error-re @below {{deadlock: no rank can progress{{.*}}}}
    %g = dist.p2p_recv gradient 0, 0 from 1 : tensor<2x4xf32>
    dist.p2p_send activation 0, 0 to 1 (%a) : tensor<2x4xf32>
    %gw = dist.call @bwd_0 [0] (%w, %x, %g) : (tensor<4x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
    dist.accumulate %gw : tensor<4x4xf32>
    dist.optimizer_step
  }
  dist.step 1 {
    %w = dist.param "trainable" "w1" : tensor<4x4xf32>
    %b = dist.p2p_recv activation 0, 0 from 0 : tensor<2x4xf32>
    %l = dist.call @fwd_1 [0] (%b, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<f32>
    %s = dist.loss_weight [0] : tensor<f32>
    %d:2 = dist.call @bwd_1 [0] (%b, %w, %s) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<f32>) -> (tensor<2x4xf32>, tensor<4x4xf32>)
    dist.accumulate %d#1 : tensor<4x4xf32>
    dist.p2p_send gradient 0, 0 to 0 (%d#0) : tensor<2x4xf32>
    dist.optimizer_step
  }
}
