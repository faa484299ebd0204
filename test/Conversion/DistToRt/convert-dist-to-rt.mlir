// convert-dist-to-rt: each pipeline rank's verified step as a function of
// rt.step_* ops in schedule order, every wait at its latest correct point
// and nothing overlapped yet: a receive is posted where it is waited for,
// every send waited for at the end of the step, every gradient reduction
// right before the optimizer. The rt passes decide the overlap and the
// step buffer (test/Dialect/Rt). 1F1B over 2 ranks and 2 micro-batches;
// each backward is followed by the accumulation of its parameter
// gradients; the settings go to the module's rt.dist.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=2 -dist-schedule="schedule=1f1b pp=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt | FileCheck %s
// The step functions round-trip.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=2 -dist-schedule="schedule=1f1b pp=2 micro-batches=2" -dist-insert-comm -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt | lamina-opt | FileCheck %s
// Breadth-first at ZeRO 3 over 2 replicas with the evaluation step: a
// use_weights (the wait for the gathered weights) before the first call of
// each run of a module's forwards or backwards, not before the run's later
// calls; the evaluation step's functions are marked forward_only.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition="pp=2 placement=modular" -dist-schedule="schedule=breadth-first pp=2 dp=2 zero=3 micro-batches=2 eval=true" -dist-insert-comm -dist-prefetch-gathers -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt | FileCheck %s --check-prefix=ZERO3
// Layered gradient accumulation at ZeRO 2 over 2 replicas: module 1's
// reduce-scatter starts after its last backward; both reduce-scatters are
// waited for, in the order they started, right before the optimizer,
// whose parameter all-gathers follow, waited for at the step's end. One
// replica runs every level as level 0 (rt.step_zero).
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=1 -dist-schedule="schedule=layered pp=1 dp=2 zero=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt | FileCheck %s --check-prefix=LAYERED
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-partition=pp=1 -dist-schedule="schedule=layered pp=1 dp=1 zero=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt | FileCheck %s --check-prefix=ONE
// Without a dist.program the pass does nothing.
// RUN: lamina-opt %s -convert-dist-to-rt | FileCheck %s --check-prefix=NONE

// CHECK: module attributes {{.*}}rt.dist = #rt.dist<kind = "1f1b", modules = 2, pp = 2, dp = 1, micro_batches = 2, zero = 0, placement = [0, 1], flat_params = [16, 16]>}
// CHECK-NOT: dist.program
// CHECK-LABEL: func.func @lamina_step_0(
// CHECK-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_0[0]{{$}}
// CHECK-NEXT:   rt.step_send %[[S]] 0, 0 to 1{{$}}
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_0[1]{{$}}
// CHECK-NEXT:   rt.step_send %[[S]] 0, 1 to 1{{$}}
// CHECK-NEXT:   rt.step_recv %[[S]] gradient 0, 0 from 1{{$}}
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_0[0]{{$}}
// CHECK-NEXT:   rt.step_accumulate %[[S]] 0{{$}}
// CHECK-NEXT:   rt.step_recv %[[S]] gradient 0, 1 from 1{{$}}
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_0[1]{{$}}
// CHECK-NEXT:   rt.step_accumulate %[[S]] 0{{$}}
// CHECK-NEXT:   rt.step_optimizer %[[S]]
// CHECK-NEXT:   rt.step_wait_send %[[S]] 0, 0 to 1
// CHECK-NEXT:   rt.step_wait_send %[[S]] 0, 1 to 1
// CHECK-NEXT:   return
// CHECK-LABEL: func.func @lamina_step_1(
// CHECK-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.step_pp = 1 : i64, rt.step_zero = 0 : i64} {
// CHECK-NEXT:   rt.step_recv %[[S]] 0, 0 from 0{{$}}
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_1[0]{{$}}
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_1[0]{{$}}
// CHECK-NEXT:   rt.step_accumulate %[[S]] 1
// CHECK-NEXT:   rt.step_send %[[S]] gradient 0, 0 to 0{{$}}
// CHECK-NEXT:   rt.step_recv %[[S]] 0, 1 from 0{{$}}
// CHECK-NEXT:   rt.step_call %[[S]] @fwd_1[1]{{$}}
// CHECK-NEXT:   rt.step_call %[[S]] @bwd_1[1]{{$}}
// CHECK-NEXT:   rt.step_accumulate %[[S]] 1
// CHECK-NEXT:   rt.step_send %[[S]] gradient 0, 1 to 0{{$}}
// CHECK-NEXT:   rt.step_optimizer %[[S]]
// CHECK-NEXT:   rt.step_wait_send %[[S]] gradient 0, 0 to 0
// CHECK-NEXT:   rt.step_wait_send %[[S]] gradient 0, 1 to 0
// CHECK-NEXT:   return

