// dist-build-steps: the verified schedule of the two-module chain as one
// dist.step per pipeline rank over values. 1F1B over 2 ranks and 2
// micro-batches: rank 0 forwards both micro-batches and sends each
// activation, then receives each gradient and runs its backward; rank 1
// receives, forwards, seeds its backward with the micro-batch's loss weight
// and sends the boundary gradient back. The steps verify again
// (dist-verify-schedule simulates them).
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=2 -dist-schedule="schedule=1f1b pp=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -dist-verify-schedule | FileCheck %s
// Breadth-first at ZeRO 3 over 2 replicas: the collectives stay where the
// schedule puts them, one step serves both replicas. With eval, the
// evaluation step (forward_only) is built and verified the same way: each
// module gathered once, every micro-batch forwarded and sent.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=modular" -dist-schedule="schedule=breadth-first pp=2 dp=2 zero=3 micro-batches=2 eval=true" -dist-insert-comm -dist-prefetch-gathers -dist-verify-schedule -dist-build-steps -dist-verify-schedule | FileCheck %s --check-prefixes=ZERO3,EVAL
// The steps round-trip.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=2 -dist-schedule="schedule=1f1b pp=2 micro-batches=2" -dist-insert-comm -dist-build-steps | lamina-opt | FileCheck %s

// CHECK-NOT: dist.schedule
// CHECK-LABEL: dist.program "1f1b" modules = 2, pp = 2, dp = 1, micro_batches = 2, zero = 0, placement = [0, 1] {
// CHECK-NEXT: dist.step 0 {
// CHECK-NEXT:   %[[W0:.*]] = dist.param "trainable" "model.layers.0.w" : tensor<4x4xf32>
// CHECK-NEXT:   %[[X0:.*]] = dist.batch "x"[0] : tensor<2x4xf32>
// CHECK-NEXT:   %[[A0:.*]] = dist.call @fwd_0[0] (%[[W0]], %[[X0]]) : (tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:   dist.p2p_send activation 0, 0 to 1 (%[[A0]]) : tensor<2x4xf32>
// CHECK-NEXT:   %[[X1:.*]] = dist.batch "x"[1] : tensor<2x4xf32>
// CHECK-NEXT:   %[[A1:.*]] = dist.call @fwd_0[1] (%[[W0]], %[[X1]])
// CHECK-NEXT:   dist.p2p_send activation 0, 1 to 1 (%[[A1]]) : tensor<2x4xf32>
// CHECK-NEXT:   %[[G0:.*]] = dist.p2p_recv gradient 0, 0 from 1 : tensor<2x4xf32>
// CHECK-NEXT:   %[[GW0:.*]] = dist.call @bwd_0[0] (%[[W0]], %[[X0]], %[[G0]]) : (tensor<4x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:   dist.accumulate %[[GW0]] : tensor<4x4xf32>
// CHECK-NEXT:   %[[G1:.*]] = dist.p2p_recv gradient 0, 1 from 1
// CHECK-NEXT:   %[[GW1:.*]] = dist.call @bwd_0[1] (%[[W0]], %[[X1]], %[[G1]])
// CHECK-NEXT:   dist.accumulate %[[GW1]]
// CHECK-NEXT:   dist.optimizer_step
// CHECK-NEXT: }
// CHECK-NEXT: dist.step 1 {
// CHECK-NEXT:   %[[W1:.*]] = dist.param "trainable" "model.layers.1.w" : tensor<4x4xf32>
// CHECK-NEXT:   %[[B0:.*]] = dist.p2p_recv activation 0, 0 from 0 : tensor<2x4xf32>
// CHECK-NEXT:   dist.call @fwd_1[0] (%[[B0]], %[[W1]]) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<f32>
// CHECK-NEXT:   %[[S0:.*]] = dist.loss_weight[0] : tensor<f32>
// CHECK-NEXT:   %[[D0:.*]]:2 = dist.call @bwd_1[0] (%[[B0]], %[[W1]], %[[S0]]) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<f32>) -> (tensor<2x4xf32>, tensor<4x4xf32>)
// CHECK-NEXT:   dist.accumulate %[[D0]]#1 : tensor<4x4xf32>
// CHECK-NEXT:   dist.p2p_send gradient 0, 0 to 0 (%[[D0]]#0) : tensor<2x4xf32>
// CHECK-NEXT:   %[[B1:.*]] = dist.p2p_recv activation 0, 1 from 0
// CHECK-NEXT:   dist.call @fwd_1[1] (%[[B1]], %[[W1]])
// CHECK-NEXT:   %[[S1:.*]] = dist.loss_weight[1]
// CHECK-NEXT:   %[[D1:.*]]:2 = dist.call @bwd_1[1] (%[[B1]], %[[W1]], %[[S1]])
// CHECK-NEXT:   dist.accumulate %[[D1]]#1
// CHECK-NEXT:   dist.p2p_send gradient 0, 1 to 0 (%[[D1]]#0)
// CHECK-NEXT:   dist.optimizer_step
// CHECK-NEXT: }

// ZERO3-LABEL: dist.program "breadth-first" modules = 2, pp = 2, dp = 2, micro_batches = 2, zero = 3
// ZERO3: dist.step 0 {
// ZERO3:   dist.all_gather 0
// ZERO3-NEXT: dist.batch "x"[0]
// ZERO3-NEXT: dist.call @fwd_0[0]
// ZERO3:   dist.call @bwd_0[0]
// ZERO3-NEXT: dist.accumulate
// ZERO3-NEXT: dist.reduce_scatter 0
// ZERO3-NEXT: dist.optimizer_step
// ZERO3: dist.step 1 {
// ZERO3:   dist.reduce_scatter 1
// ZERO3-NEXT: dist.optimizer_step
// ZERO3-NOT: dist.step 0

// EVAL-LABEL: dist.program "breadth-first" forward_only modules = 2, pp = 2, dp = 2, micro_batches = 2, zero = 3
// EVAL-NEXT: dist.step 0 {
// EVAL-NEXT:   %[[W:.*]] = dist.param "trainable" "model.layers.0.w"
// EVAL-NEXT:   dist.all_gather 0
// EVAL-NEXT:   %[[X0:.*]] = dist.batch "x"[0]
// EVAL-NEXT:   %[[A0:.*]] = dist.call @fwd_0[0] (%[[W]], %[[X0]])
// EVAL-NEXT:   dist.p2p_send activation 0, 0 to 1 (%[[A0]])
// EVAL-NEXT:   %[[X1:.*]] = dist.batch "x"[1]
// EVAL-NEXT:   %[[A1:.*]] = dist.call @fwd_0[1] (%[[W]], %[[X1]])
// EVAL-NEXT:   dist.p2p_send activation 0, 1 to 1 (%[[A1]])
// EVAL-NEXT: }
// EVAL-NEXT: dist.step 1 {
// EVAL:        dist.all_gather 1
// EVAL-NEXT:   dist.p2p_recv activation 0, 0 from 0
// EVAL-NEXT:   dist.call @fwd_1[0]
// EVAL-NEXT:   dist.p2p_recv activation 0, 1 from 0
// EVAL-NEXT:   dist.call @fwd_1[1]
// EVAL-NEXT: }
// EVAL-NOT: dist.loss_weight

func.func @forward(%w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.w"},
                   %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.w"},
                   %x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = graph.matmul %0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %2 : tensor<f32>
}
