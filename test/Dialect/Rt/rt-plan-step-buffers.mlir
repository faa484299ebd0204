// rt-plan-step-buffers, after the passes that place the posts and waits
// (rt-post-receives, rt-wait-sends, rt-retire-reductions, rt-verify-steps):
// the compiled step of each pipeline rank as lamina compile builds it.
// 1F1B over 2 ranks and 2 micro-batches: rank 0 posts its first receive
// from rank 1 at the start, and each next one right before it waits for
// the previous; rank 1 likewise for rank 0's activations. Each send is
// waited for before the second compute call after it. The boundary values
// (2x4 f32: 32 B, one 64-byte slot) and their gradients lie in the step
// buffer at planned offsets: a slot is reused once its value's last reader
// (a backward, or the wait for its send) is past.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=2 -dist-schedule="schedule=1f1b pp=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-post-receives -rt-wait-sends -rt-retire-reductions -rt-verify-steps -rt-plan-step-buffers | FileCheck %s
// Breadth-first at ZeRO 3 over 2 replicas with the evaluation step: each
// run's gathered weights lie in the step buffer from their all-gather to
// the run's end; an evaluation forward's input dies at it.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=modular" -dist-schedule="schedule=breadth-first pp=2 dp=2 zero=3 micro-batches=2 eval=true" -dist-insert-comm -dist-prefetch-gathers -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-post-receives -rt-wait-sends -rt-retire-reductions -rt-verify-steps -rt-plan-step-buffers | FileCheck %s --check-prefix=ZERO3
// The planned step functions round-trip.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=2 -dist-schedule="schedule=1f1b pp=2 micro-batches=2" -dist-insert-comm -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-post-receives -rt-wait-sends -rt-retire-reductions -rt-verify-steps -rt-plan-step-buffers | lamina-opt | FileCheck %s
// Layered gradient accumulation at ZeRO 2 over 2 replicas: module 1's
// reduce-scatter stays in flight while module 0's backwards run (a second
// full gradient, no older one to wait for); both are waited for, oldest
// first, right before the optimizer. Each run's full gradient (4x4 f32,
// one 64-byte slot) lies in the step buffer from its first accumulate
// until its reduce-scatter is waited for.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=1 -dist-schedule="schedule=layered pp=1 dp=2 zero=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-post-receives -rt-wait-sends -rt-retire-reductions -rt-verify-steps -rt-plan-step-buffers | FileCheck %s --check-prefix=LAYERED
// NCCL's shard layout (target=cuda) pads each module's flat parameters to
// equal chunks: 16 over 2 replicas needs none, so the sizes equal MPI's.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=1 -dist-schedule="schedule=layered pp=1 dp=2 zero=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-retire-reductions -rt-plan-step-buffers=target=cuda | FileCheck %s --check-prefix=LAYERED
// A target the collectives do not know is refused.
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=2 -dist-schedule="schedule=1f1b pp=2 micro-batches=2" -dist-insert-comm -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-plan-step-buffers=target=tpu 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: rt-plan-step-buffers: target must be host or cuda, got 'tpu'

// CHECK: module attributes {{.*}}rt.dist = #rt.dist<kind = "1f1b", modules = 2, pp = 2, dp = 1, micro_batches = 2, zero = 0, placement = [0, 1], flat_params = [16, 16]>}
// CHECK-NOT: dist.program
// CHECK-LABEL: func.func @lamina_step_0(
// CHECK-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.step_buffer_bytes = 256 : i64, rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
// CHECK-NEXT:   rt.step_post_recv %[[S]] gradient 0, 0 from 1 at 0
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_0[0] out 64
// CHECK-NEXT:   rt.step_send %[[S]] 0, 0 to 1 at 64
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_0[1] out 128
// CHECK-NEXT:   rt.step_send %[[S]] 0, 1 to 1 at 128
// CHECK-NEXT:   rt.step_post_recv %[[S]] gradient 0, 1 from 1 at 192
// CHECK-NEXT:   rt.step_recv %[[S]] gradient 0, 0 from 1 at 0
// CHECK-NEXT:   rt.step_wait_send %[[S]] 0, 0 to 1
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_0[0] cot 0
// CHECK-NEXT:   rt.step_accumulate %[[S]] 0
// CHECK-NEXT:   rt.step_recv %[[S]] gradient 0, 1 from 1 at 192
// CHECK-NEXT:   rt.step_wait_send %[[S]] 0, 1 to 1
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_0[1] cot 192
// CHECK-NEXT:   rt.step_accumulate %[[S]] 0
// CHECK-NEXT:   rt.step_optimizer %[[S]]
// CHECK-NEXT:   return
// CHECK-LABEL: func.func @lamina_step_1(
// CHECK-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.step_buffer_bytes = 192 : i64, rt.step_pp = 1 : i64, rt.step_zero = 0 : i64} {
// CHECK-NEXT:   rt.step_post_recv %[[S]] 0, 0 from 0 at 0
// CHECK-NEXT:   rt.step_post_recv %[[S]] 0, 1 from 0 at 64
// CHECK-NEXT:   rt.step_recv %[[S]] 0, 0 from 0 at 0
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_1[0] in 0
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_1[0] in 0 out 128
// CHECK-NEXT:   rt.step_accumulate %[[S]] 1
// CHECK-NEXT:   rt.step_send %[[S]] gradient 0, 0 to 0 at 128
// CHECK-NEXT:   rt.step_recv %[[S]] 0, 1 from 0 at 64
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_1[1] in 64
// CHECK-NEXT:   rt.step_wait_send %[[S]] gradient 0, 0 to 0
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_1[1] in 64 out 0
// CHECK-NEXT:   rt.step_accumulate %[[S]] 1
// CHECK-NEXT:   rt.step_send %[[S]] gradient 0, 1 to 0 at 0
// CHECK-NEXT:   rt.step_optimizer %[[S]]
// CHECK-NEXT:   rt.step_wait_send %[[S]] gradient 0, 1 to 0
// CHECK-NEXT:   return