// ZERO3: rt.dist = #rt.dist<kind = "breadth-first", {{.*}}dp = 2, {{.*}}zero = 3, {{.*}}flat_params = [16, 16]>
// ZERO3-LABEL: func.func @lamina_step_0(
// ZERO3-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 3 : i64} {
// ZERO3-NEXT:   rt.step_all_gather %[[S]] 0{{$}}
// ZERO3-NEXT:   rt.step_use_weights %[[S]] 0
// ZERO3-NEXT:   rt.step_call %[[S]] @fwd_0[0]
// ZERO3-NEXT:   rt.step_send %[[S]] 0, 0 to 1
// ZERO3-NEXT:   rt.step_all_gather %[[S]] 0{{$}}
// ZERO3-NEXT:   rt.step_call %[[S]] @fwd_0[1]
// ZERO3-NEXT:   rt.step_send %[[S]] 0, 1 to 1
// ZERO3-NEXT:   rt.step_recv %[[S]] gradient 0, 1 from 1
// ZERO3-NEXT:   rt.step_use_weights %[[S]] 0
// ZERO3-NEXT:   rt.step_call %[[S]] @bwd_0[1]
// ZERO3-NEXT:   rt.step_accumulate %[[S]] 0{{$}}
// ZERO3-NEXT:   rt.step_recv %[[S]] gradient 0, 0 from 1
// ZERO3-NEXT:   rt.step_call %[[S]] @bwd_0[0]
// ZERO3-NEXT:   rt.step_accumulate %[[S]] 0{{$}}
// ZERO3-NEXT:   rt.step_reduce_scatter %[[S]] 0{{$}}
// ZERO3-NEXT:   rt.step_wait_gradients %[[S]] 0
// ZERO3-NEXT:   rt.step_optimizer %[[S]]
// ZERO3-NEXT:   rt.step_wait_send %[[S]] 0, 0 to 1
// ZERO3-NEXT:   rt.step_wait_send %[[S]] 0, 1 to 1
// ZERO3-NEXT:   return
// ZERO3-LABEL: func.func @lamina_step_1(
// ZERO3-LABEL: func.func @lamina_eval_step_0(
// ZERO3-SAME: %[[S:[^:]*]]: !rt.step) attributes {rt.forward_only, rt.step_pp = 0 : i64, rt.step_zero = 3 : i64} {
// ZERO3-NEXT:   rt.step_all_gather %[[S]] 0
// ZERO3-NEXT:   rt.step_use_weights %[[S]] 0
// ZERO3-NEXT:   rt.step_call %[[S]] @fwd_0[0]
// ZERO3-NEXT:   rt.step_send %[[S]] 0, 0 to 1
// ZERO3-NEXT:   rt.step_call %[[S]] @fwd_0[1]
// ZERO3-NEXT:   rt.step_send %[[S]] 0, 1 to 1
// ZERO3-NEXT:   rt.step_wait_send %[[S]] 0, 0 to 1
// ZERO3-NEXT:   rt.step_wait_send %[[S]] 0, 1 to 1
// ZERO3-NEXT:   return
// ZERO3-LABEL: func.func @lamina_eval_step_1(
// ZERO3-NOT:   rt.step_optimizer

// LAYERED-LABEL: func.func @lamina_step_0(
// LAYERED-SAME: rt.step_zero = 2 : i64
// LAYERED:      rt.step_call %[[S:[^ ]*]] @bwd_1[0]
// LAYERED-NEXT: rt.step_accumulate %[[S]] 1
// LAYERED-NEXT: rt.step_reduce_scatter %[[S]] 1
// LAYERED-NEXT: rt.step_call %[[S]] @bwd_0[1]
// LAYERED-NEXT: rt.step_accumulate %[[S]] 0
// LAYERED-NEXT: rt.step_call %[[S]] @bwd_0[0]
// LAYERED-NEXT: rt.step_accumulate %[[S]] 0
// LAYERED-NEXT: rt.step_reduce_scatter %[[S]] 0
// LAYERED-NEXT: rt.step_wait_gradients %[[S]] 1
// LAYERED-NEXT: rt.step_wait_gradients %[[S]] 0
// LAYERED-NEXT: rt.step_optimizer %[[S]]
// LAYERED-NEXT: rt.step_all_gather %[[S]] 0
// LAYERED-NEXT: rt.step_all_gather %[[S]] 1
// LAYERED-NEXT: rt.step_wait_weights %[[S]] 0
// LAYERED-NEXT: rt.step_wait_weights %[[S]] 1
// LAYERED-NEXT: return

// ONE-LABEL: func.func @lamina_step_0(
// ONE-SAME: rt.step_zero = 0 : i64
// ONE-NOT: rt.step_reduce_scatter
// ONE-NOT: rt.step_wait_gradients
// ONE: rt.step_optimizer

// NONE-NOT: rt.dist
// NONE-NOT: rt.step

func.func @forward(%w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.w"},
                   %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.w"},
                   %x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = graph.matmul %0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %2 : tensor<f32>
}