// ZERO3: rt.dist = #rt.dist<kind = "breadth-first", {{.*}}dp = 2, {{.*}}zero = 3, {{.*}}flat_params = [16, 16]>
// ZERO3-LABEL: func.func @lamina_step_0(
// ZERO3-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.step_buffer_bytes = 384 : i64, rt.step_pp = 0 : i64, rt.step_zero = 3 : i64} {
// ZERO3:        rt.step_all_gather %[[S]] 0 at 64
// ZERO3-NEXT:   rt.step_use_weights %[[S]] 0
// ZERO3-NEXT:   rt.step_call %[[S]] @fwd_0[0] out {{[0-9]+}}
// ZERO3-NEXT:   rt.step_send %[[S]] 0, 0 to 1 at {{[0-9]+}}
// ZERO3-NOT:    rt.step_use_weights
// ZERO3:        rt.step_call %[[S]] @fwd_0[1]
// ZERO3:        rt.step_use_weights %[[S]] 0
// ZERO3-NEXT:   rt.step_wait_send %[[S]] 0, 0 to 1
// ZERO3-NEXT:   rt.step_call %[[S]] @bwd_0[{{[01]}}] cot {{[0-9]+}}
// ZERO3-NEXT:   rt.step_accumulate %[[S]] 0 into 0
// ZERO3-NOT:    rt.step_use_weights
// ZERO3:        rt.step_reduce_scatter %[[S]] 0 from 0{{$}}
// ZERO3-NEXT:   rt.step_wait_gradients %[[S]] 0
// ZERO3-NEXT:   rt.step_optimizer %[[S]]
// ZERO3-LABEL: func.func @lamina_step_1(
// ZERO3-LABEL: func.func @lamina_eval_step_0(
// ZERO3-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.forward_only, rt.step_buffer_bytes = 192 : i64, rt.step_pp = 0 : i64, rt.step_zero = 3 : i64} {
// ZERO3-NEXT:   rt.step_all_gather %[[S]] 0 at 0
// ZERO3-NEXT:   rt.step_use_weights %[[S]] 0
// ZERO3-NEXT:   rt.step_call %[[S]] @fwd_0[0] out 64
// ZERO3-NEXT:   rt.step_send %[[S]] 0, 0 to 1 at 64
// ZERO3-NEXT:   rt.step_call %[[S]] @fwd_0[1] out 128
// ZERO3-NEXT:   rt.step_send %[[S]] 0, 1 to 1 at 128
// ZERO3-NEXT:   rt.step_wait_send %[[S]] 0, 0 to 1
// ZERO3-NEXT:   rt.step_wait_send %[[S]] 0, 1 to 1
// ZERO3-NEXT:   return
// An evaluation forward's input dies at it: no residuals, no gradients.
// ZERO3-LABEL: func.func @lamina_eval_step_1(
// ZERO3-SAME: rt.step_buffer_bytes = 192 : i64
// ZERO3:        rt.step_call %[[S:[^ ]*]] @fwd_1[0] in 0{{$}}
// ZERO3:        rt.step_call %[[S]] @fwd_1[1] in 128{{$}}
// ZERO3-NOT:   rt.step_optimizer

// LAYERED-LABEL: func.func @lamina_step_0(
// LAYERED-SAME: rt.step_buffer_bytes = 256 : i64
// LAYERED-NEXT: rt.step_call %[[S:[^ ]*]] @fwd_0[0] out 0
// LAYERED-NEXT: rt.step_call %[[S]] @fwd_0[1] out 64
// LAYERED-NEXT: rt.step_call %[[S]] @fwd_1[0] in 0
// LAYERED-NEXT: rt.step_call %[[S]] @fwd_1[1] in 64
// LAYERED-NEXT: rt.step_call %[[S]] @bwd_1[1] in 64 out 128
// LAYERED-NEXT: rt.step_accumulate %[[S]] 1 into 64
// LAYERED-NEXT: rt.step_call %[[S]] @bwd_1[0] in 0 out 192
// LAYERED-NEXT: rt.step_accumulate %[[S]] 1 into 64
// LAYERED-NEXT: rt.step_reduce_scatter %[[S]] 1 from 64
// LAYERED-NEXT: rt.step_call %[[S]] @bwd_0[1] cot 128
// LAYERED-NEXT: rt.step_accumulate %[[S]] 0 into 0
// LAYERED-NEXT: rt.step_call %[[S]] @bwd_0[0] cot 192
// LAYERED-NEXT: rt.step_accumulate %[[S]] 0 into 0
// LAYERED-NEXT: rt.step_reduce_scatter %[[S]] 0 from 0
// LAYERED-NEXT: rt.step_wait_gradients %[[S]] 1
// LAYERED-NEXT: rt.step_wait_gradients %[[S]] 0
// LAYERED-NEXT: rt.step_optimizer %[[S]]
// LAYERED-NEXT: rt.step_all_gather %[[S]] 0{{$}}
// LAYERED-NEXT: rt.step_all_gather %[[S]] 1{{$}}
// LAYERED-NEXT: rt.step_wait_weights %[[S]] 0
// LAYERED-NEXT: rt.step_wait_weights %[[S]] 1
// LAYERED-NEXT: return

func.func @forward(%w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.w"},
                   %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.w"},
                   %x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = graph.matmul %0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %2 : tensor<f32>
}
